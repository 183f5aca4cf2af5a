#!/usr/bin/env bash
# Run each libFuzzer target FUZZ_SECONDS seconds from its seed corpus and dictionary,
# FUZZ_JOBS targets at a time (default: one per CPU; each target is one process on one CPU,
# so every target gets its FUZZ_SECONDS whatever the number at once).
# Prints libFuzzer's final "Done N runs" line per target; exits 1 when any target found a
# crash, a leak or a sanitizer report (its input is left in build/artifacts/TARGET/).
set -uo pipefail
cd "$(dirname "$0")" || exit 2
secs=${FUZZ_SECONDS:-10}
jobs=${FUZZ_JOBS:-$(nproc)}
logs=${FUZZ_LOGDIR:-build/logs}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# fuzz_one TARGET: runs it, prints its one line, exits 1 on a finding.
fuzz_one() {
	local t=$1 work=build/corpus/$1 art=build/artifacts/$1 log=$logs/$1.log dict=()
	mkdir -p "$work" "$art" "$logs"
	[ -f "dict/$t.dict" ] && dict=(-dict="dict/$t.dict")
	# shellcheck disable=SC2086
	build/$t -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
		-artifact_prefix="$art/" "${dict[@]}" ${FUZZ_FLAGS:-} \
		"$work" "corpus/$t" >"$log" 2>&1
	local rc=$? done_line cov
	done_line=$(grep -E '^Done [0-9]+ runs' "$log" | tail -1)
	cov=$(grep -E '^#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE|INITED).*cov:' "$log" | tail -1 | grep -oE 'cov: [0-9]+ ft: [0-9]+')
	if [ $rc -ne 0 ] || grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:' "$log"; then
		echo "fuzz: $t FAILED (rc $rc); log $PWD/$log:" >&2
		grep -E 'ERROR|runtime error|SUMMARY|artifact' "$log" | head -20 >&2
		return 1
	fi
	echo "fuzz: $t: $done_line ($cov)"
}

fail=0
running=0
for t in "$@"; do
	if [ "$running" -ge "$jobs" ]; then
		wait -n || fail=1
		running=$((running - 1))
	fi
	fuzz_one "$t" &
	running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
	wait -n || fail=1
	running=$((running - 1))
done
exit $fail
