"""Small squashfs test images for cluster tests, built on a node from the node's own binaries.

No busybox and no registry are needed: a minimal root filesystem is assembled from the
node's coreutils, shells and the libraries ``ldd`` names, given a distinct
``/etc/os-release`` (so a test can prove it read the image, not the host) and an
``/etc/environment``, then squashed with ``mksquashfs -comp lzo -noD`` (Enroot's
format). ``extra_mb`` adds incompressible data to reach a target size (benchmarks).

Cluster tests and benchmarks reuse :func:`build_image`; the ``base_image`` fixture
(conftest.py) builds the base test image with it once per session.
"""

from __future__ import annotations

import hashlib
import shlex

from .cluster import Cluster

IMAGE_DIR = "/fsx/images/squall-test"
SCRIPT = f"{IMAGE_DIR}/mkimage.sh"

# Run as root on a node: mkimage.sh OUT OS_ID EXTRA_MB [KEY=VALUE ...] (environment lines)
MKIMAGE = r"""#!/bin/bash
set -euo pipefail
out=$1 os_id=$2 extra_mb=$3
shift 3
tmp=$(mktemp -d /tmp/squall-img.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
root=$tmp/root
# var/lock and var/run as a Debian image has them: Enroot makes a missing mount point
# mode 000, which `enroot export` (--container-save) then cannot read.
mkdir -p "$root"/{usr/bin,etc,proc,sys,dev,tmp,run,home,root,fsx,work,data,scratch}
mkdir -p "$root"/var/{tmp,lock,run}
# Mount targets that exist in the image (an unprivileged runtime cannot create them in
# a root-owned tree).
mkdir -p "$root"/mnt/{rw,ro,tmp,a,b}
# Where slurmd keeps batch scripts: the plugin binds the script at the same path.
mkdir -p -m 1777 "$root/var/spool/slurmd"
chmod 1777 "$root/tmp" "$root/var/tmp"
ln -s usr/bin "$root/bin"
ln -s usr/bin "$root/sbin"
bins=()
for b in sh dash bash cat readlink env pwd touch sleep id ls mkdir true false stat echo \
         head tail hostname printenv tr wc sort grep rm cp mv ln basename dirname kill ps \
         sed awk uname date mount umount; do
    p=$(type -P "$b" || true)
    if [ -n "$p" ]; then cp -L "$p" "$root/usr/bin/$b"; bins+=("$p"); fi
done
for f in "${bins[@]}"; do
    ldd "$f" 2>/dev/null |
        awk '/=>/ && $3 ~ /^\// {print $3} /^\t\/[^ ]*ld-linux/ {print $1}' || true
done | sort -u | while read -r lib; do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
done
# procps (ps) reads its library from the multiarch dir; keep /lib64 and /lib as real dirs.
cat >"$root/etc/os-release" <<OS
NAME="squall test image"
ID=$os_id
PRETTY_NAME="squall test image $os_id"
VERSION_ID=1
OS
getent passwd root squall >"$root/etc/passwd"
getent group root squall >"$root/etc/group"
printf '%s\n' "$@" >"$root/etc/environment"
echo "$os_id" >"$root/etc/squall-image-id"
# Which script made it: an image made by an older one is made again (build_image).
echo "${SQUALL_MKIMAGE:-}" >"$root/etc/squall-mkimage"
# Like the /etc/rc and entrypoint that `enroot import` writes for an image with
# WORKDIR /work and an ENTRYPOINT: the entrypoint marks the environment, then execs.
cat >"$root/etc/rc" <<'RC'
mkdir -p "/work" 2>/dev/null
cd "/work" && unset OLDPWD || exit 1
if [ -s /etc/rc.local ]; then . /etc/rc.local; fi
if [ $# -gt 0 ]; then exec /usr/bin/squall-entrypoint "$@"; fi
exec /usr/bin/squall-entrypoint /bin/sh
RC
cat >"$root/usr/bin/squall-entrypoint" <<'EP'
#!/bin/sh
echo "squall-entrypoint: ran"
export SQUALL_ENTRYPOINT_RAN=1
exec "$@"
EP
chmod 0755 "$root/usr/bin/squall-entrypoint"
i=0
while [ "$i" -lt "$extra_mb" ]; do
    n=$(( extra_mb - i < 64 ? extra_mb - i : 64 ))
    head -c "$(( n * 1048576 ))" /dev/urandom >"$root/data/blob-$i"
    i=$(( i + n ))
done
mkdir -p "$(dirname "$out")"
mksquashfs "$root" "$out.tmp.$$" -noappend -quiet -no-progress -comp lzo -noD -all-root >/dev/null
chmod 0644 "$out.tmp.$$"
chown 1000:1000 "$out.tmp.$$"
mv -f "$out.tmp.$$" "$out"
"""


def build_image(cluster: Cluster, path: str, os_id: str, extra_mb: int = 0,
                env: dict[str, str] | None = None, node: str = "login",
                rebuild: bool = False, script: tuple[str, str] = (SCRIPT, MKIMAGE)) -> str:
    """Build (or reuse) a squashfs image at ``path`` (under /fsx) whose os-release ID is
    os_id, made by ``script`` (its path on /fsx, its text): one an older script made is
    made again."""
    where, text = script
    cluster.put(where, text, mode=0o755)
    lines = " ".join(shlex.quote(f"{k}={v}") for k, v in (env or {}).items())
    made_by = hashlib.sha256(text.encode()).hexdigest()[:16]
    if not rebuild:
        have = cluster.run(f"grep -qx {shlex.quote(os_id)} <(unsquashfs -cat {path} "
                           f"etc/squall-image-id 2>/dev/null) && grep -qx {made_by} "
                           f"<(unsquashfs -cat {path} etc/squall-mkimage 2>/dev/null)",
                           node=node, user="root", check=False, timeout=60)
        if have.rc == 0:
            return path
    cluster.run(f"SQUALL_MKIMAGE={made_by} bash {where} {shlex.quote(path)} "
                f"{shlex.quote(os_id)} {int(extra_mb)} {lines}",
                node=node, user="root", timeout=900)
    return path


IMAGE_ENV = {"SQUALL_IMAGE_VAR": "from-image", "SQUALL_BOTH_VAR": "image-value",
             "PATH": "/usr/local/bin:/usr/bin:/bin"}
