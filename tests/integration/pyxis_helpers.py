"""Helpers of the Pyxis conformance suite (test_pyxis_*.py): steps, plugstack lines, images.

Written from Pyxis 0.24's documented behaviour (shared/reference/pyxis-compat.md and
Pyxis's own documentation); each test is named after the Pyxis flag, environment form
or plugstack key it checks.
"""

from __future__ import annotations

import contextlib
import shlex
import time
from collections.abc import Iterator

from .cluster import Cluster, Result
from .images import IMAGE_DIR, MKIMAGE, SCRIPT, build_image

NODE = "node1"
HOME = "/fsx/home/squall"
ENROOT = "/usr/bin/enroot"
PLUGSTACK = "/etc/slurm/plugstack.conf"


def srun(cluster: Cluster, args: str, cmd: str, check: bool = True,
         env: dict[str, str] | None = None, node: str = NODE, timeout: float = 120) -> Result:
    """``srun -N1 -w NODE ARGS bash -c CMD`` as the test user, from the login node."""
    return cluster.run(f"srun -N1 -w {node} {args} bash -c {shlex.quote(cmd)}", check=check,
                       env=env, timeout=timeout)


def mounted(path: str) -> str:
    """Shell test: is ``path`` (a word the shell expands, e.g. "$HOME") a mount point?
    (The test images have no findmnt.)"""
    return f"awk -v p={path} '$5 == p {{f = 1}} END {{exit !f}}' /proc/self/mountinfo"


def last_line(res: Result) -> str:
    lines = res.out.strip().splitlines()
    return lines[-1] if lines else ""


def error_lines(res: Result) -> list[str]:
    return [line for line in res.err.splitlines() if line.startswith("squall: error: ")]


def warning_lines(res: Result) -> list[str]:
    return [line for line in res.err.splitlines() if line.startswith("squall: warning: ")]


@contextlib.contextmanager
def plugstack_args(cluster: Cluster, args: str, nodes: tuple[str, ...] = (NODE,)) -> Iterator[None]:
    """Replace the arguments of the plugin's plugstack.conf line on ``nodes`` (e.g. with a
    Pyxis site's arguments), restoring the file afterwards."""
    backup = f"/root/plugstack-{time.time_ns()}.bak"
    for node in nodes:
        line = f"required {plugin_path(cluster, node)} {args}".rstrip()
        cluster.run(f"cp -p {PLUGSTACK} {backup} && "
                    f"sed -i '/spank_squall.so/c\\{line}' {PLUGSTACK}", node=node, user="root")
    try:
        yield
    finally:
        for node in nodes:
            cluster.run(f"cp -p {backup} {PLUGSTACK} && rm -f {backup}", node=node, user="root")


def _plugin_line(cluster: Cluster, node: str) -> list[str]:
    res = cluster.run(f"grep -m1 '^required .*spank_squall.so' {PLUGSTACK}", node=node,
                      user="root")
    return res.out.split()


def plugin_path(cluster: Cluster, node: str = NODE) -> str:
    """Where the node's package installed the plugin (Slurm's PluginDir), as its line says."""
    return _plugin_line(cluster, node)[1]


def current_args(cluster: Cluster, node: str = NODE) -> str:
    """The plugin's arguments in the node's plugstack.conf, as the image wrote them."""
    return " ".join(_plugin_line(cluster, node)[2:])


# An image as `enroot import` leaves it, without the test images' comfort: no world-writable
# /var/spool/slurmd for the batch script, everything root-owned in the squashfs, no passwd
# entry for the user (Enroot's 10-shadow hook adds it), /etc/debian_version (Enroot's apt
# hooks look for it), and the tools the seccomp and namespace tests need.
PLAIN_EXTRA_BINS = "chown setpriv ipcmk ipcs getent whoami findmnt"


def build_plain_image(cluster: Cluster, path: str, os_id: str,
                      env: dict[str, str] | None = None) -> str:
    script = (MKIMAGE
              .replace('mkdir -p -m 1777 "$root/var/spool/slurmd"\n', "")
              .replace('         sed awk uname date mount umount; do',
                       f'         sed awk uname date mount umount {PLAIN_EXTRA_BINS}; do')
              .replace('getent passwd root squall >', 'getent passwd root >')
              .replace('getent group root squall >', 'getent group root >')
              .replace('echo "$os_id" >"$root/etc/squall-image-id"',
                       'echo "$os_id" >"$root/etc/squall-image-id"\n'
                       'echo 13.0 >"$root/etc/debian_version"\n'
                       'mkdir -p "$root/etc/apt/apt.conf.d"'))
    assert "debian_version" in script and PLAIN_EXTRA_BINS in script
    plain = SCRIPT.replace("mkimage.sh", "mkimage-plain.sh")
    build_image(cluster, path, os_id, env=env, script=(plain, script))
    return path


def plain_image(cluster: Cluster) -> str:
    from .images import IMAGE_ENV
    return build_plain_image(cluster, f"{IMAGE_DIR}/plain.sqsh", "squallplain", env=IMAGE_ENV)


def wait_for(cluster: Cluster, path: str, timeout: float = 60) -> str:
    """Wait until a file under /fsx exists and ends with a newline; return its text."""
    host = cluster.fsx_host / path[len("/fsx/"):]
    deadline = time.monotonic() + timeout
    while not (host.exists() and host.read_text().endswith("\n")):
        assert time.monotonic() < deadline, f"{path} did not appear within {timeout}s"
        time.sleep(0.2)
    return host.read_text()


def allocate(cluster: Cluster, node: str = NODE) -> str:
    out = cluster.run(f"salloc -N1 -w {node} --no-shell 2>&1").out
    return out.split("Granted job allocation ")[1].split()[0]


def background_step(cluster: Cluster, jobid: str, args: str, cmd: str) -> None:
    """Start a step in the allocation that runs until cancelled (its output discarded)."""
    cluster.run(f"setsid nohup srun --jobid={jobid} -N1 --overlap {args} "
                f"bash -c {shlex.quote(cmd)} > /dev/null 2>&1 < /dev/null &")


def end_job(cluster: Cluster, jobid: str) -> None:
    cluster.run(f"scancel {jobid}", check=False)
    cluster.wait_job(jobid, {"CANCELLED", "COMPLETED"}, timeout=60)


# Run as root on a node: mkapt.sh OUT REPO. A small Debian image holding apt and dpkg (from the
# node's own binaries), and a flat local repository with one package whose file is owned by
# uid 4242, which no container's user namespace maps: dpkg's chown then only works under
# the task seccomp filter, and apt's sandbox only with Enroot's apt and shadow hooks.
MKAPT = r"""#!/bin/bash
set -euo pipefail
out=$1 repo=$2
tmp=$(mktemp -d /tmp/squall-apt.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
root=$tmp/root
for d in usr/bin usr/sbin usr/lib/apt usr/share etc/apt/apt.conf.d etc/apt/preferences.d \
         etc/apt/sources.list.d etc/dpkg/dpkg.cfg.d proc sys dev tmp run root var/tmp \
         var/log/apt var/cache/apt/archives/partial var/lib/apt/lists/partial var/lib/dpkg/info \
         var/lib/dpkg/updates var/lib/dpkg/triggers var/lib/dpkg/alternatives repo; do
    mkdir -p "$root/$d"
done
chmod 1777 "$root/tmp" "$root/var/tmp"
ln -s usr/bin "$root/bin"
ln -s usr/sbin "$root/sbin"
files=()
for b in sh bash cat ls rm mkdir mv cp ln tar id env grep sed stat getent diff ldconfig tail \
         head chown setpriv apt-get apt-cache dpkg dpkg-deb dpkg-split dpkg-query dpkg-trigger \
         dpkg-maintscript-helper start-stop-daemon; do
    p=$(type -P "$b" || true)
    [ -n "$p" ] || continue
    case $p in */sbin/*) dest=usr/sbin ;; *) dest=usr/bin ;; esac
    cp -L "$p" "$root/$dest/$b"
    files+=("$p")
done
cp -a /usr/lib/apt/methods "$root/usr/lib/apt/"
files+=(/usr/lib/apt/methods/*)
for f in "${files[@]}"; do
    ldd "$f" 2>/dev/null |
        awk '/=>/ && $3 ~ /^\// {print $3} /^\t\/[^ ]*ld-linux/ {print $1}' || true
done | sort -u | while read -r lib; do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
done
cp -a /usr/share/dpkg "$root/usr/share/"
cp -a /etc/dpkg/dpkg.cfg.d/. "$root/etc/dpkg/dpkg.cfg.d/" 2>/dev/null || true
echo 13.0 >"$root/etc/debian_version"
printf 'ID=squallapt\n' >"$root/etc/os-release"
echo squallapt >"$root/etc/squall-image-id"
getent passwd root _apt >"$root/etc/passwd"
getent group root nogroup >"$root/etc/group"
: >"$root/var/lib/dpkg/status"
: >"$root/var/lib/dpkg/available"
printf 'deb [trusted=yes] file:/repo ./\n' >"$root/etc/apt/sources.list"
printf 'PATH=/usr/sbin:/usr/bin:/sbin:/bin\n' >"$root/etc/environment"
mksquashfs "$root" "$out.tmp.$$" -noappend -quiet -no-progress -comp lzo -noD -all-root >/dev/null
chmod 0644 "$out.tmp.$$"
mv -f "$out.tmp.$$" "$out"
# The repository: one package, its file owned by an id no container maps.
pkg=$tmp/pkg
mkdir -p "$pkg/DEBIAN" "$pkg/usr/bin" "$repo"
printf 'Package: squall-hello\nVersion: 1.0\nArchitecture: all\n%s\n%s\n' \
    'Maintainer: squall tests <t@example.invalid>' 'Description: hello from a package' \
    >"$pkg/DEBIAN/control"
printf '#!/bin/sh\necho hello-from-a-package\n' >"$pkg/usr/bin/squall-hello"
chmod 0755 "$pkg/usr/bin/squall-hello"
chown -R 4242:4242 "$pkg/usr"
deb=$repo/squall-hello_1.0_all.deb
dpkg-deb --build "$pkg" "$deb" >/dev/null
{
    dpkg-deb -f "$deb"
    printf 'Filename: ./squall-hello_1.0_all.deb\nSize: %s\nSHA256: %s\n\n' \
        "$(stat -c %s "$deb")" "$(sha256sum "$deb" | cut -d' ' -f1)"
} >"$repo/Packages"
chmod -R a+rX "$repo"
"""


def apt_image(cluster: Cluster) -> tuple[str, str]:
    """(image, repository directory) of MKAPT, built once."""
    path, repo = f"{IMAGE_DIR}/apt.sqsh", f"{IMAGE_DIR}/aptrepo"
    script = f"{IMAGE_DIR}/mkapt.sh"
    cluster.put(script, MKAPT, mode=0o755)
    have = cluster.run(f"grep -qx squallapt <(unsquashfs -cat {path} etc/squall-image-id "
                       f"2>/dev/null) && test -s {repo}/Packages", user="root", check=False,
                       timeout=60)
    if have.rc != 0:
        cluster.run(f"bash {script} {path} {repo}", user="root", timeout=900)
    return path, repo


@contextlib.contextmanager
def running_step(cluster: Cluster, args: str, first: str,
                 name: str | None = None) -> Iterator[tuple[str, str]]:
    """A container step that runs until the block ends, in an allocation of its own on
    NODE: it runs ``first`` (whose stdout is the ready text), then sleeps. Yields (jobid,
    ready text). The job ends afterwards, and the named container ``name`` is removed."""
    ready = f"{HOME}/running-{time.time_ns()}.ready"
    jobid = allocate(cluster)
    try:
        background_step(cluster, jobid, f"{args} --container-mounts={HOME}",
                        f"{{ {first}; }} > {ready}.tmp && mv {ready}.tmp {ready} "
                        "&& exec sleep 300")
        yield jobid, wait_for(cluster, ready).strip()
    finally:
        end_job(cluster, jobid)
        if name is not None:
            cluster.run(f"{ENROOT} remove -f pyxis_{name}", node=NODE, check=False)
