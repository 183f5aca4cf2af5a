"""The options real recipes need (issue 14): `sbatch:` (extra #SBATCH long options, never
one mksbatch owns), `srun:` (extra options for the launch) and `setup:` (the user's own
shell lines, run in the batch shell before the launch)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from mksbatch_helpers import calls, run_script, script_for, shellcheck

from squall.errors import SquallError
from squall.mksbatch import load_recipe

BASE = "name: t\nnodes: 2\nlog_dir: /fsx/logs\nlauncher: srun\ncommand: [prog, --x]\n"


def error(tmp_path: Path, text: str) -> str:
    (tmp_path / "r.yaml").write_text(text)
    with pytest.raises(SquallError) as info:
        load_recipe(tmp_path / "r.yaml", display_path="r.yaml")
    return str(info.value)


def lint(tmp_path: Path, script: str) -> None:
    path = tmp_path / "lint.sbatch"
    path.write_text(script)
    subprocess.run(["bash", "-n", str(path)], check=True)
    proc = subprocess.run([shellcheck(), "--shell=bash", str(path)], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stdout


# --- sbatch: ---------------------------------------------------------------------------

SBATCH = """sbatch:
  mail-type: END,FAIL
  mail-user: me@example.org
  reservation: res1
  constraint: "a100&efa|[rack1*2]"
  dependency: afterok:123:456
  begin: now+1hour
  nice: 010
  hold: true
  comment: false
"""


def test_sbatch_options_are_written_as_sbatch_lines(tmp_path: Path) -> None:
    script = script_for(tmp_path, BASE + SBATCH)
    lines = [ln for ln in script.splitlines() if ln.startswith("#SBATCH")]
    assert lines[-9:] == [
        "#SBATCH --output=/fsx/logs/%x-%j.out",
        "#SBATCH --mail-type=END,FAIL",
        "#SBATCH --mail-user=me@example.org",
        "#SBATCH --reservation=res1",
        "#SBATCH --constraint=a100&efa|[rack1*2]",
        "#SBATCH --dependency=afterok:123:456",
        "#SBATCH --begin=now+1hour",
        "#SBATCH --nice=010",
        "#SBATCH --hold",
    ]
    lint(tmp_path, script)
    recipe = load_recipe(tmp_path / "r.yaml")
    assert recipe.sbatch[-1] == ("hold", None) and ("comment", None) not in recipe.sbatch


OWNED = [
    ("nodes: 4", "sbatch.nodes: is set by mksbatch from nodes: change nodes in the recipe "
     "instead"),
    ("requeue: true", "sbatch.requeue: is set by mksbatch from requeue.max_restarts: change "
     "requeue.max_restarts in the recipe instead"),
    ("no-requeue: true", "sbatch.no-requeue: is set by mksbatch from requeue.max_restarts: "
     "change requeue.max_restarts in the recipe instead"),
    ("signal: B:USR2@60", "sbatch.signal: is set by mksbatch from signal: change signal in "
     "the recipe instead"),
    ("output: /tmp/x", "sbatch.output: is set by mksbatch from log_dir: change log_dir in "
     "the recipe instead"),
    ("error: /tmp/x", "sbatch.error: is set by mksbatch from log_dir: change log_dir in the "
     "recipe instead"),
    ("open-mode: truncate", "sbatch.open-mode: is set by mksbatch from log_dir: change "
     "log_dir in the recipe instead"),
    ("account: ml", "sbatch.account: is set by mksbatch from account: change account in "
     "the recipe instead"),
    ("time: '10'", "sbatch.time: is set by mksbatch from time: change time in the recipe "
     "instead"),
    ("job-name: x", "sbatch.job-name: is set by mksbatch from name: change name in the "
     "recipe instead"),
    ("ntasks: 8", "sbatch.ntasks: is set by mksbatch from nodes and tasks_per_node: change "
     "nodes and tasks_per_node in the recipe instead"),
    ("gpus-per-node: 8", "sbatch.gpus-per-node: is set by mksbatch from gpus_per_node: "
     "change gpus_per_node in the recipe instead"),
    ("wait-all-nodes: 0", "sbatch.wait-all-nodes: is always 1: mksbatch starts a job only "
     "when all its nodes are up"),
    ("wrap: hostname", "sbatch.wrap: cannot be used: mksbatch writes the batch script"),
    ("container-image: /x.sqsh", "sbatch.container-image: container flags go in the "
     "container section, where srun gets them (on an #SBATCH line they would run the batch "
     "shell itself in the container)"),
    ("N: 2", "sbatch.N: is set by mksbatch from nodes: change nodes in the recipe instead"),
    ("C: a100", "sbatch.C: is not a long sbatch option name: write the name without dashes, "
     "in lower case, e.g. mail-type"),
    ("--mail-type: END", "sbatch.--mail-type: is not a long sbatch option name: write the "
     "name without dashes, in lower case, e.g. mail-type"),
    ("comment: two words", "sbatch.comment: 'two words' is written on an #SBATCH line, where "
     "sbatch splits at spaces and reads quotes, backslashes and # itself: leave those out"),
    ("comment: 'a#b'", "sbatch.comment: 'a#b' is written on an #SBATCH line, where sbatch "
     "splits at spaces and reads quotes, backslashes and # itself: leave those out"),
    ("mail-type: [END]", "sbatch.mail-type: must be one value, true (an option without a "
     "value) or false (left out)"),
    ("mail-type:", "sbatch.mail-type: is empty: give a value, or true for an option without "
     "one"),
]


@pytest.mark.parametrize("line,message", OWNED, ids=[o[0].split(":")[0] for o in OWNED])
def test_sbatch_refuses_what_mksbatch_owns_and_what_sbatch_misreads(
        line: str, message: str, tmp_path: Path) -> None:
    assert error(tmp_path, BASE + f"sbatch:\n  {line}\n") == f"r.yaml:7: {message}"


def test_sbatch_must_be_a_mapping(tmp_path: Path) -> None:
    assert error(tmp_path, BASE + "sbatch: [--hold]\n") == (
        "r.yaml:6: sbatch: must be a mapping of fields (key: value)")


# --- srun: -----------------------------------------------------------------------------

def test_srun_options_reach_srun_in_order(tmp_path: Path) -> None:
    script = script_for(tmp_path, BASE + "mpi: pmix\nsrun: [--cpu-bind=cores, -l, "
                        "--network=single, \"--comment=a b 'c'\"]\n")
    lint(tmp_path, script)
    proc = run_script(tmp_path, script)
    assert proc.returncode == 0, proc.stderr
    [argv] = [c["argv"] for c in calls(tmp_path) if c["cmd"] == "srun"]
    assert argv == ["--kill-on-bad-exit=1", "--mpi=pmix", "--cpu-bind=cores", "-l",
                    "--network=single", "--comment=a b 'c'", "prog", "--x"]


def test_srun_options_with_torchrun(tmp_path: Path) -> None:
    text = BASE.replace("launcher: srun", "launcher: torchrun") + "srun: [--cpu-bind=none]\n"
    proc = run_script(tmp_path, script_for(tmp_path, text))
    assert proc.returncode == 0, proc.stderr
    [argv] = [c["argv"] for c in calls(tmp_path) if c["cmd"] == "srun"]
    assert argv[:3] == ["--ntasks-per-node=1", "--kill-on-bad-exit=1", "--cpu-bind=none"]


SRUN_ERRORS = [
    ("srun: [--cpu-bind, cores]", "r.yaml:6: srun[1]: 'cores' is not an option: give srun "
     "options starting with -, each with its value in the same item, e.g. --cpu-bind=cores"),
    ("srun: [--mpi=pmi2]", "r.yaml:6: srun[0]: --mpi is set by mksbatch from mpi: change mpi "
     "in the recipe instead"),
    ("srun: [--kill-on-bad-exit=0]", "r.yaml:6: srun[0]: --kill-on-bad-exit is set by "
     "mksbatch from launcher: change launcher in the recipe instead"),
    ("srun: [--container-image=/x.sqsh]", "r.yaml:6: srun[0]: --container-image belongs in "
     "the container section: move it there"),
    ("srun: [--no-container-mount-home]", "r.yaml:6: srun[0]: --no-container-mount-home "
     "belongs in the container section: move it there"),
    ("srun: [-N2]", "r.yaml:6: srun[0]: -N is set by mksbatch from nodes: change nodes in "
     "the recipe instead"),
    ("srun: [--auto-resume=1]", "r.yaml:6: srun[0]: --auto-resume is set by mksbatch from "
     "target: change target in the recipe instead"),
    ("srun: --cpu-bind=cores", "r.yaml:6: srun: must be a list, e.g. [a, b]"),
]


@pytest.mark.parametrize("line,message", SRUN_ERRORS, ids=[s[1][10:30] for s in SRUN_ERRORS])
def test_srun_errors(line: str, message: str, tmp_path: Path) -> None:
    assert error(tmp_path, BASE + line + "\n") == message


def test_srun_with_mpirun_is_an_error(tmp_path: Path) -> None:
    text = BASE.replace("launcher: srun", "launcher: mpirun") + "srun: [-l]\n"
    assert error(tmp_path, text) == ("r.yaml:6: srun: adds options to srun, which launcher: "
                                     "mpirun does not use: remove it")


# --- setup: ----------------------------------------------------------------------------

SETUP = """setup:
  - export SETUP_SAW="${SETUP_INPUT:-none} $((1 + 2))"
  - 'echo "unset is fine here: ${NOT_SET_ANYWHERE}"'
  - |
    if [[ -n "${SETUP_SAW}" ]]; then
        touch "$PWD/setup-ran"
    fi
"""


def test_setup_lines_run_in_the_batch_shell_before_the_launch(tmp_path: Path) -> None:
    script = script_for(tmp_path, BASE + SETUP)
    assert 'export SETUP_SAW="${SETUP_INPUT:-none} $((1 + 2))"' in script.splitlines()
    lint(tmp_path, script)
    proc = run_script(tmp_path, script, SETUP_INPUT="from-env", STUB_ENV_NAMES="SETUP_SAW")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "setup-ran").exists()
    assert "unset is fine here: " in proc.stdout
    [srun] = [c for c in calls(tmp_path) if c["cmd"] == "srun"]
    assert srun["env"] == {"SETUP_SAW": "from-env 3"}


def test_a_failing_setup_line_stops_the_job_before_the_program(tmp_path: Path) -> None:
    script = script_for(tmp_path, BASE + "setup: [echo one, 'false', touch never]\n")
    proc = run_script(tmp_path, script)
    assert proc.returncode == 1
    assert "squall: a setup line failed (status 1): the program is not started" in proc.stderr
    assert not [c for c in calls(tmp_path) if c["cmd"] == "srun"]
    assert not (tmp_path / "never").exists()


def test_the_script_is_strict_again_after_setup(tmp_path: Path) -> None:
    """set -u is back on for mksbatch's own code (a typo there must not pass silently)."""
    script = script_for(tmp_path, BASE + "setup: ['true']\n")
    after = script.split("set -u +e\n", 1)[1]
    assert "set +u" not in after


def test_setup_does_not_run_beyond_the_restart_cap(tmp_path: Path) -> None:
    script = script_for(tmp_path, BASE + "requeue: {max_restarts: 1}\n"
                        "setup: [touch setup-ran]\n")
    proc = run_script(tmp_path, script, SLURM_RESTART_COUNT="2")
    assert proc.returncode == 3
    assert not (tmp_path / "setup-ran").exists()


def test_setup_runs_before_the_checkpoint_lookup(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    text = (BASE + f"checkpoint:\n  dir: {ck}\n  complete_marker: DONE\n"
            "  resume: --resume {checkpoint}\n"
            f"setup:\n  - mkdir -p {ck}/step-7 && touch {ck}/step-7/DONE\n")
    proc = run_script(tmp_path, script_for(tmp_path, text))
    assert proc.returncode == 0, proc.stderr
    [argv] = [c["argv"] for c in calls(tmp_path) if c["cmd"] == "srun"]
    assert argv[-2:] == ["--resume", f"{ck}/step-7"]


@pytest.mark.parametrize("text,message", [
    ("setup: [module load cuda, [a]]", "r.yaml:6: setup[1]: must be a string, not a list or "
     "mapping"),
    ("setup: []", "r.yaml:6: setup: is an empty list: give at least one item or remove it"),
    ('setup: ["echo \\u0007"]', "r.yaml:6: setup[0]: contains control character U+0007: "
     "write it with printf or a $'...' escape instead"),
    ("setup: [yes]", "r.yaml:6: setup[0]: 'yes' is read as a YAML boolean: quote it, "
     "e.g. \"yes\""),
])
def test_setup_errors(text: str, message: str, tmp_path: Path) -> None:
    assert error(tmp_path, BASE + text + "\n") == message


def test_setup_lines_are_split_at_newlines_only(tmp_path: Path) -> None:
    """U+2028 and U+0085 are line breaks to Python's splitlines, not to bash."""
    script = script_for(tmp_path, BASE + "setup: [\"echo 'a\\u2028b\\u0085c'\"]\n")
    assert "\necho 'a\u2028b\u0085c'\n" in script


def test_setup_as_one_block(tmp_path: Path) -> None:
    r = load_recipe(_write(tmp_path, BASE + "setup: |\n  module load a\n  module load b\n"))
    assert r.setup == ("module load a\nmodule load b\n",)


def _write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "r.yaml").write_text(text)
    return tmp_path / "r.yaml"
