"""One cluster test's directory on /fsx and how to run squall's commands there (the
``site`` and ``pylib`` fixtures in conftest.py), for the mksbatch and failover tests.

What runs on the login node is the working tree's squall (python/squall copied to /fsx
and put first on PYTHONPATH), so these tests check this checkout, not whatever the node
image installed; set SQUALL_TEST_INSTALLED=1 to use the installed `mksbatch` instead.
The demo's container section: SQUALL_DEMO_CONTAINER=1 keeps it (the image
/fsx/images/demo.sqsh, or $SQUALL_DEMO_IMAGE, must exist), 0 removes it, unset/auto keeps it
when that image exists (use_container).
"""

from __future__ import annotations

import os
import shlex
import time
from dataclasses import dataclass
from pathlib import Path

from .cluster import ROOT, Cluster

DEMO_DIR = ROOT / "sbatch" / "demo"
DEMO_IMAGE = os.environ.get("SQUALL_DEMO_IMAGE", "/fsx/images/demo.sqsh")


@dataclass
class Site:
    """One test's directory on /fsx and how to run squall's commands there."""

    cluster: Cluster
    base: str          # /fsx/squall-tests/mksbatch/<id>, as the nodes see it
    pythonpath: str    # "" when using the installed squall

    @property
    def host(self) -> Path:
        return self.cluster.fsx_host / self.base[len("/fsx/"):]

    def env(self) -> dict[str, str]:
        return {"PYTHONPATH": self.pythonpath} if self.pythonpath else {}

    def mksbatch(self, args: str, timeout: float = 60, check: bool = True):
        if self.pythonpath:
            cmd = ("python3 -c 'from squall.mksbatch.cli import main; main()' "
                   f"{args}")
        else:
            cmd = f"mksbatch {args}"
        return self.cluster.run(f"cd {shlex.quote(self.base)} && {cmd}", env=self.env(),
                                timeout=timeout, check=check)

    def python(self, code: str, timeout: float = 120):
        return self.cluster.run(f"cd {shlex.quote(self.base)} && python3 -c "
                                f"{shlex.quote(code)}", env=self.env(), timeout=timeout)


def copy_squall(cluster: Cluster, dest: str) -> None:
    src = ROOT / "python" / "squall"
    for path in sorted(src.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".c":
            rel = path.relative_to(src)
            mode = 0o755 if os.access(path, os.X_OK) else 0o644
            cluster.put(f"{dest}/squall/{rel}", path.read_bytes(), mode=mode)


def use_container(cluster: Cluster) -> bool:
    wanted = os.environ.get("SQUALL_DEMO_CONTAINER", "auto")
    if wanted in ("0", "1"):
        return wanted == "1"
    return (cluster.fsx_host / DEMO_IMAGE[len("/fsx/"):]).exists()


def job_log(site: Site, job_id: int) -> str:
    logs = list((site.host / "logs").glob(f"*-{job_id}.out"))
    return logs[0].read_text() if logs else "(no job log)"


def wait_for(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.5)
