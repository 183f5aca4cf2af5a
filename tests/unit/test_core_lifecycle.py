"""The one decision per step (a container of its own or the job's kept one) and the kept
container's key (spank/core/lifecycle.c), through squall.core: the same C the plugin runs."""

from __future__ import annotations

import itertools

import pytest

from squall.core import (
    lifecycle_decide,
    lifecycle_env_differs,
    lifecycle_env_step_specific,
    lifecycle_key,
)
from squall.errors import SquallError


def test_a_step_is_served_by_the_kept_container_by_default():
    plan = lifecycle_decide()
    assert plan.action == "kept"
    assert "kept container" in plan.why


@pytest.mark.parametrize("kwargs,words", [
    ({"named": True}, "named"),
    ({"flag": False}, "--no-container-reuse"),
    ({"reuse": False}, "container_reuse=0"),
    ({"save": True}, "--container-save"),
    ({"batch": True}, "batch"),
    ({"entrypoint": True}, "entrypoint"),
])
def test_what_starts_a_container_for_the_step(kwargs, words):
    plan = lifecycle_decide(**kwargs)
    assert plan.action == "start-step", kwargs
    assert words in plan.why


def test_the_flag_wins_over_the_plugstack_setting():
    assert lifecycle_decide(reuse=False, flag=True).action == "kept"
    assert lifecycle_decide(reuse=True, flag=False).action == "start-step"


def test_every_combination_gives_one_of_the_two_actions():
    for reuse, flag, named, save, batch, entry in itertools.product(
            (True, False), (None, True, False), (True, False), (True, False), (True, False),
            (True, False)):
        plan = lifecycle_decide(reuse=reuse, flag=flag, named=named, save=save, batch=batch,
                                entrypoint=entry)
        reusable = not named and not save and not batch and not entry and (
            flag is True or (flag is None and reuse))
        assert plan.action == ("kept" if reusable else "start-step")


def test_an_out_of_range_field_is_refused():
    with pytest.raises(SquallError, match="invalid input"):
        lifecycle_decide(flag=2)  # type: ignore[arg-type]


ENV = {"PATH": "/usr/bin", "SLURM_JOB_ID": "7", "SLURM_NTASKS": "4", "SLURM_STEP_ID": "0",
       "SLURM_STEP_LAUNCHER_PORT": "4242", "SLURM_SRUN_COMM_PORT": "4343"}
PARTS = ["/fsx/img.sqsh", "0123456789abcdef", "rw=0 root=0", "conf text", "rc text"]


def test_key_is_stable_and_order_independent():
    key = lifecycle_key(PARTS, ENV)
    assert len(key) == 32 and int(key, 16) >= 0
    assert lifecycle_key(PARTS, dict(reversed(list(ENV.items())))) == key


def test_step_ids_and_ports_do_not_change_the_key():
    later = dict(ENV, SLURM_STEP_ID="5", SLURM_STEP_LAUNCHER_PORT="9", SLURM_SRUN_COMM_PORT="8")
    assert lifecycle_key(PARTS, later) == lifecycle_key(PARTS, ENV)
    for name in ("SLURM_STEP_ID", "SLURM_STEPID", "SLURM_SRUN_COMM_PORT"):
        assert lifecycle_env_step_specific(name)


@pytest.mark.parametrize("change", [
    {"SLURM_STEP_GPUS": "1"},       # devices of the step
    {"PMIX_SERVER_TMPDIR": "/x"},   # the PMIx hook binds it
    {"NEW_VAR": "1"},
])
def test_what_the_runtime_may_read_changes_the_key(change):
    assert lifecycle_key(PARTS, dict(ENV, **change)) != lifecycle_key(PARTS, ENV)
    for name in change:
        assert not lifecycle_env_step_specific(name)


# srun -n 1, -n 4, -n 8 in one job: what Slurm sets differently for them.
SHAPES = [
    {"SLURM_NTASKS": "1", "SLURM_NPROCS": "1", "SLURM_STEP_NUM_TASKS": "1",
     "SLURM_TASKS_PER_NODE": "1", "SLURM_STEP_TASKS_PER_NODE": "1"},
    {"SLURM_NTASKS": "4", "SLURM_NPROCS": "4", "SLURM_STEP_NUM_TASKS": "4",
     "SLURM_TASKS_PER_NODE": "4", "SLURM_STEP_TASKS_PER_NODE": "4",
     "SLURM_DISTRIBUTION": "cyclic", "SLURM_CPU_BIND_LIST": "0x1,0x2,0x4,0x8",
     "SLURM_OVERCOMMIT": "1", "SLURM_CPUS_PER_TASK": "2"},   # srun -n 4 -O -c 2
    {"SLURM_NTASKS": "8", "SLURM_NPROCS": "8", "SLURM_STEP_NUM_TASKS": "8",
     "SLURM_TASKS_PER_NODE": "8", "SLURM_STEP_TASKS_PER_NODE": "8",
     "SLURM_STEP_NUM_NODES": "1", "SLURM_STEP_NODELIST": "node1"},
]
STANDARD_PMI_HOOK = 'for var in $(compgen -e "SLURM_"); do printf "%s=%s\\n" "$var" "${!var}"; done'


@pytest.mark.parametrize("hooks", ["", STANDARD_PMI_HOOK])
def test_the_task_count_is_out_of_the_key_unless_a_hook_reads_it(hooks):
    keys = {lifecycle_key(PARTS, dict(ENV, **shape), hooks) for shape in SHAPES}
    assert len(keys) == 1, "steps that differ only in -n must share a kept container"


@pytest.mark.parametrize(("hooks", "name"), [
    ('echo "WORLD_SIZE=${SLURM_NTASKS}" >> "$ENROOT_ENVIRON"', "SLURM_NTASKS"),  # pytorch hook
    ("[ $SLURM_STEP_NUM_NODES -gt 1 ] && echo multi", "SLURM_STEP_NUM_NODES"),
    ("for v in $(compgen -e SLURM_STEP_); do :; done", "SLURM_STEP_NUM_TASKS"),  # a prefix
    ("for v in $(compgen -e SLURM_CPU); do :; done", "SLURM_CPU_BIND_LIST"),
    (None, "SLURM_NTASKS"),                                       # hooks unknown: be safe
])
def test_a_hook_that_reads_the_task_count_keeps_it_in_the_key(hooks, name):
    assert lifecycle_key(PARTS, dict(ENV, **{name: "1"}), hooks) != \
        lifecycle_key(PARTS, dict(ENV, **{name: "8"}), hooks)
    if hooks is not None:   # and only what it reads
        assert lifecycle_key(PARTS, dict(ENV, SLURM_DISTRIBUTION="block"), hooks) == \
            lifecycle_key(PARTS, dict(ENV, SLURM_DISTRIBUTION="cyclic"), hooks)


def test_another_name_that_ends_like_a_slurm_one_is_not_a_read():
    hooks = "echo $MY_SLURM_NTASKS $SLURM_NTASKS_X"
    assert lifecycle_key(PARTS, dict(ENV, SLURM_NTASKS="1"), hooks) == \
        lifecycle_key(PARTS, dict(ENV, SLURM_NTASKS="8"), hooks)


def test_the_hooks_text_alone_does_not_change_the_key():
    assert lifecycle_key(PARTS, ENV, "") == lifecycle_key(PARTS, ENV, STANDARD_PMI_HOOK)


def test_every_part_counts_and_parts_do_not_run_together():
    base = lifecycle_key(PARTS, ENV)
    for i in range(len(PARTS)):
        changed = list(PARTS)
        changed[i] += "x"
        assert lifecycle_key(changed, ENV) != base
    assert lifecycle_key(["ab", "c"], {}) != lifecycle_key(["a", "bc"], {})
    assert lifecycle_key(["a=b"], {}) != lifecycle_key([], {"a": "b"})


# --- does a container started with one environment serve a step with another ------------
# (the job prolog's start, prestart.h: its environment is built from the passwd entry, the
# step's from the job's; only what the start reads may keep the step out.)

PROLOG_ENV = {"PATH": "/usr/bin", "HOME": "/home/u", "USER": "u", "SLURM_JOB_ID": "7",
              "ENROOT_RUNTIME_PATH": "/run/squall/1000/enroot"}
STEP_ENV = dict(PROLOG_ENV, PATH="/opt/conda/bin:/usr/bin", LD_LIBRARY_PATH="/opt/lib",
                LANG="C.UTF-8", SLURM_NTASKS="4", SLURM_STEP_ID="0", OMP_NUM_THREADS="2",
                NCCL_DEBUG="INFO", SQUALL_STEPS_DIR="/fsx/steps")
SITE_HOOKS = (STANDARD_PMI_HOOK + "\n"
              'mode=${SQUALL_STEPS:-on}\n'
              'for v in $(compgen -e NVIDIA_REQUIRE_); do :; done\n'
              'echo "${MELLANOX_VISIBLE_DEVICES}" "$HOME" "$PATH" "$LD_LIBRARY_PATH"\n')


@pytest.mark.parametrize("hooks", [SITE_HOOKS, "", None])
def test_a_step_s_ordinary_environment_does_not_keep_it_out(hooks):
    assert lifecycle_env_differs(PROLOG_ENV, STEP_ENV, hooks) is None


@pytest.mark.parametrize(("change", "name"), [
    ({"ENROOT_ROOTFS_WRITABLE": "yes"}, "ENROOT_ROOTFS_WRITABLE"),   # Enroot's own setting
    ({"ENROOT_REMAP_ROOT": "y"}, "ENROOT_REMAP_ROOT"),
    ({"ENROOT_RUNTIME_PATH": "/elsewhere"}, "ENROOT_RUNTIME_PATH"),  # another value
    ({"SQUALL_STEPS": "off"}, "SQUALL_STEPS"),                       # a hook's word
    ({"NVIDIA_REQUIRE_CUDA": "cuda>=12"}, "NVIDIA_REQUIRE_CUDA"),    # a hook's prefix
    ({"MELLANOX_VISIBLE_DEVICES": "none"}, "MELLANOX_VISIBLE_DEVICES"),
])
def test_what_the_start_reads_keeps_the_step_out(change, name):
    assert lifecycle_env_differs(PROLOG_ENV, dict(STEP_ENV, **change), SITE_HOOKS) == name
    # ... either way round: set when the container started, unset in the step
    assert lifecycle_env_differs(dict(PROLOG_ENV, **change), PROLOG_ENV, SITE_HOOKS) == name


def test_a_hook_s_word_counts_only_when_the_site_runs_that_hook():
    step = dict(STEP_ENV, SQUALL_STEPS="off", MELLANOX_VISIBLE_DEVICES="none")
    assert lifecycle_env_differs(PROLOG_ENV, step, "") is None
    assert lifecycle_env_differs(PROLOG_ENV, step, "echo $MY_SQUALL_STEPS") is None


def test_hooks_unknown_compare_enroot_s_settings_only():
    assert lifecycle_env_differs(PROLOG_ENV, dict(STEP_ENV, SQUALL_STEPS="off"), None) is None
    assert lifecycle_env_differs(PROLOG_ENV, dict(STEP_ENV, ENROOT_MOUNT_HOME="n"),
                                 None) == "ENROOT_MOUNT_HOME"


def test_the_job_s_identity_is_the_job_s_whatever_the_step_carries():
    # slurmstepd gives each task the job's own; srun passes on the submitting shell's.
    pmi_hook = 'appdir="spmix_appdir_${SLURM_JOB_UID}_${SLURM_JOB_ID}.${SLURM_STEP_ID}"'
    prolog = dict(PROLOG_ENV, SLURM_JOB_UID="1000")
    assert lifecycle_env_differs(prolog, dict(STEP_ENV, SLURM_JOB_UID="0"), pmi_hook) is None
    assert lifecycle_env_differs(prolog, STEP_ENV, pmi_hook) is None


def test_slurm_names_count_as_for_the_key():
    # The bare family (Enroot's PMI hook copies every SLURM_*) reads nothing; a named one
    # does, and the step-specific ones never count.
    step = dict(STEP_ENV, SLURM_MPI_TYPE="pmix")
    assert lifecycle_env_differs(PROLOG_ENV, step, STANDARD_PMI_HOOK) is None
    assert lifecycle_env_differs(PROLOG_ENV, step, "echo $SLURM_MPI_TYPE") == "SLURM_MPI_TYPE"
    assert lifecycle_env_differs(PROLOG_ENV, STEP_ENV, "echo $SLURM_STEP_ID") is None
