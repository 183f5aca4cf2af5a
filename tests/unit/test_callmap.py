"""spank/callmap.py, the plugin's call map that `make lint` holds to no cycle between files
(docs/architecture.md, "A step's walk")."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SPEC = importlib.util.spec_from_file_location(
    "callmap", Path(__file__).resolve().parents[2] / "spank" / "callmap.py")
assert SPEC is not None and SPEC.loader is not None
callmap = importlib.util.module_from_spec(SPEC)
sys.modules["callmap"] = callmap  # its dataclasses look their module up there
SPEC.loader.exec_module(callmap)


def test_a_cycle_through_any_chain_is_found_once():
    calls = {"step.c": {"join.c", "kept.c"}, "join.c": {"named.c"}, "named.c": {"step.c"},
             "kept.c": {"container.c"}}
    assert callmap.cycles(calls) == [["join.c", "named.c", "step.c"]]


def test_layers_that_only_call_down_have_no_cycle():
    calls = {"step.c": {"kept.c", "container.c"}, "kept.c": {"container.c"},
             "container.c": {"keeper.c"}}
    assert callmap.cycles(calls) == []


def test_cflow_output_becomes_trees_of_plugin_files():
    text = ("sq_step_user_init() <void sq_step_user_init () at plugin/step.c:7>:\n"
            "    sq_kept_serve() <int sq_kept_serve () at plugin/kept.c:9>:\n"
            "        sq_errf() <int sq_errf () at core/strbuf.c:3>:\n"
            "        sq_container_use_layer() <int sq_container_use_layer () at "
            "plugin/container.c:5>\n"
            "    strlen()\n")
    (root,) = callmap.tree(text)
    assert (root.name, root.file) == ("sq_step_user_init", "step.c")
    kept, strlen = root.children
    assert [c.file for c in kept.children] == [None, "container.c"]
    assert strlen.file is None


def test_a_call_back_into_a_file_already_left_is_a_re_entry():
    (root,) = callmap.tree(
        "f() <void f () at plugin/step.c:1>:\n"
        "    g() <void g () at plugin/kept.c:1>:\n"
        "        h() <void h () at plugin/container.c:1>\n"
        "    i() <void i () at plugin/container.c:2>\n"
        "    j() <void j () at plugin/report.c:2>\n")
    moves = callmap.walk(root, set())
    assert [(a, b) for a, b, call in moves if call] == [
        ("step.c", "kept.c"), ("kept.c", "container.c"), ("step.c", "container.c")]
    assert callmap.summary("step.c", moves) == "3 files, 3 file-to-file calls, 1 re-entries"
    assert callmap.summary("step.c", callmap.walk(root, {"i"})).endswith(", 0 re-entries")


def test_a_leaf_that_calls_above_the_leaves_is_named():
    calls = {"keeper_client.c": {"runcmd.c", "container.c"}, "runcmd.c": set()}
    assert callmap.leaves_above(calls) == {"keeper_client.c": ["container.c"]}
    assert callmap.leaves_above({"keeper_client.c": {"runcmd.c"}}) == {}


def test_entries_count_the_calls_into_each_file():
    moves = [("kept.c", "container.c", True), ("container.c", "kept.c", False),
             ("kept.c", "layer.c", True), ("layer.c", "container.c", True),
             ("container.c", "layer.c", False), ("layer.c", "kept.c", False)]
    assert callmap.entries(moves) == "container.c 2, layer.c 1"
