"""Session fixture for the mini cluster: bring it up once, or reuse a healthy one."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .cluster import ROOT, Cluster, compose, extra_cluster_env, worker_index
from .images import IMAGE_DIR, IMAGE_ENV, build_image
from .mksbatch_site import DEMO_DIR, Site, copy_squall
from .pyxis_helpers import plain_image
from .registry_image import IMAGEKIT, PUSH, WORK

# The cluster tier's slowest modules, slowest first (their tests' seconds on two clusters
# side by side, 2026-12-07, on a loaded 2-core machine: scale_smoke 419, failover 281,
# mksbatch 267, image_pin 219, plugin_signals 213, plugin_localcache 198, pyxis_flags 174,
# node_faults 160; every other module under 110). With `--dist loadfile
# --no-loadscope-reorder` (the Makefile) a worker done with a file takes the next in this
# order, so the long files start first and the clusters finish together. A module not
# named here runs after them; `.ci/module-times.py` prints CI's own figures.
SLOWEST_FIRST: tuple[str, ...] = (
    "test_scale_smoke.py", "test_failover_cluster.py", "test_torchrun_failover_cluster.py",
    "test_mksbatch_cluster.py",
    "test_image_pin_cluster.py", "test_plugin_signals.py", "test_plugin_localcache.py",
    "test_pyxis_flags.py", "test_node_faults.py", "test_pyxis_environment.py",
    "test_failover_ranks_cluster.py", "test_sqshbuild_cluster.py",
    "test_builder_bounds_cluster.py", "test_cluster.py", "test_plugin_container.py",
    "test_pyxis_plugstack.py", "test_pyxis_names.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Everything under tests/integration needs the cluster.
    for item in items:
        if "tests/integration" in str(item.fspath):
            item.add_marker(pytest.mark.cluster)
    # A stable sort: every module's tests stay together and in their order.
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(Path(str(item.fspath)).name, len(rank)))


# What a failed cluster test's report shows beside its own message: the end of each Slurm
# daemon's log, where a step that failed before the program spoke says why (a CI failure
# cannot be rerun to look).
LOG_TAIL = 30
DAEMON_LOGS = [("login", "/var/log/slurm/slurmctld.log")] + [
    (node, "/var/log/slurm/slurmd.log") for node in ("node1", "node2", "node3")]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if report.failed and call.when == "call" and "cluster" in getattr(item, "funcargs", {}):
        c: Cluster = item.funcargs["cluster"]
        for node, log in DAEMON_LOGS:
            try:
                text = str(c.run(f"tail -n {LOG_TAIL} {log}", node=node, user="root",
                                 check=False, timeout=15))
            except Exception as e:  # a node the test stopped: say so, keep the report
                text = f"not read: {e}"
            report.sections.append((f"{node}: {log} (last {LOG_TAIL} lines)", text))
    return report


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    worker = worker_index()
    first = os.environ.get("SQUALL_CLUSTER", "squall")
    if worker:
        # pytest-xdist's worker gwN (N > 0, the Makefile's CLUSTERS): a cluster of its own
        # beside the first, in this process's environment (cluster.sh and scale.sh read it).
        os.environ.update(extra_cluster_env(worker))
    fsx = Path(os.environ.get("SQUALL_FSX", ROOT / ".cluster" / "fsx"))
    os.environ["SQUALL_FSX"] = str(fsx)
    c = Cluster(fsx)
    started = False
    if worker:
        started = extra_cluster_up(c, first)
    elif os.environ.get("SQUALL_REQUIRE_RUNNING_CLUSTER") == "1":
        # CI: the tests must run on the cluster `make demo` left (the README's order), so
        # never replace it; a node the demo restarted may still be rejoining.
        deadline = time.monotonic() + 90
        while not c.healthy():
            if time.monotonic() > deadline:
                pytest.fail("SQUALL_REQUIRE_RUNNING_CLUSTER=1 but the mini cluster is not up "
                            "with all nodes idle: run `make demo` first (or unset it)")
            time.sleep(1)
    elif not c.healthy():
        compose("down")
        compose("up")
        started = True
    yield c
    # Leave a cluster we found running; tear down one we started unless asked to keep it.
    if started and os.environ.get("SQUALL_KEEP_CLUSTER") != "1":
        compose("down")


def extra_cluster_up(c: Cluster, first: str) -> bool:
    """Bring a worker's own cluster up, fresh, from the node image of the first cluster,
    ``first`` (tagged with this one's name), unless SQUALL_KEEP_CLUSTER=1 left one healthy
    on this /fsx. True: it was started (and is removed at the end).
    SQUALL_REQUIRE_RUNNING_CLUSTER=1 binds the first cluster only: this one is the
    harness's own."""
    release = os.environ.get("SQUALL_RELEASE", "trixie")
    c.client.images.get(f"{first}-node:{release}").tag(f"{c.name}-node", release)
    if os.environ.get("SQUALL_KEEP_CLUSTER") == "1" and c.healthy() and c.serves_fsx():
        return False  # kept from an earlier run, and from the same image
    compose("down")
    compose("up")
    return True


@pytest.fixture(scope="session")
def base_image(cluster: Cluster) -> str:
    """A ~10 MB image: ID=squalltest, SQUALL_IMAGE_VAR and SQUALL_BOTH_VAR in /etc/environment."""
    return build_image(cluster, f"{IMAGE_DIR}/base.sqsh", "squalltest", env=IMAGE_ENV)


@pytest.fixture(scope="session")
def image(base_image: str) -> str:
    """The ~10 MB test image (ID=squalltest), built once on /fsx (base_image)."""
    return base_image


@pytest.fixture(scope="session")
def plain(cluster: Cluster) -> str:
    """The image without squall's test environment (ID=squallplain)."""
    return plain_image(cluster)


# The image pushed to login:5000 (registry_image.py): push.py and the imagekit it imports,
# put in WORK once per module.
@pytest.fixture(scope="module")
def tools(cluster: Cluster) -> str:
    cluster.put(f"{WORK}/imagekit.py", IMAGEKIT.read_text())
    cluster.put(f"{WORK}/push.py", PUSH)
    return WORK


# One mksbatch or failover test's directory on /fsx (mksbatch_site.py), with this
# checkout's squall copied once per module (or the installed one: SQUALL_TEST_INSTALLED=1).
@pytest.fixture(scope="module")
def pylib(cluster: Cluster) -> str:
    if os.environ.get("SQUALL_TEST_INSTALLED") == "1":
        return ""
    dest = f"/fsx/squall-tests/mksbatch/pylib-{time.time_ns()}"
    copy_squall(cluster, dest)
    return dest


@pytest.fixture
def site(cluster: Cluster, pylib: str, request: pytest.FixtureRequest) -> Iterator[Site]:
    base = f"/fsx/squall-tests/mksbatch/{request.node.name}-{time.time_ns()}"
    cluster.put(f"{base}/count.py", (DEMO_DIR / "count.py").read_bytes(), mode=0o755)
    yield Site(cluster, base, pylib)
