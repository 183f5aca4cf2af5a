"""squall doctor as Slurm's HealthCheckProgram, on the mini cluster: the packaged
/usr/sbin/squall-healthcheck (options from /etc/default/squall-healthcheck) run as root
on a node with slurmd's bare environment, the real scontrol and slurmctld. A failing
check drains the node with the reason, a passing one resumes it, an admin's drain is
never touched; and slurmd itself runs it once slurm.conf names it."""

from __future__ import annotations

import shlex
import time

import pytest

from .cluster import Cluster

NODE = "node2"
ENROOT = "--enroot /usr/bin/enroot"
HEALTHY = f"--no-efa --shared-fs /fsx {ENROOT}"
BROKEN = f"--no-efa --shared-fs /nonexistent {ENROOT}"
DEFAULTS = "/etc/default/squall-healthcheck"


def show(cluster: Cluster) -> tuple[str, str]:
    """(State, Reason) of NODE as slurmctld has it."""
    out = cluster.run(f"scontrol show node --oneliner {NODE}", user="root").out
    state = out.split(" State=", 1)[1].split()[0]
    reason = out.split(" Reason=", 1)[1].rsplit(" [", 1)[0] if " Reason=" in out else ""
    return state, reason


def set_options(cluster: Cluster, node: str, options: str) -> None:
    cluster.run(f"printf 'SQUALL_DOCTOR_OPTIONS=%s\\n' {shlex.quote(shlex.quote(options))} "
                f">{DEFAULTS}", node=node, user="root")


def healthcheck(cluster: Cluster, options: str) -> int:
    """Run the HealthCheckProgram as slurmd does: root, no arguments, a bare environment."""
    set_options(cluster, NODE, options)
    res = cluster.run("env -i /usr/sbin/squall-healthcheck", node=NODE, user="root",
                      check=False)
    return res.rc


@pytest.fixture
def node(cluster: Cluster):
    """NODE; afterwards every node's defaults file is the packaged one and NODE is resumed."""
    for n in cluster.nodes:
        cluster.run(f"cp {DEFAULTS} {DEFAULTS}.packaged", node=n, user="root")
    yield NODE
    for n in cluster.nodes:
        cluster.run(f"mv {DEFAULTS}.packaged {DEFAULTS}", node=n, user="root")
    cluster.run(f"scontrol update NodeName={NODE} State=RESUME", user="root", check=False)
    cluster.wait_node_state(NODE, ["IDLE", "MIXED", "ALLOCATED"])


def test_failing_check_drains_and_passing_resumes(cluster: Cluster, node: str) -> None:
    assert healthcheck(cluster, BROKEN) == 1          # the checks' status; Slurm ignores it
    state, reason = show(cluster)
    assert "DRAIN" in state.split("+"), state
    assert reason == "squall doctor: shared-fs /nonexistent: not a directory", reason
    assert cluster.node_state(NODE) == "DRAINED"
    # the same failure again leaves the drain (and its time) as it was
    stamp = cluster.run(f"scontrol show node -o {NODE}", user="root").out
    assert healthcheck(cluster, BROKEN) == 1
    assert cluster.run(f"scontrol show node -o {NODE}", user="root").out.split(
        " Reason=")[1] == stamp.split(" Reason=")[1]
    assert healthcheck(cluster, HEALTHY) == 0
    state, _ = show(cluster)      # (Slurm may keep showing the old reason after RESUME)
    assert "DRAIN" not in state.split("+"), state
    cluster.wait_node_state(NODE, ["IDLE"])
    cluster.run(f"srun -N1 -w {NODE} true")


def test_an_admins_drain_is_never_touched(cluster: Cluster, node: str) -> None:
    cluster.run(f"scontrol update NodeName={NODE} State=DRAIN Reason='admin: new DIMM'",
                user="root")
    assert healthcheck(cluster, BROKEN) == 1
    assert show(cluster)[1] == "admin: new DIMM"
    assert healthcheck(cluster, HEALTHY) == 0
    state, reason = show(cluster)
    assert "DRAIN" in state.split("+") and reason == "admin: new DIMM", (state, reason)


def test_slurmd_runs_it_as_its_health_check(cluster: Cluster, node: str) -> None:
    """HealthCheckProgram in slurm.conf on every node, `scontrol reconfigure`: slurmd runs
    the packaged program by itself and the node is drained with the doctor's reason."""
    nodes = (cluster.login, *cluster.nodes)
    add = "HealthCheckProgram=/usr/sbin/squall-healthcheck\nHealthCheckInterval=2\n"
    for n in nodes:
        cluster.run(f"cp /etc/slurm/slurm.conf /etc/slurm/slurm.conf.before-healthcheck; "
                    f"printf {shlex.quote(add)} >>/etc/slurm/slurm.conf", node=n, user="root")
    try:
        for n in cluster.nodes:      # the other nodes pass (they have no EFA)
            set_options(cluster, n, BROKEN if n == NODE else HEALTHY)
        cluster.run("scontrol reconfigure", user="root")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "DRAIN" not in show(cluster)[0]:
            time.sleep(1)
        state, reason = show(cluster)
        assert "DRAIN" in state.split("+"), state
        assert reason.startswith("squall doctor: shared-fs /nonexistent"), reason
        # healthy again: slurmd's next run resumes the node
        set_options(cluster, NODE, HEALTHY)
        cluster.wait_node_state(NODE, ["IDLE"], timeout=60)
    finally:
        for n in nodes:
            cluster.run("mv /etc/slurm/slurm.conf.before-healthcheck /etc/slurm/slurm.conf",
                        node=n, user="root")
        cluster.run("scontrol reconfigure", user="root")
