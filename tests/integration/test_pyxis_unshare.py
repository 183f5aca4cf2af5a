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
    running_step,
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
        cluster.run(f"/usr/bin/enroot remove -f pyxis_{name}", node=NODE,
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
        cluster.run(f"/usr/bin/enroot remove -f pyxis_{name}", node=NODE,
                    check=False)


# --- POSIX shared memory and message queues (/dev/shm, /dev/mqueue) ---------------------------

# Made on the node as the user: a POSIX shared-memory segment (shm_open) and a POSIX message
# queue (mq_open), as a program's multiprocessing or an MPI library makes them.
MAKE_ON_NODE = (
    "import ctypes, os, sys, _posixshmem\n"
    "name = sys.argv[1]\n"
    "os.close(_posixshmem.shm_open('/' + name, os.O_CREAT | os.O_RDWR, 0o600))\n"
    "rt = ctypes.CDLL('librt.so.1', use_errno=True)\n"
    "q = rt.mq_open(('/' + name + '-q').encode(), os.O_CREAT | os.O_RDWR, 0o600, None)\n"
    "sys.exit(0 if q >= 0 else ctypes.get_errno())\n")
DEV_PROBE = ('ls -A /dev/shm | tr "\\n" " "; echo "|$(ls -A /dev/mqueue | tr "\\n" " ")|'
             '$(stat -c %d /dev /dev/shm /dev/mqueue | tr "\\n" " ")"')


def dev_view(res) -> tuple[set[str], set[str], list[str]]:
    shm, mq, devs = last_line(res).split("|")
    return set(shm.split()), set(mq.split()), devs.split()


@pytest.fixture()
def node_ipc(cluster: Cluster):
    """A shared-memory segment and a message queue of the node's, removed afterwards."""
    name = f"squall-ipc-{time.time_ns()}"
    cluster.put(f"{HOME}/make-ipc.py", MAKE_ON_NODE)
    srun(cluster, "", f"python3 {HOME}/make-ipc.py {name}")
    node = dev_view(srun(cluster, "", DEV_PROBE))
    assert name in node[0] and f"{name}-q" in node[1], node
    yield name, node
    srun(cluster, "", f"rm -f /dev/shm/{name} /dev/mqueue/{name}-q /dev/shm/other-{name} "
                      f"/dev/shm/inside-{name} /dev/mqueue/inside-{name}", check=False)


def test_without_unshare_ipc_the_node_s_shm_and_mqueue_are_visible(cluster: Cluster,
                                                                   image: str,
                                                                   node_ipc) -> None:
    name, node = node_ipc
    shm, mq, devs = dev_view(srun(cluster, f"--container-image={image}", DEV_PROBE))
    assert name in shm and f"{name}-q" in mq, (shm, mq)
    assert devs == node[2], "without unshare the container's /dev is the node's (Pyxis)"


def test_unshare_ipc_gives_a_private_shm_and_mqueue(cluster: Cluster, image: str,
                                                    node_ipc) -> None:
    name, node = node_ipc
    # Another container (sharing the node's IPC) leaves a segment too.
    srun(cluster, f"--container-image={image}", f"touch /dev/shm/other-{name}")
    res = srun(cluster, f"--container-image={image} --container-unshare=ipc",
               f"{DEV_PROBE}; touch /dev/shm/inside-{name} /dev/mqueue/inside-{name}")
    shm, mq, devs = dev_view(res)
    assert not {name, f"other-{name}"} & shm, shm
    assert f"{name}-q" not in mq, mq
    assert all(mine != theirs for mine, theirs in zip(devs, node[2], strict=True)), (devs, node[2])
    # And what the container made stays in it.
    after = dev_view(srun(cluster, "", DEV_PROBE))
    assert f"inside-{name}" not in after[0] and f"inside-{name}" not in after[1], after


def test_unshare_ipc_dev_stays_private_against_a_container_root(cluster: Cluster, image: str,
                                                                node_ipc) -> None:
    """Issue 30: the node's /dev is detached under the new one, so a container root's
    `umount -l /dev`, repeated until it fails, finds the image's /dev directory: never the
    node's /dev/shm nor its devices (tests/unit/test_plugin_ipcdev.py without Slurm)."""
    name, _ = node_ipc
    res = srun(cluster, f"--container-image={image} --container-remap-root "
                        "--container-unshare=ipc",
               # No 2>/dev/null: with /dev off that is the image's /dev/null, or a file made there.
               'n=0; while umount -l /dev; do n=$((n+1)); done; '
               'echo "$n|$(ls -A /dev/shm | tr "\\n" " ")|'
               '$(test -e /dev/kmsg && echo kmsg)"')
    n, shm, kmsg = last_line(res).split("|")
    assert int(n) >= 1, f"the container root could not unmount /dev: {res}"
    assert name not in shm.split(), f"the node's /dev/shm came back: {shm}"
    assert kmsg == "", "a node device came back (/dev/kmsg)"


def test_unshare_ipc_dev_still_has_what_programs_need(cluster: Cluster, image: str) -> None:
    res = srun(cluster, f"--container-image={image} --container-unshare=ipc",
               "echo x > /dev/null && head -c 4 /dev/urandom | wc -c && head -c 3 /dev/zero | "
               "wc -c && ls -d /dev/pts /dev/fd/ && test -w /dev/shm && echo ok")
    assert res.out.split() == ["4", "3", "/dev/fd/", "/dev/pts", "ok"], res


def test_a_step_joining_a_named_container_gets_its_ipc_and_its_shm(cluster: Cluster,
                                                                    image: str) -> None:
    name = f"i{time.time_ns()}"
    with running_step(cluster, f"--container-image={image} --container-name={name} "
                               "--container-unshare=ipc",
                      f"touch /dev/shm/held-{name} && readlink /proc/self/ns/ipc",
                      name=name) as (jobid, held):
        joined = cluster.run(f"srun --jobid={jobid} -N1 --overlap --container-name={name} "
                             "sh -c 'readlink /proc/self/ns/ipc; ls /dev/shm'")
        assert joined.out.split() == [held, f"held-{name}"], joined
