"""`mksbatch schema` (the recipe's JSON Schema, for editors), `--json` (the resolved recipe
and the script) and the Python API's submit (issue 14)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml
from mksbatch_helpers import REPO

from squall.mksbatch import RecipeError, load_recipe, recipe_schema, render, submit
from squall.mksbatch.container import CONTAINER_FIELDS
from squall.mksbatch.recipe import CHECKPOINT_FIELDS, LIMITS, TOP_FIELDS

MAIN = "from squall.mksbatch.cli import main; main()"
GOOD = "name: t\nnodes: 1\nlog_dir: /l\nlauncher: srun\ncommand: [x]\n"
EXAMPLES = sorted((REPO / "sbatch").rglob("*.yaml"))
SHIPPED = REPO / "sbatch" / "mksbatch-recipe.schema.json"


def mksbatch(*args: str, cwd: Path, env: dict[str, str] | None = None
             ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", MAIN, *args], cwd=cwd, capture_output=True,
                          text=True, timeout=60, env=env or dict(os.environ))


def test_schema_command_prints_the_schema(tmp_path: Path) -> None:
    proc = mksbatch("schema", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    schema = json.loads(proc.stdout)
    assert schema == recipe_schema()
    jsonschema.Draft7Validator.check_schema(schema)
    assert set(schema["properties"]) == set(TOP_FIELDS)
    assert set(schema["properties"]["container"]["properties"]) == set(CONTAINER_FIELDS)
    assert set(schema["properties"]["checkpoint"]["properties"]) == set(CHECKPOINT_FIELDS)
    assert sorted(schema["required"]) == ["command", "launcher", "log_dir", "name", "nodes"]


def test_the_shipped_schema_is_current() -> None:
    assert json.loads(SHIPPED.read_text()) == recipe_schema(), (
        f"regenerate it: mksbatch schema -o {SHIPPED.relative_to(REPO)}")


def test_schema_to_a_file_and_a_recipe_named_schema(tmp_path: Path) -> None:
    proc = mksbatch("schema", "-o", "s.json", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == "", proc.stderr
    assert json.loads((tmp_path / "s.json").read_text()) == recipe_schema()
    (tmp_path / "schema").write_text(GOOD)
    proc = mksbatch("./schema", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.startswith("#!/bin/bash\n"), proc.stderr
    proc = mksbatch("schema", "--submit", cwd=tmp_path)
    assert proc.returncode == 2 and "schema takes no options but -o" in proc.stderr


@pytest.mark.parametrize("recipe", EXAMPLES, ids=lambda p: p.name)
def test_every_example_passes_the_schema(recipe: Path) -> None:
    jsonschema.validate(yaml.safe_load(recipe.read_text()), recipe_schema())


@pytest.mark.parametrize("change", [
    {"nodes": 0}, {"nodse": 2}, {"launcher": "ssh"}, {"command": []},
    {"container": {"mounts": ["/a:/a"]}}, {"sbatch": {"nodes": 3}},
    {"srun": ["cores"]}, {"exclusive": "yes"}, {"environment": {"1X": "a"}},
    {"checkpoint": {"dir": "/c", "resume": "-r {checkpoint}"}},
])
def test_the_schema_refuses_what_mksbatch_refuses(change: dict[str, object]) -> None:
    recipe = {**yaml.safe_load(GOOD), **change}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(recipe, recipe_schema())


def test_the_schema_takes_text_written_as_numbers() -> None:
    recipe = {**yaml.safe_load(GOOD), "environment": {"V": 3.1}, "command": ["x", 1.5],
              "sbatch": {"nice": 10, "hold": True}, "setup": "module load x"}
    jsonschema.validate(recipe, recipe_schema())


def test_json_prints_the_resolved_recipe_and_the_script(tmp_path: Path) -> None:
    proc = mksbatch("sbatch/fsdp-hyperpod.yaml", "--json", "--set", "nodes=8", cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert set(out) == {"recipe", "script"}
    r = out["recipe"]
    assert r["nodes"] == 8 and r["overrides"] == ["--set nodes=8"]
    assert r["tasks_per_node"] == 8 and r["forward_signal"] == "TERM"
    assert r["environment"] == {"NCCL_DEBUG": "WARN", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}
    assert r["container"]["image"] == "nvcr.io#nvidia/pytorch:24.07-py3"
    assert r["checkpoint"]["newest_by"] == "numeric"
    assert r["path"] == "sbatch/fsdp-hyperpod.yaml" and len(r["sha256"]) == 64
    assert "text" not in r
    assert out["script"] == render(load_recipe("sbatch/fsdp-hyperpod.yaml",
                                               overrides=["nodes=8"]))


def test_json_with_output_and_with_watch(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(GOOD)
    proc = mksbatch("r.yaml", "--json", "-o", "job.sbatch", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["output"] == "job.sbatch"
    assert (tmp_path / "job.sbatch").read_text() == out["script"]
    proc = mksbatch("r.yaml", "--json", "--watch", cwd=tmp_path)
    assert proc.returncode == 2 and "--json cannot be used with --watch" in proc.stderr


def _fake_sbatch(tmp_path: Path) -> dict[str, str]:
    """A TEST STUB standing in for sbatch: records its argv and stdin, prints a job id."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    stub = bindir / "sbatch"
    stub.write_text("#!/bin/sh\nprintf '%s\\n' \"$*\" > \"$STUB_DIR/sbatch.argv\"\n"
                    "cat > \"$STUB_DIR/sbatch.stdin\"\npwd > \"$STUB_DIR/sbatch.cwd\"\n"
                    "echo '4242;cluster'\n")
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    return {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "STUB_DIR": str(tmp_path)}


def test_submit_from_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = _fake_sbatch(tmp_path)
    monkeypatch.setenv("PATH", env["PATH"])
    monkeypatch.setenv("STUB_DIR", str(tmp_path))
    (tmp_path / "r.yaml").write_text(GOOD.replace("/l", str(tmp_path / "logs")))
    recipe = load_recipe(tmp_path / "r.yaml", overrides={"nodes": 3})
    job = submit(recipe, backend="cli", workdir=str(tmp_path / "logs"))
    assert job == 4242
    assert (tmp_path / "logs").is_dir()
    assert (tmp_path / "sbatch.argv").read_text() == "--parsable\n"
    assert (tmp_path / "sbatch.stdin").read_text() == render(recipe)
    assert (tmp_path / "sbatch.cwd").read_text().strip() == str(tmp_path / "logs")


def test_json_with_submit(tmp_path: Path) -> None:
    env = _fake_sbatch(tmp_path)
    (tmp_path / "r.yaml").write_text(GOOD.replace("/l", str(tmp_path / "logs")))
    proc = mksbatch("r.yaml", "--json", "--submit", "--backend", "cli", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["job_id"] == 4242


def _integers(schema: dict, prefix: str = "") -> dict[str, tuple[int, int | None]]:
    """Every integer field of the schema, by its dotted recipe name: (minimum, maximum)."""
    out = {}
    for name, sub in schema.get("properties", {}).items():
        path = f"{prefix}{name}"
        if sub.get("type") == "integer":
            out[path] = (sub["minimum"], sub.get("maximum"))
        out.update(_integers(sub, path + "."))
    return out


def test_the_schema_states_the_limits_validation_applies(tmp_path: Path) -> None:
    """One table of bounds (recipe.LIMITS): every number of the schema, with the bounds a
    recipe is refused outside of."""
    assert _integers(recipe_schema()) == LIMITS
    for fld, (low, high) in LIMITS.items():
        head, _, leaf = fld.rpartition(".")
        for value, ok in ((low, True), (low - 1, False)) + (
                ((high, True), (high + 1, False)) if high is not None else ()):
            base = GOOD.replace("nodes: 1\n", "") if fld == "nodes" else GOOD
            if head == "torchrun" or fld == "failover.min_nodes":
                base = base.replace("launcher: srun", "launcher: torchrun")
            text = base + (f"{head}:\n  {leaf}: {value}\n" if head else f"{leaf}: {value}\n")
            if fld == "failover.min_nodes":  # it applies with elastic only
                text += "  elastic: true\n"
            (tmp_path / "r.yaml").write_text(text)
            if ok:
                load_recipe(tmp_path / "r.yaml")
            else:
                with pytest.raises(RecipeError, match=f"{fld}: must be"):
                    load_recipe(tmp_path / "r.yaml")
