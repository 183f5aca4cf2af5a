"""EFA on the mini cluster (issue 4). No node has EFA hardware: node1 is a node
without EFA, and node3 reads a stand-in EFA tree (test double) that this module
prepares under /fsx/efa-fake while its tests run.

Node configuration this needs (docker/, owned by the cluster):
  * node3's plugstack.conf line carries
      efa_sysfs_root=/fsx/efa-fake/sys efa_dev_root=/fsx/efa-fake/dev
      efa_opt_root=/fsx/efa-fake/opt/amazon
    (while the tree is absent node3 is a node without EFA, so other tests are unaffected);
  * memlock: EFA nodes need it unlimited, but this Docker engine cannot raise a
    container's memlock (runc: "error setting rlimit type 8: operation not permitted",
    the machine lacks CAP_SYS_RESOURCE), so node3 runs with 8 MiB: `auto` warns once and
    `require` refuses, which is what the tests below check. NCCL_NET under `require` is
    covered by the unit tests of the plan (tests/unit/test_efa_plan.py);
  * squall-efa-hook installed at /usr/local/libexec/squall/ (spank/Makefile install).
"""

from __future__ import annotations

import shlex
import shutil
import time

import pytest

from fake_efa_tree import make_node

from .cluster import Cluster
from .images import IMAGE_DIR, IMAGE_ENV, build_image

FAKE = "/fsx/efa-fake"
EFA_NODE = "node3"
PLAIN_NODE = "node1"
EFA_VARS = ("MELLANOX_VISIBLE_DEVICES", "NCCL_NET_PLUGIN", "NCCL_NET", "NCCL_SOCKET_IFNAME",
            "FI_EFA_USE_HUGE_PAGE", "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "FI_PROVIDER",
            "FI_EFA_USE_DEVICE_RDMA", "LD_LIBRARY_PATH")
PRINT_ENV = "env | grep -E '^(" + "|".join(EFA_VARS) + ")=' | sort"


def srun(cluster: Cluster, args: str, cmd: str, check: bool = True, env=None):
    return cluster.run(f"srun {args} bash -c {shlex.quote(cmd)}", check=check, env=env)


def env_of(out: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def derive_image(cluster: Cluster, base: str, out: str, own_libs: bool) -> str:
    """The base image plus /opt/amazon mount targets (and, when own_libs, its own
    stand-in libfabric and aws-ofi-nccl)."""
    libs = ""
    if own_libs:
        libs = ("mkdir -p $t/r/opt/amazon/efa/lib $t/r/opt/amazon/ofi-nccl/lib; "
                "printf 'image-copy\\0Libfabric\\0' >$t/r/opt/amazon/ofi-nccl/lib/"
                "libnccl-net-ofi.so; printf 'image-copy' >$t/r/opt/amazon/efa/lib/"
                "libfabric.so.1; ")
    script = ("set -e; t=$(mktemp -d); trap 'rm -rf $t' EXIT; "
              f"unsquashfs -q -d $t/r {base} >/dev/null; "
              "mkdir -p $t/r/opt/amazon/efa $t/r/opt/amazon/ofi-nccl; " + libs +
              f"mksquashfs $t/r {out}.tmp -noappend -quiet -no-progress -comp lzo -noD "
              f"-all-root >/dev/null; chown 1000:1000 {out}.tmp; mv -f {out}.tmp {out}")
    cluster.run(script, node="node1", user="root", timeout=300)
    return out


@pytest.fixture(scope="module")
def images(cluster: Cluster) -> dict[str, str]:
    base = build_image(cluster, f"{IMAGE_DIR}/base.sqsh", "squalltest", env=IMAGE_ENV)
    return {
        "plain": derive_image(cluster, base, f"{IMAGE_DIR}/efa-plain.sqsh", own_libs=False),
        "own": derive_image(cluster, base, f"{IMAGE_DIR}/efa-own-libs.sqsh", own_libs=True),
    }


@pytest.fixture(scope="module")
def node_config(cluster: Cluster) -> None:
    conf = cluster.run("cat /etc/slurm/plugstack.conf", node=EFA_NODE, user="root").out
    want = (f"efa_sysfs_root={FAKE}/sys", f"efa_dev_root={FAKE}/dev",
            f"efa_opt_root={FAKE}/opt/amazon")
    missing = [w for w in want if w not in conf]
    if missing:
        pytest.fail(f"{EFA_NODE}'s plugstack.conf lacks {' '.join(missing)} (see this "
                    f"module's docstring):\n{conf}")


@pytest.fixture
def fake_efa(cluster: Cluster, node_config: None):
    """Stand-in p4d.24xlarge tree (4 EFA devices, host libfabric and aws-ofi-nccl),
    present only for the test that asks for it."""
    root = cluster.fsx_host / FAKE[len("/fsx/"):]
    shutil.rmtree(root, ignore_errors=True)
    make_node(root, "p4d.24xlarge", 4)
    for p in [root, *root.rglob("*")]:
        if not p.is_symlink():
            p.chmod(0o755 if p.is_dir() else 0o644)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_require_without_efa_fails_before_the_container_starts(cluster: Cluster,
                                                               images) -> None:
    marker = f"/fsx/home/squall/efa-started-{time.time_ns()}"
    res = srun(cluster, f"-N1 -w {PLAIN_NODE} --container-image={images['plain']} "
               "--container-efa=require", f"touch {marker}", check=False)
    assert res.rc != 0, res
    assert "--container-efa=require: this node" in res.err, res
    assert "has no EFA device" in res.err, res
    assert cluster.run(f"test -e {marker}", check=False).rc != 0, "the container started"


def test_auto_without_efa_injects_nothing(cluster: Cluster, images) -> None:
    res = srun(cluster, f"-N1 -w {PLAIN_NODE} --container-image={images['plain']} "
               "--container-efa=auto", PRINT_ENV + "; true")
    assert res.out == "", res
    assert "EFA" not in res.err, res


def test_auto_on_efa_node_injects_host_libraries(cluster: Cluster, images, fake_efa) -> None:
    res = srun(cluster, f"-N1 -w {EFA_NODE} --container-image={images['plain']}",
               PRINT_ENV + "; cat /opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so | tr '\\0' '\\n'"
               " | grep -c stand-in")
    env = env_of(res.out)
    assert env == {
        "MELLANOX_VISIBLE_DEVICES": "void",
        "NCCL_NET_PLUGIN": "ofi",
        "NCCL_SOCKET_IFNAME": "^docker,lo,veth",
        "FI_EFA_USE_HUGE_PAGE": "0",
        "LD_LIBRARY_PATH": "/opt/amazon/efa/lib:/opt/amazon/ofi-nccl/lib",
    }, res
    assert res.out.splitlines()[-1] == "1", "host aws-ofi-nccl not mounted in: " + str(res)


def test_image_with_its_own_plugin_gets_no_host_mounts(cluster: Cluster, images,
                                                       fake_efa) -> None:
    res = srun(cluster, f"-N1 -w {EFA_NODE} --container-image={images['own']}",
               PRINT_ENV + "; cat /opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so | head -c 10;"
               " echo")
    env = env_of(res.out)
    assert "LD_LIBRARY_PATH" not in env and env["NCCL_NET_PLUGIN"] == "ofi", res
    assert res.out.splitlines()[-1] == "image-copy", res


def test_user_values_win_and_nccl_debug(cluster: Cluster, images, fake_efa) -> None:
    res = srun(cluster, f"-N1 -w {EFA_NODE} --container-image={images['plain']} "
               "--container-nccl-debug=INFO", PRINT_ENV, env={"NCCL_SOCKET_IFNAME": "eth0"})
    env = env_of(res.out)
    assert env["NCCL_SOCKET_IFNAME"] == "eth0", res
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_SUBSYS"] == "INIT,NET", res
    assert "FI_PROVIDER" not in env and "FI_EFA_USE_DEVICE_RDMA" not in env, res


def test_auto_warns_once_about_low_memlock_on_efa_node(cluster: Cluster, images,
                                                       fake_efa) -> None:
    res = srun(cluster, f"-N1 -n2 -w {EFA_NODE} --container-image={images['plain']}", "true")
    warnings = [line for line in res.err.splitlines() if "memlock" in line]
    assert len(warnings) == 1, res
    assert "16 GiB" in warnings[0] or "unlimited" in warnings[0], res


def test_require_on_efa_node_refuses_low_memlock(cluster: Cluster, images, fake_efa) -> None:
    marker = f"/fsx/home/squall/efa-started-{time.time_ns()}"
    res = srun(cluster, f"-N1 -w {EFA_NODE} --container-image={images['plain']} "
               "--container-efa=require", f"touch {marker}", check=False)
    assert res.rc != 0, res
    assert "memlock" in res.err, res
    assert cluster.run(f"test -e {marker}", check=False).rc != 0, "the container started"


def test_off_injects_nothing_on_efa_node(cluster: Cluster, images, fake_efa) -> None:
    res = srun(cluster, f"-N1 -w {EFA_NODE} --container-image={images['plain']} "
               "--container-efa=off", PRINT_ENV + "; true")
    assert res.out == "", res
