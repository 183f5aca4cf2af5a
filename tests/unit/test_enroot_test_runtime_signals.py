"""The Enroot TEST DOUBLE fails under signals where Enroot 4.1.2 fails (issue 9).

Facts (../shared/reference/enroot-contract.md, "More facts from Enroot 4.1.2"): starting
from a squashfs, a ``fuse-shim`` bash in its own process group runs
``squashfuse -f -o uid=EUID,gid=EGID`` and stops itself; squashfuse dies on
SIGUSR1/SIGUSR2/SIGALRM, unmounts on SIGTERM/SIGHUP and keeps SIGINT ignored; a SIGCONT to
the shim lets it exit and takes the mounts with it. Slurm's proctrack/linuxproc sends every
job signal to every process under slurmstepd, so the double must break the same way, or
the plugin's tests could never see the defect. Runs as root on the host.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import test_enroot_test_runtime as rt

# The runtime tests' fixtures, registered in this module by name.
prerequisites, base_tree, env, image = rt.prerequisites, rt.base_tree, rt.env, rt.image
ENROOT, wait_until_clean = rt.ENROOT, rt.wait_until_clean


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]


def stat_fields(pid: int) -> list[str]:
    """Fields of /proc/PID/stat after the command name: state, ppid, pgrp, session, ..."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


JOB_SIGNALS = (signal.SIGHUP, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM)


def _default_job_signals() -> None:
    """A task starts with these at their defaults, as slurmstepd starts it. A suite run under
    ``nohup`` would otherwise hand squashfuse an ignored SIGHUP, which libfuse leaves
    ignored (it only installs its handlers over defaults): seen in a CI run under nohup."""
    for sig in JOB_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)


class Stopped:
    """`enroot start IMAGE sh -c 'kill -STOP $$; cat /etc/os-release'`, stopped: the
    plugin's pattern. The container main process, its fuse-shim and squashfuse."""

    def __init__(self, env: dict[str, str], image: Path) -> None:
        self.proc = subprocess.Popen(
            [str(ENROOT), "start", str(image), "sh", "-c",
             "kill -STOP $$; cat /etc/os-release && echo read-ok"],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True, preexec_fn=_default_job_signals)
        try:
            _, status = os.waitpid(self.proc.pid, os.WUNTRACED)
            assert os.WIFSTOPPED(status), self.proc.stderr.read()
            shims = [c for c in children(self.proc.pid) if cmdline(c)[:1] == ["fuse-shim"]]
            assert len(shims) == 1, [cmdline(c) for c in children(self.proc.pid)]
            self.shim = shims[0]
            # A zombie child of the stopped shim has an empty command line: skip it.
            fuse = [c for c in children(self.shim)
                    if [Path(a).name for a in cmdline(c)[:1]] == ["squashfuse"]]
            assert len(fuse) == 1, [cmdline(c) for c in children(self.shim)]
            self.squashfuse = fuse[0]
        except BaseException:
            self.kill()   # the group's orphaning ends the rest
            raise

    def resume(self) -> tuple[str, str]:
        """SIGCONT the main process: its command reads a file of the image."""
        os.kill(self.proc.pid, signal.SIGCONT)
        out, err = self.proc.communicate(timeout=30)
        return out.decode(), err.decode()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close(), self.proc.stderr.close()


@pytest.fixture()
def stopped(env, image):
    s = Stopped(env, image)
    yield s
    s.kill()
    wait_until_clean(image, Path(env["ENROOT_RUNTIME_PATH"]))


def test_shim_has_its_own_process_group_and_runs_squashfuse_as_the_user(stopped):
    main, shim, fuse = stopped.proc.pid, stopped.shim, stopped.squashfuse
    state, ppid, pgrp, session = stat_fields(shim)[:4]
    assert state == "T" and int(ppid) == main
    assert int(pgrp) == shim != int(stat_fields(main)[2])
    assert int(session) == int(stat_fields(main)[3])
    assert int(stat_fields(fuse)[2]) == shim, "squashfuse runs in the shim's process group"
    args = cmdline(fuse)
    assert args[1:3] == ["-f", "-o"] and args[3].startswith("uid="), args
    assert ",gid=" in args[3], args
    # Started by a shell without job control: SIGINT ignored, as in Enroot.
    ignored = int(next(line.split()[1] for line in
                       Path(f"/proc/{fuse}/status").read_text().splitlines()
                       if line.startswith("SigIgn:")), 16)
    assert ignored & (1 << (signal.SIGINT - 1))
    out, _ = stopped.resume()
    assert out.startswith("ID=squalltest") and "read-ok" in out


@pytest.mark.parametrize("target,sig", [
    ("shim", signal.SIGCONT),
    ("squashfuse", signal.SIGUSR1),
    ("squashfuse", signal.SIGUSR2),
    ("squashfuse", signal.SIGALRM),
    ("squashfuse", signal.SIGTERM),
    ("squashfuse", signal.SIGHUP),
])
def test_job_signals_to_the_runtime_take_the_root_filesystem_away(stopped, target, sig):
    pid = stopped.shim if target == "shim" else stopped.squashfuse
    os.kill(pid, sig)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{stopped.squashfuse}").exists() and \
            stat_fields(stopped.squashfuse)[0] != "Z":
        assert time.monotonic() < deadline, f"squashfuse still runs after {sig!r} to the {target}"
        time.sleep(0.02)
    out, err = stopped.resume()
    assert "read-ok" not in out, (out, err)


def test_sigint_to_squashfuse_is_ignored(stopped):
    os.kill(stopped.squashfuse, signal.SIGINT)
    time.sleep(0.3)
    out, err = stopped.resume()
    assert out.startswith("ID=squalltest") and "read-ok" in out, err


def test_main_process_gone_tears_the_shim_down(env, image, stopped):
    """The orphaned stopped process group gets SIGHUP and SIGCONT from the kernel."""
    os.kill(stopped.proc.pid, signal.SIGKILL)
    stopped.proc.wait()
    wait_until_clean(image, Path(env["ENROOT_RUNTIME_PATH"]))
    # The shim may still be exiting (state D while the kernel tears its mounts down): it must
    # be gone, or a zombie, within seconds.
    deadline = time.monotonic() + 10
    while True:
        try:
            state = stat_fields(stopped.shim)[0]
        except FileNotFoundError:
            break
        if state == "Z":
            break
        assert time.monotonic() < deadline, f"the shim is still there, state {state}"
        time.sleep(0.05)
