"""``squall steps`` on the mini cluster (issue 43, docs/why-is-my-job-slow.md).

One job of 6 ranks (2 per node) runs programs/steps_train.py (a coupled loop timed with
squall_steps: data, forward, backward, an all-reduce over TCP, optimizer) four times, with
a fault injected each time but the first: rank 3's batch waits 0.6 s every 5th step; every
rank's all-reduce waits 0.25 s; node3's ranks busy-loop 0.12 s more in compute. Each gives
its verdict, naming the rank, node and section, through ``squall steps`` on the login node
as the job's user (and as root); the balanced run is found by its job id alone (its files
in ``.squall-steps-JOBID`` next to the job's log). Each plot is a PNG of real size with
many colours (``SQUALL_STEPS_PNG_DIR=DIR`` keeps them: docs/images/ holds one of each).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .cluster import Cluster
from .images import IMAGE_DIR, MKIMAGE, build_image

pytestmark = pytest.mark.cluster
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SCENARIOS = {  # name: (program arguments, kind, rank, node, section)
    "balanced": ("", "balanced", None, None, None),
    "data": ("--data-slow=3:5:0.6", "data", 3, "node2", "data"),
    "allreduce": ("--allreduce-delay=0.25", "allreduce", None, None, "allreduce"),
    "straggler": ("--slow-node=node3:0.12", "straggler", None, "node3", "compute"),
}
SQUALL = "import sys; from squall.cli import main; sys.argv[0] = 'squall'; main()"


def copy_python(cluster: Cluster, dest: str) -> None:
    """This checkout's squall and squall_steps, for the nodes' python3."""
    for package in ("squall", "squall_steps"):
        src = ROOT / "python" / package
        for path in sorted(src.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".c":
                cluster.put(f"{dest}/{package}/{path.relative_to(src)}", path.read_bytes())


def script(base: str) -> str:
    runs = []
    for port, (name, (args, *_)) in enumerate(SCENARIOS.items(), 29611):
        where = (f"{base}/logs/.squall-steps-$SLURM_JOB_ID" if name == "balanced"
                 else f"{base}/{name}")
        runs.append(f"mkdir -p {where}\n"
                    f"SQUALL_STEPS_DIR={where} MASTER_PORT={port} "
                    f"srun python3 {base}/steps_train.py {args}\n")
    return ("#!/bin/bash\n"
            f"#SBATCH --nodes=3 --ntasks-per-node=2 --output={base}/logs/%j.out\n"
            "set -e\n"
            f"export PYTHONPATH={base}/python\n"
            'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)\n'
            + "".join(runs))


@pytest.fixture(scope="module")
def job(cluster: Cluster) -> tuple[str, str]:
    base = f"/fsx/squall-tests/steps/{time.time_ns()}"
    copy_python(cluster, f"{base}/python")
    cluster.put(f"{base}/steps_train.py", (HERE / "programs" / "steps_train.py").read_bytes(),
                mode=0o755)
    cluster.put(f"{base}/logs/.keep", "")
    jobid = cluster.sbatch(script(base))
    cluster.wait_job(jobid, {"COMPLETED"}, timeout=180)
    return jobid, base


def squall_steps(cluster: Cluster, base: str, args: str, user: str = "squall") -> dict:
    res = cluster.run(f"PYTHONPATH={base}/python python3 -c \"{SQUALL}\" steps {args} --json",
                      user=user)
    return json.loads(res.out)


def where(name: str, jobid: str, base: str) -> str:
    return (f"{base}/logs/.squall-steps-{jobid}" if name == "balanced" else f"{base}/{name}")


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_verdict_names_the_rank_node_and_section(cluster: Cluster, job: tuple[str, str],
                                                      name: str) -> None:
    jobid, base = job
    _, kind, rank, node, section = SCENARIOS[name]
    args = jobid if name == "balanced" else f"{jobid} --dir {where(name, jobid, base)}"
    report = squall_steps(cluster, base, args)
    v = report["verdict"]
    assert (v["kind"], v["rank"], v["node"], v["section"]) == (kind, rank, node, section), v
    assert len(report["ranks"]) == 6
    assert {r["node"] for r in report["ranks"]} == {"node1", "node2", "node3"}
    if kind == "straggler":
        assert "scontrol update nodename=node3 state=drain" in v["drain"]
        drained = cluster.run("sinfo -h -n node3 -o %T").out.strip()
        assert "drain" not in drained, drained  # a hint, never done
    if kind == "data":
        assert re.search(r"every 5th step waits 0\.6\d? s for its batch", v["text"]), v
        as_root = squall_steps(cluster, base, args, user="root")
        assert as_root["verdict"]["kind"] == "data" and as_root["verdict"]["rank"] == 3


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_plot(cluster: Cluster, job: tuple[str, str], name: str,
                  tmp_path: Path) -> None:
    from PIL import Image  # matplotlib's own dependency: the test extras

    jobid, base = job
    host = cluster.fsx_host / where(name, jobid, base)[len("/fsx/"):]
    png = tmp_path / f"steps-{name}.png"
    proc = subprocess.run([sys.executable, "-c", SQUALL, "steps", jobid, "--dir", str(host),
                           "--plot", str(png)], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(ROOT / "python")))
    assert proc.returncode == 0, proc.stderr
    assert 20_000 < png.stat().st_size < 2_000_000
    with Image.open(png) as im:
        assert im.size == (880, 600)
        colours = im.convert("RGB").getcolors(maxcolors=1 << 24)
        assert colours is not None and len(colours) > 200, len(colours or [])
    keep = os.environ.get("SQUALL_STEPS_PNG_DIR")
    if keep:
        shutil.copy(png, Path(keep) / png.name)


def test_mksbatch_watch_ends_with_the_verdict(cluster: Cluster, job: tuple[str, str]) -> None:
    """A recipe with a spare: the failover's progress directory is where squall_steps
    writes, and ``mksbatch --watch`` ends with the verdict (node2 slowed)."""
    _, base = job
    recipe = {"name": "steps", "nodes": 2, "spares": 1, "tasks_per_node": 2,
              "time": "00:10:00", "log_dir": f"{base}/wlogs", "launcher": "srun",
              "environment": {"PYTHONPATH": f"{base}/python"},
              "command": ["python3", f"{base}/steps_train.py", "--steps=60",
                          "--slow-node=node2:0.1"],
              "failover": {"detect_seconds": 10}}
    cluster.put(f"{base}/watch.yaml", json.dumps(recipe))  # JSON is YAML
    cluster.put(f"{base}/wlogs/.keep", "")
    res = cluster.run(f"cd {base} && python3 -c 'from squall.mksbatch.cli import main; "
                      "main()' watch.yaml --watch --poll 1", env={"PYTHONPATH": f"{base}/python"},
                      timeout=170)
    last = res.out.strip().splitlines()[-1]
    assert re.fullmatch(r"job \d+: steps: straggler node: node2's ranks are [\d.]+x slower in "
                        r"compute every step; .*nodename=node2 state=drain.*", last), res.out


# The test image with the node's python3 and its standard library (no squall in it).
PY_IMAGE = f"{IMAGE_DIR}/python.sqsh"
ADD_PYTHON = r'''
py=$(readlink -f "$(type -P python3)")
cp -L "$py" "$root/usr/bin/python3"
ldd "$py" | awk '/=>/ && $3 ~ /^\// {print $3} /^\t\/[^ ]*ld-linux/ {print $1}' |
    while read -r lib; do mkdir -p "$root$(dirname "$lib")"; cp -L "$lib" "$root$lib"; done
ver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
mkdir -p "$root/usr/lib/python$ver"
tar -C "/usr/lib/python$ver" --exclude=./test --exclude=./idlelib --exclude=./tkinter \
    --exclude=./ensurepip --exclude=./site-packages --exclude=./dist-packages -cf - . |
    tar -C "$root/usr/lib/python$ver" -xf -
'''
MARK = 'mkdir -p "$(dirname "$out")"\nmksquashfs'


@pytest.fixture(scope="module")
def python_image(cluster: Cluster) -> str:
    assert MARK in MKIMAGE  # where the python goes in
    text = MKIMAGE.replace(MARK, ADD_PYTHON + MARK)
    return build_image(cluster, PY_IMAGE, "squallpython", node="node1",
                       script=(f"{IMAGE_DIR}/mkimage-python.sh", text))


PROBE = ("import os, squall_steps; squall_steps.step(); squall_steps.step(); "
         "squall_steps.flush(); print(os.environ['PYTHONPATH'], squall_steps.__file__, "
         "squall_steps.path())")


def test_the_hook_puts_squall_steps_in_a_container(cluster: Cluster, job: tuple[str, str],
                                                    python_image: str) -> None:
    """enroot/hooks.d/91-squall-steps.sh in Enroot's hooks.d: a container of an image
    without squall imports squall_steps, the job's PYTHONPATH first."""
    _, base = job
    hook = "/etc/enroot/hooks.d/91-squall-steps.sh"
    # every node has it, as the packages' README tells a site to install it
    for node in ("node1", "node2", "node3"):
        cluster.run(f"test -x {hook}", node=node, user="root")
    cluster.put(f"{base}/91-squall-steps.sh",
                (ROOT / "enroot" / "hooks.d" / "91-squall-steps.sh").read_bytes(), mode=0o755)
    cluster.put(f"{base}/incontainer/.keep", "")
    cluster.run(f"install -m 0755 {base}/91-squall-steps.sh {hook}", node="node1", user="root")
    try:
        res = cluster.run(
            f"SQUALL_STEPS_PYTHON={base}/python PYTHONPATH=/home/u/lib "
            f"SQUALL_STEPS_DIR={base}/incontainer srun -N1 -w node1 "
            f"--container-image={python_image} --container-mounts=/fsx:/fsx "
            f"python3 -c {shlex.quote(PROBE)}", timeout=120)
    finally:
        # the node image installs the packaged hook (docker/node.Dockerfile): put it back
        packaged = "/usr/share/squall/enroot/hooks.d/91-squall-steps.sh"
        cluster.run(f"if [ -f {packaged} ]; then install -m 0755 {packaged} {hook}; "
                    f"else rm -f {hook}; fi", node="node1", user="root")
    path, module, written = res.out.split()[-3:]
    assert path == "/home/u/lib:/var/run/squall/python", res.out
    assert module == "/var/run/squall/python/squall_steps/__init__.py"
    assert written == f"{base}/incontainer/steps.0"
    lines = (cluster.fsx_host / written[len("/fsx/"):]).read_text().splitlines()
    assert lines[0].startswith("squall-steps 1 rank=0 node=node1 ") and len(lines) == 3
