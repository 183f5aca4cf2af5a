"""Two leftovers of the last hostile round (issue 26): an empty argument in ``command`` and a
recipe key with a newline (or another control character) in it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from mksbatch_helpers import calls, run_script, script_for

from squall.mksbatch import RecipeError, parse_recipe

HEAD = "name: t\nnodes: 1\nlog_dir: /l\nlauncher: srun\n"


def _argv(tmp: Path) -> list[str]:
    [argv] = [c["argv"] for c in calls(tmp) if c["cmd"] == "srun"]
    return argv


@pytest.mark.parametrize("command", ['[prog, "", x]', "[prog, '']", "\"prog '' x\""],
                         ids=["list", "list-single-quotes", "split"])
def test_an_empty_argument_is_passed_as_it_is(tmp_path: Path, command: str) -> None:
    """docs/mksbatch.md: command words are taken exactly as written; the shell-split form
    already kept '' as an argument, the list form refused "" ("is empty ... remove the
    field")."""
    script = script_for(tmp_path, HEAD + f"command: {command}\n")
    proc = run_script(tmp_path, script)
    assert proc.returncode == 0, proc.stderr
    want = ["prog", "", "x"] if "x" in command else ["prog", ""]
    assert _argv(tmp_path) == ["--kill-on-bad-exit=1", *want]


@pytest.mark.parametrize("command, says", [
    ('["", x]', "command[0]: is empty: name the program first"),
    ("\"'' x\"", "command: starts with an empty word: name the program first"),
    ("[prog, ~]", "command[1]: is empty"),
])
def test_the_program_itself_must_be_named(command: str, says: str) -> None:
    with pytest.raises(RecipeError, match=re.escape(f"<recipe>:5: {says}")):
        parse_recipe(HEAD + f"command: {command}\n")


@pytest.mark.parametrize("recipe, field", [
    (HEAD + 'command: [prog]\n"bad\\nkey": 1\n', "'bad\\nkey'"),
    (HEAD + 'command: [prog]\nenvironment:\n  "A\\nB": x\n', "'environment.A\\nB'"),
    (HEAD + 'command: [prog]\nsbatch:\n  "mail\\rtype": x\n', "'sbatch.mail\\rtype'"),
    (HEAD + 'command: [prog]\n"esc\\e[2J": 1\n', "'esc\\x1b[2J'"),
])
def test_a_control_character_in_a_key_never_splits_the_error_line(recipe: str,
                                                                    field: str) -> None:
    with pytest.raises(RecipeError) as err:
        parse_recipe(recipe)
    text = str(err.value)
    assert "\n" not in text and "\r" not in text and "\x1b" not in text, repr(text)
    assert f": {field}: " in text, text


def test_a_control_character_in_a_value_is_escaped_too() -> None:
    with pytest.raises(RecipeError) as err:
        parse_recipe(HEAD + f"command: [prog]\ntarget: {json.dumps('a' + chr(10) + 'b')}\n")
    assert "\n" not in str(err.value), repr(str(err.value))
