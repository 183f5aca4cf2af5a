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
ENROOT = "/opt/enroot-test-runtime/bin/enroot"
PLUGIN = "/usr/local/lib/squall/spank_squall.so"
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
    line = f"required {PLUGIN} {args}".rstrip()
    for node in nodes:
        cluster.run(f"cp -p {PLUGSTACK} {backup} && "
                    f"sed -i '/spank_squall.so/c\\{line}' {PLUGSTACK}", node=node, user="root")
    try:
        yield
    finally:
        for node in nodes:
            cluster.run(f"cp -p {backup} {PLUGSTACK} && rm -f {backup}", node=node, user="root")


def current_args(cluster: Cluster, node: str = NODE) -> str:
    """The plugin's arguments in the node's plugstack.conf, as the image wrote them."""
    line = cluster.run(f"grep spank_squall.so {PLUGSTACK}", node=node, user="root").out.strip()
    return line.split(PLUGIN, 1)[1].strip()


# An image as `enroot import` leaves it, without the test images' comfort: no world-writable
# /var/spool/slurmd for the batch script, everything root-owned in the squashfs, no passwd
# entry for the user (Enroot's 10-shadow hook adds it), /etc/debian_version (Enroot's apt
# hooks look for it), and the tools the seccomp and namespace tests need.
PLAIN_EXTRA_BINS = "chown setpriv ipcmk ipcs getent whoami findmnt"


def build_plain_image(cluster: Cluster, path: str, os_id: str,
                      env: dict[str, str] | None = None) -> str:
    script = (MKIMAGE
              .replace('mkdir -p -m 1777 "$root/var/spool/slurmd"\n', "")
              .replace('         sed awk uname date mount; do',
                       f'         sed awk uname date mount {PLAIN_EXTRA_BINS}; do')
              .replace('getent passwd root squall >', 'getent passwd root >')
              .replace('getent group root squall >', 'getent group root >')
              .replace('echo "$os_id" >"$root/etc/squall-image-id"',
                       'echo "$os_id" >"$root/etc/squall-image-id"\n'
                       'echo 13.0 >"$root/etc/debian_version"\n'
                       'mkdir -p "$root/etc/apt/apt.conf.d"'))
    assert "debian_version" in script and PLAIN_EXTRA_BINS in script
    plain = SCRIPT.replace("mkimage.sh", "mkimage-plain.sh")
    cluster.put(plain, script, mode=0o755)
    lines = " ".join(shlex.quote(f"{k}={v}") for k, v in (env or {}).items())
    have = cluster.run(f"grep -qx {shlex.quote(os_id)} <(unsquashfs -cat {path} "
                       "etc/squall-image-id 2>/dev/null)", user="root", check=False, timeout=60)
    if have.rc != 0:
        cluster.run(f"bash {plain} {shlex.quote(path)} {shlex.quote(os_id)} 0 {lines}",
                    user="root", timeout=900)
    return path


def base_image(cluster: Cluster) -> str:
    from .images import IMAGE_ENV
    return build_image(cluster, f"{IMAGE_DIR}/base.sqsh", "squalltest", env=IMAGE_ENV)


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
