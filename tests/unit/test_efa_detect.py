"""EFA detection on prepared sysfs/dev/opt trees (stand-ins: no EFA hardware here)."""

from __future__ import annotations

import pytest

from fake_efa_tree import make_image, make_node
from squall.efa import detect as efa
from squall.errors import SquallError


def _detect(node):
    return efa.detect(str(node.sysfs), str(node.dev), str(node.opt))


def test_p5_with_32_devices(tmp_path):
    node = _detect(make_node(tmp_path, "p5.48xlarge", 32))
    assert node.instance_type == "p5.48xlarge"
    assert (node.n_devices, node.n_uverbs) == (32, 32)
    assert node.first_device == "rdmap16s27"
    assert node.profile_known and node.profile_max_efa == 32
    assert node.profile_gdr == 1 and node.profile_rdma_read == 1
    opt = str((tmp_path / "opt/amazon").resolve())
    assert node.libfabric.dir == f"{opt}/efa/lib"
    assert node.libfabric.prefix == f"{opt}/efa"
    assert node.libfabric.file.startswith("libfabric.so")
    assert node.ofi_nccl.dir == f"{opt}/ofi-nccl/lib"
    assert node.ofi_nccl.plugin_suffix == "ofi"
    assert node.ofi_nccl.net_name == "Libfabric"
    assert node.opt_root == opt


def test_g5_one_device_without_rdma_read(tmp_path):
    node = _detect(make_node(tmp_path, "g5.48xlarge", 1))
    assert node.n_devices == 1
    assert node.profile_max_efa == 1
    assert node.profile_gdr == 0
    assert node.profile_rdma_read == 0


def test_cpu_node_without_efa(tmp_path):
    node = _detect(make_node(tmp_path, "c5.xlarge", 0, libfabric=False, ofi_nccl=False))
    assert node.n_devices == 0 and node.n_uverbs == 0
    assert node.first_device == ""
    assert not node.profile_known
    assert not node.libfabric.found and not node.ofi_nccl.found


def test_only_efa_driver_counts(tmp_path):
    node = _detect(make_node(tmp_path, "p4d.24xlarge", 4, other_devices=("mlx5_0", "mlx5_1")))
    assert node.n_devices == 4
    assert node.n_uverbs == 6  # uverbs exist for every RDMA device


def test_missing_product_name_is_unknown_type(tmp_path):
    node = _detect(make_node(tmp_path, None, 2))
    assert node.instance_type == ""
    assert node.n_devices == 2 and not node.profile_known


def test_old_layout_unsuffixed_plugin_old_wording(tmp_path):
    node = _detect(make_node(tmp_path, "p4d.24xlarge", 4, ofi_dir="aws-ofi-nccl",
                             suffixed=False, wording="old", libdir="lib64"))
    assert node.ofi_nccl.dir.endswith("/aws-ofi-nccl/lib64")
    assert node.ofi_nccl.file == "libnccl-net.so"
    assert node.ofi_nccl.plugin_suffix == ""
    assert node.ofi_nccl.net_name == "AWS Libfabric"
    assert node.libfabric.dir.endswith("/efa/lib64")


def test_missing_opt_root_means_no_libraries(tmp_path):
    fake = make_node(tmp_path, "p5.48xlarge", 32, libfabric=False, ofi_nccl=False)
    node = efa.detect(str(fake.sysfs), str(fake.dev), str(tmp_path / "nowhere"))
    assert node.n_devices == 32
    assert not node.libfabric.found and not node.ofi_nccl.found


def test_missing_sysfs_root_is_a_node_without_efa(tmp_path):
    # plugstack roots may name a tree only some nodes have
    fake = make_node(tmp_path, "p5.48xlarge", 1)
    node = efa.detect(str(tmp_path / "nosys"), str(fake.dev), str(fake.opt))
    assert node.n_devices == 0 and node.instance_type == ""


def test_root_that_is_a_file_is_one_line_error(tmp_path):
    fake = make_node(tmp_path, "p5.48xlarge", 1)
    (tmp_path / "notadir").write_text("")
    with pytest.raises(SquallError) as exc:
        efa.detect(str(tmp_path / "notadir"), str(fake.dev), str(fake.opt))
    msg = str(exc.value)
    assert msg == (f"efa_sysfs_root '{tmp_path / 'notadir'}' is not a directory: point "
                   "efa_sysfs_root at the node's sysfs tree")


def test_memlock_is_read(tmp_path):
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    node = _detect(make_node(tmp_path, "p5.48xlarge", 1))
    assert node.memlock == (-1 if soft == resource.RLIM_INFINITY else soft)


# --- the image's own copies ---------------------------------------------------------

def test_image_with_its_own_aws_ofi_nccl(tmp_path):
    image = efa.scan_image(str(make_image(tmp_path / "img", libfabric=True, ofi_nccl=True)))
    assert image.libfabric.dir == "/opt/amazon/efa/lib"
    assert image.ofi_nccl.dir == "/opt/amazon/ofi-nccl/lib"
    assert image.ofi_nccl.plugin_suffix == "ofi"
    assert image.ofi_nccl.net_name == "Libfabric"


def test_image_plugin_at_ngc_path(tmp_path):
    root = make_image(tmp_path / "img", ofi_nccl=True, ofi_dir="opt/aws-ofi-nccl/lib",
                      wording="old")
    image = efa.scan_image(str(root))
    assert image.ofi_nccl.dir == "/opt/aws-ofi-nccl/lib"
    assert image.ofi_nccl.net_name == "AWS Libfabric"
    assert not image.libfabric.found


def test_image_without_libraries(tmp_path):
    image = efa.scan_image(str(make_image(tmp_path / "img")))
    assert not image.libfabric.found and not image.ofi_nccl.found


def test_image_symlinks_resolve_inside_the_image(tmp_path):
    # An absolute symlink in the image must not find the host's libraries: after the
    # root switch it points inside the image, where nothing is.
    host = make_node(tmp_path / "host", "p5.48xlarge", 1)
    root = make_image(tmp_path / "img")
    (root / "opt").mkdir()
    (root / "opt" / "amazon").symlink_to(str(host.opt.resolve()))
    image = efa.scan_image(str(root))
    assert not image.libfabric.found and not image.ofi_nccl.found
    # while a symlink that stays inside the image is followed
    (root / "opt" / "amazon").unlink()
    (root / "real").mkdir()
    make_image(root / "real", libfabric=True, ofi_nccl=True)
    (root / "opt" / "amazon").symlink_to("/real/opt/amazon")
    image = efa.scan_image(str(root))
    assert image.ofi_nccl.found and image.libfabric.found


def test_image_root_must_exist(tmp_path):
    with pytest.raises(SquallError, match="ENROOT_ROOTFS"):
        efa.scan_image(str(tmp_path / "missing"))
