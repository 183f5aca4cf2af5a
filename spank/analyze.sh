#!/bin/sh
# analyze.sh: gcc's static analyzer (-fanalyzer) over the plugin, the hooks and the core.
#   sh analyze.sh CC SUPPRESSIONS FILE.c...   (make -C spank analyze; make lint)
# Every warning must be listed in SUPPRESSIONS as "FILE FUNCTION -Wanalyzer-KIND reason":
# a new one fails the run; a listed one that no longer occurs is reported, so the list
# shrinks with the code. Extra compiler flags come from ANALYZE_FLAGS.
set -u
cc=$1 supp=$2
shift 2
out=$(mktemp) || exit 2
trap 'rm -f "$out"' EXIT
for f in "$@"; do
	# Plain output: one diagnostic a line, the function named on the line before.
	LC_ALL=C $cc -fanalyzer -fdiagnostics-plain-output $ANALYZE_FLAGS -c "$f" \
		-o /dev/null 2>&1 | awk -v file="$f" '
		/: In function / { fn = $0; sub(/.*In function .?/, "", fn); sub(/.?:$/, "", fn) }
		/: warning: / {
			kind = $0; sub(/.*\[-W/, "-W", kind); sub(/\].*/, "", kind)
			print file, fn, kind, $0
		}' >>"$out"
done
rc=0
while read -r file fn kind line; do
	if ! grep -v '^#' "$supp" | grep -q -F -- "$file $fn $kind "; then
		echo "analyze: new warning (fix it, or list it in $supp with the reason): $line" >&2
		rc=1
	fi
done <"$out"
grep -v -e '^#' -e '^$' "$supp" | while read -r file fn kind why; do
	grep -q -F -- "$file $fn $kind " "$out" ||
		echo "analyze: $supp: $file $fn $kind no longer occurs: remove the line" >&2
done
[ $rc -eq 0 ] && echo "analyze: $(wc -l <"$out") warning(s), all reviewed in $supp"
exit $rc
