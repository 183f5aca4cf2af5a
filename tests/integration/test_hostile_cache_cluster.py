"""A hostile user of the cluster (issue 26, docs/security.md): alice cannot write the
shared cache any more, so she plants where root and the image builder still look: /tmp
(links, FIFOs, dead-looking `sqshbuild-*-<host>.<pid>.*` scratch directories, whose inner
entries link to root's files) and a directory she can write that root uses for `-o`.
Root's build and gc on the login node, and squall's step through the plugin, must neither
follow, open, chmod nor remove any of it; a canary tree of root's and bob's files outside
the cache, and /tmp's mode, must not change."""

from __future__ import annotations

import time
import uuid

import pytest

from .cache_model import CACHE, CANARY_BOB, CANARY_ROOT, cache_problems, canary, plant_canary
from .cluster import Cluster
from .registry_image import REGISTRY, push, sqshbuild

pytestmark = pytest.mark.cluster
DEAD_PIDS = range(3999990, 3999996)  # above any pid these containers reach: dead-looking


def plant_tmp(cluster: Cluster, node: str, tag: str) -> str:
    """alice's plants in the node's /tmp: returns the shell listing that describes them
    (kinds, modes, owners, link targets), which must be the same afterwards."""
    host = cluster.run("hostname", node=node).out.strip()
    alive = cluster.run(" ".join(f"kill -0 {p} 2>/dev/null && echo {p};" for p in DEAD_PIDS),
                        node=node, user="root", check=False).out.split()
    assert not alive, alive
    cmds = []
    for i, pid in enumerate(DEAD_PIDS):
        d = f"/tmp/sqshbuild-{tag}{i}-{host}.{pid}.x{i}"
        cmds += [
            # a dead-looking scratch directory: links to root's tree, a directory that is
            # a link, a read-only inner directory (the old rmtree chmodded its parent)
            f"mkdir -p {d}/layers/ro && echo mine > {d}/file && ln -s {CANARY_ROOT} {d}/up",
            f"ln -s {CANARY_ROOT}/keep {d}/layers/keep && ln -s {CANARY_BOB}/a {d}/bob",
            f"echo x > {d}/layers/ro/f && chmod 0500 {d}/layers/ro && mkfifo {d}/fifo",
        ]
    cmds += [f"ln -s {CANARY_ROOT} /tmp/sqshbuild-{tag}l-{host}.{DEAD_PIDS[0]}.link",
             f"mkfifo /tmp/sqshbuild-{tag}f-{host}.{DEAD_PIDS[1]}.fifo",
             f"ln -s {CANARY_ROOT}/a /tmp/sqshbuild-{tag}a-{host}.{DEAD_PIDS[2]}.file"]
    cluster.run(" && ".join(cmds), node=node, user="alice")
    return tmp_listing(cluster, node, tag)


def tmp_listing(cluster: Cluster, node: str, tag: str) -> str:
    return cluster.run(f"stat -c '%n %a %U' /tmp && find /tmp -path '/tmp/sqshbuild-{tag}*' "
                       "-printf '%p %y %m %u %l\\n' | sort", node=node, user="root").out


def remove_tmp(cluster: Cluster, node: str, tag: str) -> None:
    # chmod directories only: chmod -R would follow her links to root's files
    cluster.run(f"find /tmp -path '/tmp/sqshbuild-{tag}*' -type d -exec chmod u+w {{}} + && "
                f"rm -rf /tmp/sqshbuild-{tag}*", node=node, user="alice")


def test_root_build_and_gc_leave_alices_tmp_and_output_plants_alone(
        cluster: Cluster, tools: str) -> None:
    tag = uuid.uuid4().hex[:8]
    pushed = push(cluster, tools, f"sec/root-{tag}", big_mb=1)
    ref = f"{REGISTRY}/sec/root-{tag}:v1"
    before = plant_canary(cluster)
    plants = plant_tmp(cluster, "login", tag)
    # a directory alice (and everyone) may write, sticky, that root uses for -o: her link
    # at the name root asks for, and links at the old predictable temporary names
    out = f"/fsx/squall-tests/out-{tag}"
    cluster.run(f"install -d -m 1777 {out}", user="root")
    guesses = " && ".join(f"ln -s {CANARY_ROOT}/a {out}/.building-{n}.sqsh.login.{p}"
                          for n in ("taken", "free") for p in range(2, 400))
    cluster.run(f"ln -s {CANARY_ROOT}/a {out}/taken.sqsh && mkfifo {out}/fifo.sqsh && {guesses}",
                user="alice")
    out_before = cluster.run(f"find {out} -printf '%p %y %m %u %l\\n' | sort", user="root").out
    try:
        # the name is alice's link: refused in one line, her link not followed
        for name in ("taken", "fifo"):
            res = cluster.run(sqshbuild(CACHE, ref, f"-o {out}/{name}.sqsh"), user="root",
                              check=False, timeout=120)  # a FIFO never opened: no wait
            assert res.rc != 0, (name, res)
            assert "Traceback" not in res.err and len(res.err.strip().splitlines()) == 1, res
            assert canary(cluster) == before, name
        # a free name is root's new file, whatever alice guessed for its temporary name
        res = cluster.run(sqshbuild(CACHE, ref, f"-o {out}/free.sqsh"), user="root",
                          timeout=300)
        assert res.out.strip().splitlines()[-1] == f"{out}/free.sqsh", res
        st = cluster.run(f"stat -c '%F %U %h' {out}/free.sqsh", user="root").out.split()
        assert st == ["regular", "file", "root", "1"], st
        assert canary(cluster) == before
        # root's build of the shared cache, then gc down to nothing, TMPDIR=/tmp
        cluster.run(sqshbuild(CACHE, ref), user="root", timeout=300)
        cluster.run(f"sqshbuild gc --max-size 1 --cache-dir {CACHE}", user="root", timeout=300)
        cluster.run(f"TMPDIR=/tmp sqshbuild gc --max-size 1T --cache-dir {CACHE}", user="root",
                    timeout=300)
        assert canary(cluster) == before
        assert tmp_listing(cluster, "login", tag) == plants  # all hers, all still there
        after = cluster.run(f"find {out} -printf '%p %y %m %u %l\\n' | sort", user="root").out
        new = sorted(set(after.splitlines()) - set(out_before.splitlines()))
        assert [ln.split()[:2] + ln.split()[3:4] for ln in new] == \
            [[f"{out}/free.{ext}", "f", "root"] for ext in ("json", "sqsh")], new  # + sidecar
        assert not set(out_before.splitlines()) - set(after.splitlines()), "alice's changed"
        assert cache_problems(cluster) == []
        assert pushed["digest"].startswith("sha256:")
    finally:
        remove_tmp(cluster, "login", tag)
        cluster.run(f"rm -rf {out}", user="root")


def test_alices_plants_in_a_nodes_tmp_neither_fail_nor_hold_squalls_step(
        cluster: Cluster, tools: str) -> None:
    """The image builder, run by the plugin on node1 with TMPDIR unset (/tmp), meets
    alice's plants there: squall's step runs at once, and nothing of hers is touched."""
    tag = uuid.uuid4().hex[:8]
    push(cluster, tools, f"sec/step-{tag}", big_mb=1)
    before = plant_canary(cluster, node="node1")
    plants = plant_tmp(cluster, "node1", tag)
    try:
        started = time.monotonic()
        res = cluster.run(f"srun -N1 -w node1 --container-image={REGISTRY}/sec/step-{tag}:v1 "
                          "printenv GREETING", user="squall", timeout=180)
        assert res.out.split() == ["from-the-image"], res
        assert time.monotonic() - started < 120, res
        assert canary(cluster, node="node1") == before
        assert tmp_listing(cluster, "node1", tag) == plants
        assert cache_problems(cluster) == []
    finally:
        remove_tmp(cluster, "node1", tag)
