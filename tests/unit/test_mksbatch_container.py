"""Every container flag of the plugin in the recipe's `container:` section (issue 14), each
validated by the plugin's own parser (the C core, through squall.core)."""

from __future__ import annotations

from pathlib import Path

import pytest
from mksbatch_helpers import calls, run_script, script_for

from squall import core
from squall.errors import SquallError
from squall.mksbatch import load_recipe
from squall.mksbatch.container import FLAG_FIELDS

BASE = ("name: t\nnodes: 2\nlog_dir: /fsx/logs\nlauncher: srun\ncommand: [prog]\n"
        "environment: {HF_HOME: /fsx/hf}\n")


def srun_argv(tmp_path: Path, container: str) -> list[str]:
    script = script_for(tmp_path, BASE + "container:\n  image: /fsx/i.sqsh\n" + container)
    proc = run_script(tmp_path, script)
    assert proc.returncode == 0, proc.stderr
    [argv] = [c["argv"] for c in calls(tmp_path) if c["cmd"] == "srun"]
    return argv[1:-1]


def error(tmp_path: Path, container: str) -> str:
    (tmp_path / "r.yaml").write_text(BASE + "container:\n  image: /fsx/i.sqsh\n" + container)
    with pytest.raises(SquallError) as info:
        load_recipe(tmp_path / "r.yaml", display_path="r.yaml")
    return str(info.value)


def test_every_flag_reaches_srun(tmp_path: Path) -> None:
    assert srun_argv(tmp_path, """\
  mounts: [/fsx:/fsx]
  workdir: /fsx/w
  name: train:create
  save: /fsx/out.sqsh
  mount_home: false
  remap_root: true
  entrypoint: false
  entrypoint_log: true
  writable: true
  efa: require
  nccl_debug: INFO
  log: verbose
  env: [HF_TOKEN, PATH, HF_HOME]
""") == [
        "--container-image=/fsx/i.sqsh", "--container-mounts=/fsx:/fsx",
        "--container-workdir=/fsx/w", "--container-name=train:create",
        "--container-save=/fsx/out.sqsh", "--no-container-mount-home",
        "--container-remap-root", "--no-container-entrypoint", "--container-entrypoint-log",
        "--container-writable", "--container-efa=require", "--container-nccl-debug=INFO",
        "--container-log=verbose", "--container-env=HF_HOME,HF_TOKEN,PATH",
    ]


def test_the_other_side_of_each_switch(tmp_path: Path) -> None:
    assert srun_argv(tmp_path, "  writable: false\n  remap_root: false\n  entrypoint: true\n"
                     "  entrypoint_log: false\n") == [
        "--container-image=/fsx/i.sqsh", "--no-container-remap-root",
        "--container-entrypoint", "--container-readonly", "--container-env=HF_HOME"]


def test_unshare_maps_to_container_unshare(tmp_path: Path) -> None:
    """Needs --container-unshare in the C core's flag table (Pyxis 0.24's NS[,NS...])."""
    assert srun_argv(tmp_path, "  unshare: [net, ipc, uts]\n") == [
        "--container-image=/fsx/i.sqsh", "--container-unshare=net,ipc,uts",
        "--container-env=HF_HOME"]


def test_unshare_is_checked_by_the_plugin(tmp_path: Path) -> None:
    message = error(tmp_path, "  unshare: [net, pid]\n")
    assert message.startswith("r.yaml:9: container.unshare: --container-unshare"), message
    assert "unknown container option" not in message


@pytest.mark.parametrize("field,message", [
    ("name: 'a:bad'", "r.yaml:9: container.name: --container-name: 'a:bad': unknown flag "
     "'bad' (use auto, create, exec or no_exec)"),
    ("env: [1A]", "r.yaml:9: container.env[0]: --container-env: '1A' is not a variable name "
     "(names are letters, digits and '_', not starting with a digit)"),
    ("env: 'A,B'", "r.yaml:9: container.env: must be a list, e.g. [a, b]"),
    ("writable: maybe", "r.yaml:9: container.writable: must be true or false, got 'maybe'"),
    ("log: loud", "r.yaml:9: container.log: --container-log: 'loud' is not a log level (use "
     "quiet or verbose)"),
    ("save: ''", "r.yaml:9: container.save: is empty: give a value or remove the field"),
    ("nccl_debug: LOUD", "r.yaml:9: container.nccl_debug: --container-nccl-debug: 'LOUD' is "
     "not an NCCL_DEBUG level (use VERSION, WARN, INFO or TRACE)"),
    ("unshare: []", "r.yaml:9: container.unshare: is an empty list: give at least one item "
     "or remove it"),
])
def test_plugin_parser_messages(field: str, message: str, tmp_path: Path) -> None:
    assert error(tmp_path, f"  {field}\n").startswith(message)


def test_every_plugin_flag_has_a_recipe_field() -> None:
    """A flag added to the plugin's table must get a recipe field (this test says which)."""
    mapped = {flag for flags in FLAG_FIELDS.values() for flag in flags}
    mapped.add("container-prestart")  # the `prestart` switch, an #SBATCH line
    missing = {f.name for f in core.container_flags()} - mapped
    assert not missing, f"container flags with no recipe field: {sorted(missing)}"


def test_unshare_flag_is_in_the_plugin_table() -> None:
    """pyxis-compat.md: --container-unshare=NS[,NS...] (net, ipc, uts), Pyxis 0.24."""
    assert "container-unshare" in {f.name for f in core.container_flags()}


def sbatch_lines(script: str) -> list[str]:
    return [line.split(" ", 1)[1] for line in script.splitlines() if line.startswith("#SBATCH ")]


def test_prestart_writes_the_containers_flags_for_the_job_prolog(tmp_path: Path) -> None:
    container = ("  mounts: [/fsx:/fsx]\n  workdir: /fsx/w\n  efa: \"off\"\n"
                 "  env: [HF_TOKEN]\n  prestart: true\n")
    script = script_for(tmp_path, BASE + "container:\n  image: /fsx/i.sqsh\n" + container)
    lines = [x for x in sbatch_lines(script) if "container" in x]
    # The image as --container-prestart (not --container-image: the batch shell stays on
    # the host); the flags the prolog can start with; never --container-env, whose values
    # only the job's environment holds.
    assert lines == ["--container-prestart=/fsx/i.sqsh", "--container-mounts=/fsx:/fsx",
                     "--container-workdir=/fsx/w", "--container-efa=off"]
    # srun's flags are unchanged: the steps join the prolog's container when they match.
    assert srun_argv(tmp_path, container)[:4] == [
        "--container-image=/fsx/i.sqsh", "--container-mounts=/fsx:/fsx",
        "--container-workdir=/fsx/w", "--container-efa=off"]
    plain = script_for(tmp_path, BASE + "container:\n  image: /fsx/i.sqsh\n")
    assert not [x for x in sbatch_lines(plain) if "container" in x]


def test_prestart_refuses_what_an_sbatch_line_cannot_hold(tmp_path: Path) -> None:
    message = error(tmp_path, "  mounts: ['/fsx/my data:/data']\n  prestart: true\n")
    assert "container.prestart" in message and "#SBATCH line" in message, message
