"""bench/plugin_switch.py (issue 44, benchmarks only): the nodes switch between squall's
plugstack line and Pyxis 0.24.0's without a restart of slurmd, both ways, and squall's
line is back after a bench however the bench ends.

Pyxis is a benchmark reference here, never a correctness check of squall: these tests
check the switch, and that the plugin the nodes run after it is the one it says.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

from .cluster import LOGIN, NODES, ROOT, Cluster
from .images import IMAGE_DIR, IMAGE_ENV, build_image

DEPS_MIRROR = ROOT.parent / "shared" / "deps"


def load_switch() -> ModuleType:
    sys.path.insert(0, str(ROOT))
    spec = importlib.util.spec_from_file_location("plugin_switch",
                                                  ROOT / "bench" / "plugin_switch.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def sw(cluster: Cluster) -> ModuleType:
    if not os.environ.get("SQUALL_DEPS_MIRROR") and DEPS_MIRROR.is_dir():
        os.environ["SQUALL_DEPS_MIRROR"] = str(DEPS_MIRROR)
    module = load_switch()
    module.install_pyxis(cluster)
    return module


@pytest.fixture(scope="module")
def image(cluster: Cluster) -> str:
    return build_image(cluster, f"{IMAGE_DIR}/base.sqsh", "squalltest", env=IMAGE_ENV)


def on_every_node(cluster: Cluster, sw: ModuleType) -> set[str]:
    return {sw.active(cluster, n) for n in (LOGIN, *NODES)}


def test_the_nodes_switch_to_pyxis_and_back_without_a_restart(cluster, sw, image):
    slurmd = {n: cluster.run("pgrep -o -x slurmd", node=n, user="root").out.strip()
              for n in NODES}
    with sw.using(cluster, "pyxis"):
        assert on_every_node(cluster, sw) == {"pyxis"}
        res = cluster.run(f"srun -N3 --container-image={image} bash -c "
                          "'grep ^ID= /etc/os-release; echo $SLURM_JOB_ID'")
        words = res.out.split()
        assert sorted(w for w in words if w.startswith("ID=")) == ["ID=squalltest"] * 3, res
        job = next(w for w in words if w.isdigit())
        for node in NODES:  # slurmstepd ran Pyxis on each node
            log = cluster.run(f"grep -F '[{job}.0] pyxis: starting container from squashfs: "
                              f"{image}' /var/log/slurm/slurmd.log", node=node, user="root",
                              check=False)
            assert log.rc == 0, f"{node}: no Pyxis start for job {job}"
        # srun loaded Pyxis too: squall's own flag is unknown to it.
        res = cluster.run(f"srun -N1 --container-log=verbose --container-image={image} true",
                          check=False)
        assert res.rc != 0 and "unrecognized option '--container-log=verbose'" in res.err, res
    assert on_every_node(cluster, sw) == {"squall"}
    res = cluster.run(f"srun -N3 --container-log=verbose --container-image={image} "
                      "grep ^ID= /etc/os-release")
    assert res.out.split() == ["ID=squalltest"] * 3, res
    assert res.err.count("squall: timings on node") == 3, res
    for node in NODES:
        assert cluster.run("pgrep -o -x slurmd", node=node, user="root").out.strip() \
            == slurmd[node], f"slurmd restarted on {node}"


def test_squalls_line_is_restored_when_the_bench_fails(cluster, sw, image):
    with pytest.raises(RuntimeError, match="the bench failed"):
        with sw.using(cluster, "pyxis"):
            assert on_every_node(cluster, sw) == {"pyxis"}
            # a job the failed bench left running
            cluster.sbatch("#!/bin/bash\nsleep 300\n", args="-N3")
            raise RuntimeError("the bench failed")
    assert on_every_node(cluster, sw) == {"squall"}
    for node in (LOGIN, *NODES):
        cluster.run(f"cmp {sw.SAVED} {sw.PLUGSTACK}", node=node, user="root")
    res = cluster.run(f"srun -N1 --container-log=verbose --container-image={image} true")
    assert "squall: timings on node" in res.err, res


def test_no_switch_while_a_job_runs(cluster, sw):
    job = cluster.sbatch("#!/bin/bash\nsleep 300\n", args="-N1")
    try:
        cluster.wait_job(job, ["RUNNING"])
        with pytest.raises(sw.SwitchError, match="cancel them first"):
            sw.switch(cluster, "pyxis", wait=2)
        assert on_every_node(cluster, sw) == {"squall"}
    finally:
        cluster.run(f"scancel {job}")
    assert sw.PLUGINS == ("squall", "pyxis")


def test_the_plugin_is_installed_outside_slurms_plugin_dir(cluster, sw):
    path = Path(sw.PYXIS_SO)
    assert path.parent == Path("/usr/local/lib/pyxis")
    for node in (LOGIN, *NODES):
        res = cluster.run("ls /usr/lib/x86_64-linux-gnu/slurm-wlm/ | grep -c pyxis",
                          node=node, user="root", check=False)
        assert res.out.strip() == "0", f"{node}: Pyxis in Slurm's PluginDir"
