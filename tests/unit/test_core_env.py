"""Environment rules (spank/core/env.c): the cleaned runtime environment and the merge of
the container's environment into each task's, driven through cffi."""

import pytest

from squall.core import (
    clean_environment,
    env_denied,
    keep_environ_lines,
    merge_environment,
    overlay_environment,
    task_unset,
)
from squall.errors import SquallError


@pytest.mark.parametrize("name", ["LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "GLIBC_TUNABLES",
                                  "BASH_ENV", "ENV", "BASH_FUNC_foo%%", "SHELLOPTS", "IFS",
                                  "ENROOT_DATA_PATH", "ENROOT_RUNTIME_PATH", "ENROOT_CACHE_PATH",
                                  "ENROOT_TEMP_PATH", "ENROOT_SYSCONF_PATH", "ENROOT_LIBRARY_PATH",
                                  "ENROOT_SQUASH_OPTIONS", "ENROOT_ALLOW_HTTP",
                                  "ENROOT_MAX_CONNECTIONS", "ENROOT_GZIP_PROGRAM", "SLURM_PROCID",
                                  "SLURM_LOCALID", "SLURM_TASK_PID", "SLURM_CPU_BIND_LIST",
                                  "PMI_RANK", "PMI_FD", "PMIX_RANK", "CUDA_VISIBLE_DEVICES",
                                  "OMPI_COMM_WORLD_RANK"])
def test_denied(name):
    assert env_denied(name)


@pytest.mark.parametrize("name", ["PATH", "HOME", "USER", "TERM", "LANG", "https_proxy",
                                  "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_MPI_TYPE",
                                  "PMIX_SERVER_TMPDIR", "LDFLAGS", "ENROOTX", "SLURM_PROCIDX",
                                  "ENROOT_ROOTFS_WRITABLE", "ENROOT_REMAP_ROOT",
                                  "ENROOT_MOUNT_HOME", "ENROOT_RESTRICT_DEV",
                                  "ENROOT_CONFIG_PATH", "MELLANOX_VISIBLE_DEVICES"])
def test_kept(name):
    assert not env_denied(name)


def test_clean_keeps_order_and_drops_malformed():
    env = ["PATH=/usr/bin", "LD_PRELOAD=/evil.so", "noequals", "=novalue", "HOME=/h",
           "ENROOT_RUNTIME_PATH=/tmp/x", "SLURM_PROCID=3", "SLURM_JOB_ID=7", "X=a=b"]
    assert list(clean_environment(env).items()) == [
        ("PATH", "/usr/bin"), ("HOME", "/h"), ("SLURM_JOB_ID", "7"), ("X", "a=b")]


def test_container_values_win_except_kept_and_per_task():
    task = {"PATH": "/host/bin", "HOME": "/home/u", "SLURM_PROCID": "3",
            "CUDA_VISIBLE_DEVICES": "3", "NCCL_DEBUG": "WARN", "ONLY_HOST": "h"}
    block = (b"PATH=/usr/local/nvidia/bin:/usr/bin\0HOME=/root\0SLURM_PROCID=0\0"
             b"CUDA_VISIBLE_DEVICES=0\0NCCL_DEBUG=INFO\0NEW=c\0")
    merged = merge_environment(task, block, keep="HOME,NCCL_DEBUG")
    assert merged == {"PATH": "/usr/local/nvidia/bin:/usr/bin", "HOME": "/home/u",
                      "SLURM_PROCID": "3", "CUDA_VISIBLE_DEVICES": "3", "NCCL_DEBUG": "WARN",
                      "ONLY_HOST": "h", "NEW": "c"}
    assert list(merged)[-1] == "NEW"
    assert overlay_environment(task, block, keep=["HOME", "NCCL_DEBUG"]) == {
        "PATH": "/usr/local/nvidia/bin:/usr/bin", "NEW": "c"}


def test_kept_name_missing_on_host_takes_container_value():
    assert merge_environment({}, b"HOME=/root\0", keep="HOME") == {"HOME": "/root"}


def test_hostile_blocks_are_skipped_not_fatal():
    block = (b"\0\0noequals\0=empty-key\01BAD=x\0BAD-NAME=x\0ENROOT_X=1\0GOOD=v=w\0"
             b"bad key=1\0NL=a\nb\0LAST=no-final-nul")
    assert merge_environment({}, block) == {"GOOD": "v=w", "NL": "a\nb", "LAST": "no-final-nul"}


def test_last_duplicate_wins_and_non_utf8_values_pass_through():
    out = overlay_environment({}, b"A=1\0A=2\0B=\xff\xfe\0")
    assert out["A"] == "2"
    assert out["B"].encode("utf-8", "surrogateescape") == b"\xff\xfe"


def test_empty_block():
    assert merge_environment({"A": "1"}, b"") == {"A": "1"}
    assert overlay_environment({"A": "1"}, b"") == {}


def test_large_block():
    block = b"".join(b"V%d=%s\0" % (i, b"x" * 100) for i in range(5000))
    merged = merge_environment({"V1": "host"}, block, keep="V1")
    assert len(merged) == 5000 and merged["V1"] == "host" and merged["V4999"] == "x" * 100


def test_nul_in_task_environment_refused():
    with pytest.raises(SquallError, match="NUL"):
        merge_environment({"A": "1\0B=2"}, b"")


# --- Pyxis's task environment rules (issue 10, item 7) ------------------------------------

LOCALE = {"LANG": "xx_XX.UTF-8", "LC_ALL": "xx_XX.UTF-8", "LANGUAGE": "xx", "LC_TIME": "C"}


def test_locale_dropped_from_tasks_unless_named():
    assert merge_environment(LOCALE, b"A=1\0") == {"LC_TIME": "C", "A": "1"}
    assert merge_environment(LOCALE, b"A=1\0", keep="LANG,LANGUAGE") == {
        "LANG": "xx_XX.UTF-8", "LANGUAGE": "xx", "LC_TIME": "C", "A": "1"}
    assert task_unset(LOCALE) == ["LANG", "LC_ALL", "LANGUAGE"]
    assert task_unset(LOCALE, keep="LC_ALL") == ["LANG", "LANGUAGE"]
    assert task_unset({"PATH": "/bin"}) == []


def test_locale_from_the_image_is_kept():
    assert merge_environment(LOCALE, b"LANG=C.UTF-8\0") == {"LC_TIME": "C", "LANG": "C.UTF-8"}


def test_keep_environ_lines_for_the_runtime_start():
    job = {"A": "1", "ENROOT_X": "y", "B": "2", "EMPTY": ""}
    assert keep_environ_lines(job, "A,ENROOT_X,MISSING,EMPTY") == ["A=1", "EMPTY="]
    assert keep_environ_lines(job, None) == []


def test_step_variables_keep_the_task_s_value():
    # Enroot's 50-slurm-pmi hook copies SLURM_*, PMIX_* and PMI_* into the container; a
    # later step joining it must still see its own step's values, and none of an earlier
    # step's SLURM_* it does not have (srun -n 4 sets SLURM_CPU_BIND_LIST, -n 1 may not).
    # PMIX_*/PMI_* the hook made (PMIX_MCA_ptl from PMIX_PTL_MODULE) stay.
    task = {"SLURM_STEP_ID": "7", "PMIX_NAMESPACE": "slurm.pmix.9.7", "PMI_SIZE": "4"}
    block = (b"SLURM_STEP_ID=0\0PMIX_NAMESPACE=slurm.pmix.9.0\0PMI_SIZE=2\0"
             b"SLURM_ONLY_IN_CONTAINER=x\0PMIX_MCA_ptl=tcp\0")
    assert merge_environment(task, block) == {**task, "PMIX_MCA_ptl": "tcp"}


def test_a_slurm_variable_named_by_container_env_comes_from_the_container():
    block = b"SLURM_ONLY_IN_CONTAINER=x\0"
    assert merge_environment({}, block, keep="SLURM_ONLY_IN_CONTAINER") == \
        {"SLURM_ONLY_IN_CONTAINER": "x"}


def test_the_runtime_s_own_path_leaves_the_container_environment():
    """The runtime's fixed PATH, which Enroot hands to the container's first process, is
    taken out of the block the tasks are overlaid with; an image's PATH stays."""
    from squall._core import ffi, lib

    def drop(block: bytes, entry: str) -> bytes:
        buf = ffi.new("char[]", block or b"\0")
        n = ffi.new("size_t *", len(block))
        lib.sq_env_block_drop(buf, n, entry.encode())
        return ffi.buffer(buf, n[0])[:]

    block = b"HOME=/h\0PATH=/usr/bin:/bin\0A=1\0PATH=/usr/bin:/bin\0"
    assert drop(block, "PATH=/usr/bin:/bin") == b"HOME=/h\0A=1\0"
    image = b"PATH=/opt/conda/bin:/usr/bin:/bin\0A=1\0"
    assert drop(image, "PATH=/usr/bin:/bin") == image
    # A longer value with the same start is another entry.
    assert drop(b"PATH=/usr/bin:/bin:/x\0", "PATH=/usr/bin:/bin") == b"PATH=/usr/bin:/bin:/x\0"
    assert drop(b"", "PATH=/usr/bin:/bin") == b""
