"""The EFA plan: (node, image, mode, user-set names, nccl debug) -> env, mounts, warnings.

Nodes and images come from prepared trees (stand-ins for EFA hardware) through the
same C detection the plugin runs; memlock is set explicitly where it matters.
"""

from __future__ import annotations

import dataclasses

import pytest

from fake_efa_tree import make_image, make_node
from squall.efa import detect as efa
from squall.errors import SquallError

OBSOLETE = ("FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "FI_EFA_FORK_SAFE", "RDMAV_FORK_SAFE",
            "NCCL_BUFFSIZE", "NCCL_P2P_NET_CHUNKSIZE", "NCCL_TUNER_PLUGIN", "NCCL_TOPO_FILE")


def node_of(tmp_path, itype, n, memlock=-1, **kw):
    fake = make_node(tmp_path / "node", itype, n, **kw)
    node = efa.detect(str(fake.sysfs), str(fake.dev), str(fake.opt))
    return dataclasses.replace(node, memlock=memlock)


def image_of(tmp_path, **kw):
    return efa.scan_image(str(make_image(tmp_path / "img", **kw)))


@pytest.fixture
def p5(tmp_path):
    return node_of(tmp_path, "p5.48xlarge", 32)


@pytest.fixture
def g5(tmp_path):
    return node_of(tmp_path, "g5.48xlarge", 1)


@pytest.fixture
def cpu(tmp_path):
    return node_of(tmp_path, "c5.xlarge", 0, libfabric=False, ofi_nccl=False)


def test_p5_image_without_libs_gets_host_libs(tmp_path, p5):
    plan = efa.plan(p5, image_of(tmp_path), "auto")
    env = plan.env_dict()
    assert plan.active and plan.warnings == []
    assert env == {
        "MELLANOX_VISIBLE_DEVICES": "void",
        "LD_LIBRARY_PATH": "/opt/amazon/efa/lib:/opt/amazon/ofi-nccl/lib",
        "NCCL_NET_PLUGIN": "ofi",
        "NCCL_SOCKET_IFNAME": "^docker,lo,veth",
        "FI_EFA_USE_HUGE_PAGE": "0",
    }
    opt = p5.opt_root
    assert plan.fstab == [
        f"{opt}/efa /opt/amazon/efa none x-create=dir,bind,ro,nosuid,nodev",
        f"{opt}/ofi-nccl /opt/amazon/ofi-nccl none x-create=dir,bind,ro,nosuid,nodev",
    ]


def test_image_ld_library_path_is_kept_behind_host_dirs(tmp_path, p5):
    plan = efa.plan(p5, image_of(tmp_path), "auto", ld_library_path="/usr/local/cuda/lib64")
    assert plan.env_dict()["LD_LIBRARY_PATH"] == (
        "/opt/amazon/efa/lib:/opt/amazon/ofi-nccl/lib:/usr/local/cuda/lib64")


def test_image_with_own_aws_ofi_nccl_gets_no_mounts(tmp_path, p5):
    plan = efa.plan(p5, image_of(tmp_path, libfabric=True, ofi_nccl=True), "auto",
                    ld_library_path="/usr/local/cuda/lib64")
    env = plan.env_dict()
    assert plan.fstab == []
    assert "LD_LIBRARY_PATH" not in env
    assert env["NCCL_NET_PLUGIN"] == "ofi"
    assert env["MELLANOX_VISIBLE_DEVICES"] == "void"


def test_image_with_plugin_only_gets_host_libfabric(tmp_path, p5):
    plan = efa.plan(p5, image_of(tmp_path, ofi_nccl=True), "auto")
    assert [line.split()[1] for line in plan.fstab] == ["/opt/amazon/efa"]
    assert plan.env_dict()["LD_LIBRARY_PATH"] == "/opt/amazon/efa/lib"


def test_old_host_layout_is_mounted_where_it_was(tmp_path):
    node = node_of(tmp_path, "p4d.24xlarge", 4, ofi_dir="aws-ofi-nccl", suffixed=False,
                   wording="old")
    plan = efa.plan(node, image_of(tmp_path), "require")
    env = plan.env_dict()
    assert plan.fstab[1].split()[1] == "/opt/amazon/aws-ofi-nccl"
    assert env["LD_LIBRARY_PATH"] == "/opt/amazon/efa/lib:/opt/amazon/aws-ofi-nccl/lib"
    assert "NCCL_NET_PLUGIN" not in env  # only libnccl-net.so: NCCL's default name
    assert env["NCCL_NET"] == "AWS Libfabric"


@pytest.mark.parametrize("wording,name", [("new", "Libfabric"), ("old", "AWS Libfabric")])
def test_require_makes_nccl_fail_instead_of_falling_back(tmp_path, p5, wording, name):
    plan = efa.plan(p5, image_of(tmp_path, libfabric=True, ofi_nccl=True, wording=wording),
                    "require")
    assert plan.env_dict()["NCCL_NET"] == name


def test_auto_does_not_set_nccl_net(tmp_path, p5):
    assert "NCCL_NET" not in efa.plan(p5, image_of(tmp_path), "auto").env_dict()


@pytest.mark.parametrize("mode", ["auto", "require"])
def test_no_obsolete_variables(tmp_path, g5, mode):
    for image in (image_of(tmp_path), None):
        env = efa.plan(g5, image, mode).env_dict()
        assert not set(OBSOLETE) & set(env)


def test_g5_gets_the_same_injection_without_rdma_settings(tmp_path, g5):
    env = efa.plan(g5, image_of(tmp_path), "require").env_dict()
    assert env["NCCL_NET"] == "Libfabric"
    assert "FI_EFA_USE_DEVICE_RDMA" not in env


def test_g5_user_rdma_setting_is_warned_about(g5):
    plan = efa.plan(g5, None, "auto", user_set=["FI_EFA_USE_DEVICE_RDMA"])
    assert len(plan.warnings) == 1
    assert "no RDMA read" in plan.warnings[0] and "g5.48xlarge" in plan.warnings[0]


def test_p5_user_rdma_setting_is_not_warned_about(p5):
    assert efa.plan(p5, None, "auto", user_set=["FI_EFA_USE_DEVICE_RDMA"]).warnings == []


def test_user_values_win(tmp_path, p5):
    user = ["NCCL_NET_PLUGIN", "NCCL_SOCKET_IFNAME", "NCCL_NET", "FI_EFA_USE_HUGE_PAGE",
            "MELLANOX_VISIBLE_DEVICES", "NCCL_DEBUG"]
    plan = efa.plan(p5, image_of(tmp_path), "require", user_set=user, nccl_debug="INFO")
    env = plan.env_dict()
    assert not set(user) & set(env)
    assert "LD_LIBRARY_PATH" in env and len(plan.fstab) == 2
    host = efa.plan(p5, None, "require", user_set=user, nccl_debug="INFO").env_dict()
    assert host == {"NCCL_DEBUG_SUBSYS": "INIT,NET"}


def test_user_ld_library_path_wins_with_a_warning(tmp_path, p5):
    plan = efa.plan(p5, image_of(tmp_path), "auto", user_set=["LD_LIBRARY_PATH"],
                    ld_library_path="/usr/local/cuda/lib64")
    assert "LD_LIBRARY_PATH" not in plan.env_dict()
    assert len(plan.fstab) == 2
    assert len(plan.warnings) == 1
    assert "/opt/amazon/efa/lib:/opt/amazon/ofi-nccl/lib" in plan.warnings[0]


def test_cpu_node_auto_is_silent(tmp_path, cpu):
    for image in (None, image_of(tmp_path)):
        plan = efa.plan(cpu, image, "auto")
        assert (plan.active, plan.env, plan.fstab, plan.warnings) == (False, [], [], [])


def test_cpu_node_require_refuses(cpu):
    with pytest.raises(SquallError) as exc:
        efa.plan(cpu, None, "require")
    msg = str(exc.value)
    assert "--container-efa=require" in msg and "no EFA device" in msg
    assert "c5.xlarge" in msg and "\n" not in msg


def test_off_injects_nothing_on_p5(tmp_path, p5):
    for image in (None, image_of(tmp_path)):
        plan = efa.plan(p5, image, "off")
        assert (plan.active, plan.env, plan.fstab, plan.warnings) == (False, [], [], [])


def test_host_level_plan_holds_only_pre_hook_lines(p5):
    plan = efa.plan(p5, None, "require")
    assert plan.active
    assert plan.env == ["MELLANOX_VISIBLE_DEVICES=void"]
    assert plan.fstab == [] and plan.warnings == []


def test_nccl_debug_on_any_node_at_host_level(tmp_path, cpu, p5):
    for node, mode in ((cpu, "auto"), (cpu, "off"), (p5, "auto")):
        env = efa.plan(node, None, mode, nccl_debug="INFO").env_dict()
        assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_SUBSYS"] == "INIT,NET"
    # not repeated by the hook's plan
    assert "NCCL_DEBUG" not in efa.plan(p5, image_of(tmp_path), "auto",
                                        nccl_debug="INFO").env_dict()


def test_nccl_debug_level_is_checked(p5):
    with pytest.raises(SquallError, match="letters only"):
        efa.plan(p5, None, "auto", nccl_debug="INFO\nFI_PROVIDER=efa")


def test_memlock_low_warns_once_in_auto(tmp_path):
    node = node_of(tmp_path, "p5.48xlarge", 32, memlock=64 << 20)
    plan = efa.plan(node, None, "auto")
    assert plan.active and len(plan.warnings) == 1
    assert "memlock" in plan.warnings[0] and "65536 KiB" in plan.warnings[0]
    # the hook's (image-level) plan does not repeat it
    assert efa.plan(node, image_of(tmp_path), "auto").warnings == []


def test_memlock_at_16_gib_is_enough(tmp_path):
    node = node_of(tmp_path, "p5.48xlarge", 32, memlock=16 << 30)
    assert efa.plan(node, None, "require").warnings == []


def test_memlock_low_refuses_require(tmp_path):
    node = node_of(tmp_path, "p5.48xlarge", 32, memlock=(16 << 30) - 1)
    with pytest.raises(SquallError, match="memlock limit .* below 16 GiB"):
        efa.plan(node, None, "require")


def test_no_uverbs(tmp_path):
    node = node_of(tmp_path, "p5.48xlarge", 32, uverbs=False)
    with pytest.raises(SquallError, match="uverbs"):
        efa.plan(node, None, "require")
    plan = efa.plan(node, None, "auto")
    assert not plan.active and "uverbs" in plan.warnings[0]


def test_degraded_node_is_warned_about(tmp_path):
    node = node_of(tmp_path, "p5.48xlarge", 31)
    plan = efa.plan(node, None, "auto")
    assert plan.warnings == [plan.warnings[0]]
    assert "p5.48xlarge has 32 EFA interfaces, found 31" in plan.warnings[0]


def test_no_libraries_anywhere(tmp_path):
    node = node_of(tmp_path, "p5.48xlarge", 32, libfabric=False, ofi_nccl=False)
    with pytest.raises(SquallError, match="no aws-ofi-nccl .* in the image nor under"):
        efa.plan(node, image_of(tmp_path), "require")
    plan = efa.plan(node, image_of(tmp_path), "auto")
    assert not plan.active and plan.fstab == []
    assert "TCP sockets" in plan.warnings[0]
    # the host-level check cannot know the image yet: it does not refuse
    assert efa.plan(node, None, "require").active


def test_no_host_libs_but_image_has_them(tmp_path):
    node = node_of(tmp_path, "p5.48xlarge", 32, libfabric=False, ofi_nccl=False)
    plan = efa.plan(node, image_of(tmp_path, libfabric=True, ofi_nccl=True), "require")
    assert plan.active and plan.fstab == [] and plan.env_dict()["NCCL_NET"] == "Libfabric"


def test_managed_variables_list():
    names = efa.managed_variables()
    assert "NCCL_NET_PLUGIN" in names and "LD_LIBRARY_PATH" in names
    assert "FI_PROVIDER" not in names


# The profile table against the reference table (efa-nccl.md): a wrong row fails here.
@pytest.mark.parametrize("itype,max_efa,gdr", [
    ("p4d.24xlarge", 4, 1), ("p4de.24xlarge", 4, 1), ("p5.48xlarge", 32, 1),
    ("p5e.48xlarge", 32, 1), ("p5en.48xlarge", 16, 1), ("p6-b200.48xlarge", 8, 1),
    ("g5.48xlarge", 1, 0), ("g5.8xlarge", 1, 0), ("g6e.48xlarge", 4, 0),
    ("g6e.24xlarge", 2, 0), ("g6.48xlarge", 1, 0), ("c5n.18xlarge", 1, -1),
    ("c5n.9xlarge", 1, -1), ("hpc7g.16xlarge", 1, -1), ("trn1.32xlarge", 8, -1),
    ("trn1n.32xlarge", 16, -1), ("trn2.48xlarge", 16, -1),
])
def test_profile_table(tmp_path, itype, max_efa, gdr):
    node = node_of(tmp_path, itype, 1)
    assert node.profile_known
    assert (node.profile_max_efa, node.profile_gdr) == (max_efa, gdr)
