"""The Slurm PMI hook of the Enroot TEST DOUBLE, as Enroot's hooks.d/extra/50-slurm-pmi.sh.

Facts (Enroot 4.1's hook): in a Slurm step (SLURM_JOB_ID and SLURM_STEP_ID set) the
SLURM_* variables go into the container; with PMIx (SLURM_MPI_TYPE unset or pmix*, and
PMIX_* variables present) the PMIX_* ones too, PMIX_MCA_ptl/psec/gds from
PMIX_PTL_MODULE/PMIX_SECURITY_MODE/PMIX_GDS_MODULE unless set, and two directories are bound
at their own paths with ``x-create=dir,bind,rw,nosuid,noexec,nodev,private``: the step's
application directory ``$PMIX_SYSTEM_TMPDIR/spmix_appdir_UID_JOB.STEP`` (else
``spmix_appdir_JOB.STEP``; ``nofail``) and ``$PMIX_SERVER_TMPDIR`` (not nofail: a missing
one fails the start); both default to TMPDIR, TEMP, TMP, /tmp. Runs as root on the host.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import test_enroot_test_runtime as rt

# The runtime tests' fixtures, registered in this module by name.
prerequisites, base_tree, env, image = rt.prerequisites, rt.base_tree, rt.env, rt.image
enroot, one_line_error, container_env = rt.enroot, rt.one_line_error, rt.container_env


@pytest.fixture()
def step(env, tmp_path) -> dict[str, str]:
    """The environment a Slurm step with srun --mpi=pmix hands to `enroot start`."""
    rt.standard_hooks(env)
    server, system = tmp_path / "pmix.77.3", tmp_path / "spool"
    server.mkdir()
    (server / "server-file").write_text("from the PMIx server\n")
    (system / f"spmix_appdir_{os.getuid()}_77.3").mkdir(parents=True)
    return dict(env, SLURM_JOB_ID="77", SLURM_STEP_ID="3", SLURM_JOB_UID=str(os.getuid()),
                SLURM_MPI_TYPE="pmix_v4", PMIX_SERVER_TMPDIR=str(server),
                PMIX_SYSTEM_TMPDIR=str(system), PMIX_RANK="0", PMIX_PTL_MODULE="tcp",
                PMIX_SECURITY_MODE="native", PMIX_GDS_MODULE="hash", PMIX_MCA_gds="ds21")


def mount_options(mountinfo: str, target: str) -> set[str]:
    for line in mountinfo.splitlines():
        f = line.split()
        if len(f) > 5 and f[4] == target:
            return set(f[5].split(","))
    pytest.fail(f"{target} is not a mount point in the container")


def test_pmix_server_and_app_dirs_are_bound_with_the_pmix_variables(step, image):
    server = step["PMIX_SERVER_TMPDIR"]
    appdir = f"{step['PMIX_SYSTEM_TMPDIR']}/spmix_appdir_{os.getuid()}_77.3"
    r = enroot(step, "start", str(image), "sh", "-c",
               f"cat '{server}/server-file' && echo rank0 > '{appdir}/from-the-task' && "
               "cat /proc/self/mountinfo && env")
    assert r.stdout.startswith("from the PMIx server\n"), r.stdout
    assert Path(appdir, "from-the-task").read_text() == "rank0\n", "the app dir is bound rw"
    for d in (server, appdir):
        assert {"rw", "nosuid", "nodev", "noexec"} <= mount_options(r.stdout, d)
    e = container_env(r.stdout)
    assert e["PMIX_SERVER_TMPDIR"] == server and e["PMIX_RANK"] == "0"
    assert (e["PMIX_MCA_ptl"], e["PMIX_MCA_psec"], e["PMIX_MCA_gds"]) == ("tcp", "native", "ds21")
    assert e["SLURM_JOB_ID"] == "77" and e["SLURM_STEP_ID"] == "3"


def test_app_dir_without_the_uid_and_tmpdir_defaults(step, image, tmp_path):
    tmp = tmp_path / "tmpdir"
    (tmp / "spmix_appdir_77.3").mkdir(parents=True)
    e = {k: v for k, v in step.items() if k not in ("PMIX_SERVER_TMPDIR", "PMIX_SYSTEM_TMPDIR")}
    e["TMPDIR"] = str(tmp)
    r = enroot(e, "start", str(image), "cat", "/proc/self/mountinfo")
    mount_options(r.stdout, str(tmp))                          # the server dir: TMPDIR
    mount_options(r.stdout, f"{tmp}/spmix_appdir_77.3")       # no per-uid app dir: the old name


def test_a_missing_server_dir_fails_the_start_and_a_missing_app_dir_does_not(step, image, tmp_path):
    missing_app = dict(step, PMIX_SYSTEM_TMPDIR=str(tmp_path / "no-spool"))
    assert enroot(missing_app, "start", str(image), "true").returncode == 0
    line = one_line_error(enroot(dict(step, PMIX_SERVER_TMPDIR=str(tmp_path / "gone")), "start",
                                 str(image), "true", check=False))
    assert str(tmp_path / "gone") in line


@pytest.mark.parametrize("change", [{"SLURM_MPI_TYPE": "pmi2"}, {"SLURM_JOB_ID": None}])
def test_no_pmix_binds_without_pmix_or_outside_a_step(step, image, change):
    e = dict(step, **{k: v for k, v in change.items() if v})
    for k in (k for k, v in change.items() if v is None):
        del e[k]
    r = enroot(e, "start", str(image), "sh", "-c",
               f"test -e '{step['PMIX_SERVER_TMPDIR']}/server-file' && echo BOUND; env")
    assert "BOUND" not in r.stdout
    assert not any(k.startswith("PMIX_") for k in container_env(r.stdout)), r.stdout


def test_the_short_fstab_form_enroot_s_hook_writes_binds_at_the_same_path(env, image, tmp_path):
    """Enroot's hook writes "SRC OPTS" lines: DST left out means SRC's own path."""
    src = tmp_path / "short form"
    src.mkdir()
    (src / "f").write_text("same path\n")
    conf = tmp_path / "short.conf"
    esc = str(src).replace(" ", "\\040")
    conf.write_text("hooks() {\n"
                    f"  echo '{esc} x-create=dir,bind,ro,nosuid,nodev,private'"
                    " >> \"$ENROOT_MOUNTS\"\n"
                    "}\n")
    r = enroot(env, "start", "-c", str(conf), str(image), "sh", "-c",
               f"cat '{src}/f'; touch '{src}/w' 2>/dev/null || echo read-only")
    assert r.stdout == "same path\nread-only\n"
