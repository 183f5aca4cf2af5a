"""Pyxis 0.24 conformance: --container-unshare=NS[,NS...] and PYXIS_CONTAINER_UNSHARE (issue 10,
item 3).

A new namespace of each kind named (net, ipc, uts) for the container, shared by all its
tasks and by the steps that join it; the new network namespace has only a loopback
interface, which is up. An unknown kind is a one-line error.
"""

from __future__ import annotations

import time

import pytest

from .cluster import Cluster
from .pyxis_helpers import (
    HOME,
    NODE,
    allocate,
    background_step,
    end_job,
    error_lines,
    last_line,
    srun,
    wait_for,
)

NS_PROBE = ('echo "net=$(readlink /proc/self/ns/net) ipc=$(readlink /proc/self/ns/ipc) '
            'uts=$(readlink /proc/self/ns/uts)"')




@pytest.fixture(scope="module")
def image(plain: str) -> str:
    """This module's image is the plain one (it has ipcs, hostname, ...)."""
    return plain

@pytest.fixture(scope="module")
def host_ns(cluster: Cluster) -> dict[str, str]:
    res = srun(cluster, "", NS_PROBE)
    return dict(kv.split("=", 1) for kv in last_line(res).split())


def probe(res) -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in last_line(res).split())


def test_pyxis_container_unshare_none_shares_the_host_namespaces(cluster: Cluster, image: str,
                                                                 host_ns: dict) -> None:
    res = srun(cluster, f"--container-image={image}", NS_PROBE)
    assert probe(res) == host_ns, res


@pytest.mark.parametrize("kind", ["net", "ipc", "uts"])
def test_pyxis_container_unshare_one_kind(cluster: Cluster, image: str, host_ns: dict,
                                          kind: str) -> None:
    res = srun(cluster, f"--container-image={image} --container-unshare={kind}", NS_PROBE)
    got = probe(res)
    for k in ("net", "ipc", "uts"):
        assert (got[k] != host_ns[k]) == (k == kind), (k, res)


def test_pyxis_container_unshare_net_ipc_uts(cluster: Cluster, image: str,
                                             host_ns: dict) -> None:
    res = srun(cluster, f"--container-image={image} --container-unshare=net,ipc,uts", NS_PROBE)
    got = probe(res)
    assert all(got[k] != host_ns[k] for k in ("net", "ipc", "uts")), res


def test_pyxis_container_unshare_net_shared_by_all_tasks(cluster: Cluster, image: str,
                                                         host_ns: dict) -> None:
    res = srun(cluster, f"-n4 --container-image={image} --container-unshare=net,ipc",
               "readlink /proc/self/ns/net /proc/self/ns/ipc | tr '\\n' ' '; echo")
    rows = {line.strip() for line in res.out.splitlines() if line.strip()}
    assert len(rows) == 1, res
    net, ipc = rows.pop().split()
    assert net != host_ns["net"] and ipc != host_ns["ipc"], res


def test_pyxis_container_unshare_net_loopback_up_and_no_route_out(cluster: Cluster,
                                                                  image: str) -> None:
    res = srun(cluster, f"--container-image={image} --container-unshare=net",
               "awk -F: 'NR > 2 {gsub(/ /, \"\", $1); print $1}' /proc/net/dev; "
               "(exec </dev/tcp/127.0.0.1/65535) 2>&1 | tail -n1; "
               "(exec </dev/tcp/10.1.2.3/53) 2>&1 | tail -n1")
    lines = res.out.strip().splitlines()
    assert lines[0] == "lo" and len(lines) == 3, res
    assert "Connection refused" in lines[1], res   # lo is up
    assert "Network is unreachable" in lines[2], res


def test_pyxis_container_unshare_ipc_segments_are_private(cluster: Cluster, image: str) -> None:
    # A fresh IPC namespace starts empty; a segment one task makes is seen by the other.
    res = srun(cluster, f"-n2 --container-image={image} --container-unshare=ipc",
               'if [ "$SLURM_PROCID" = 0 ]; then echo "before=$(ipcs -m | grep -c ^0x)"; '
               "ipcmk -M 4096 >/dev/null; fi; sleep 2; echo \"after=$(ipcs -m | grep -c ^0x)\"")
    assert sorted(res.out.split()) == ["after=1", "after=1", "before=0"], res


def test_pyxis_container_unshare_uts_hostname_is_private(cluster: Cluster, image: str) -> None:
    res = srun(cluster, f"--container-image={image} --container-remap-root "
                        "--container-unshare=uts", "hostname inside-uts && hostname")
    assert last_line(res) == "inside-uts", res
    assert last_line(srun(cluster, "", "hostname")) == NODE


def test_pyxis_container_unshare_unknown_kind_is_an_error(cluster: Cluster, image: str) -> None:
    for value in ("foo", "net,foo"):
        res = srun(cluster, f"--container-image={image} --container-unshare={value}", "true",
                   check=False)
        assert res.rc != 0, res
        lines = error_lines(res)
        assert len(lines) == 1 and "--container-unshare" in lines[0] and "foo" in lines[0], res


def test_pyxis_env_container_unshare(cluster: Cluster, image: str, host_ns: dict) -> None:
    res = srun(cluster, f"--container-image={image}", NS_PROBE,
               env={"PYXIS_CONTAINER_UNSHARE": "net"})
    assert probe(res)["net"] != host_ns["net"], res


def test_pyxis_container_unshare_joined_by_a_named_step(cluster: Cluster, image: str,
                                                        host_ns: dict) -> None:
    name = f"u{time.time_ns()}"
    ready = f"{HOME}/unshare-{name}.ready"
    jobid = allocate(cluster)
    try:
        background_step(cluster, jobid, f"--container-image={image} --container-name={name} "
                                        f"--container-unshare=net,uts --container-mounts={HOME}",
                        f"readlink /proc/self/ns/net > {ready}.tmp && mv {ready}.tmp {ready} "
                        "&& exec sleep 300")
        held = wait_for(cluster, ready).strip()
        assert held != host_ns["net"]
        joined = cluster.run(f"srun --jobid={jobid} -N1 --overlap --container-name={name} "
                             "readlink /proc/self/ns/net")
        assert last_line(joined) == held, joined
        with_flag = cluster.run(f"srun --jobid={jobid} -N1 --overlap --container-name={name} "
                                "--container-unshare=net readlink /proc/self/ns/net")
        assert last_line(with_flag) == held, with_flag
    finally:
        end_job(cluster, jobid)
        cluster.run(f"/opt/enroot-test-runtime/bin/enroot remove -f pyxis_{name}", node=NODE,
                    check=False)


def test_pyxis_container_unshare_on_a_running_container_without_it_fails(cluster: Cluster,
                                                                         image: str) -> None:
    name = f"n{time.time_ns()}"
    ready = f"{HOME}/nonet-{name}.ready"
    jobid = allocate(cluster)
    try:
        background_step(cluster, jobid, f"--container-image={image} --container-name={name} "
                                        f"--container-mounts={HOME}",
                        f"echo up > {ready}.tmp && mv {ready}.tmp {ready} && exec sleep 300")
        wait_for(cluster, ready)
        res = cluster.run(f"srun --jobid={jobid} -N1 --overlap --container-name={name} "
                          "--container-unshare=net true", check=False)
        assert res.rc != 0, res
        assert any("network namespace" in line for line in error_lines(res)), res
    finally:
        end_job(cluster, jobid)
        cluster.run(f"/opt/enroot-test-runtime/bin/enroot remove -f pyxis_{name}", node=NODE,
                    check=False)
