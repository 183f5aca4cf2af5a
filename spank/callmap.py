#!/usr/bin/env python3
"""The plugin's call map from GNU cflow: which plugin file calls which, and the walk of a
step through the files (docs/architecture.md, "A step's walk").

    python3 spank/callmap.py cycles   exit 1 when plugin files call each other in a cycle
    python3 spank/callmap.py walk     the files a step's callbacks pass through: how many,
                                      which calls which, and how often a call enters a
                                      file the walk had already left
    python3 spank/callmap.py walk [FILE:]FUNCTION
                                      the same from one function (every branch), with how
                                      many times the walk enters each file

Only functions defined in spank/plugin/ count: the core (spank/core/) is a library every
file may call; report.c (the step's failure, log lines, timings), runcmd.c (fork and
exec a command) and keeper_client.c (squall-keeper's protocol, called by container.c with
plain values) are leaves, which call no other plugin file but leaves (`cycles` checks it).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
LEAVES = {"report.c", "runcmd.c", "keeper_client.c"}
ROOTS = ("sq_step_user_init", "sq_step_task_init")
# What the default step -- `srun --container-image=/fsx/x.sqsh prog`, served by the job's
# kept container, no other flag -- never calls: a named container, a step of its own, a
# registry image, --container-save, the importer, a joined step. cflow sees every branch;
# the walk leaves these out to follow that one step.
OFF_DEFAULT = {
    "sq_step_attach_step", "sq_step_join_named", "named_target", "own_target",
    "start_own_container", "sq_save_check", "sq_importer_setup", "sq_importer_release",
    "fetch_image", "build_from_registry", "sq_enroot_uri", "sq_named_is_step",
    "sq_named_runtime_name", "share_layer",
}
LINE = re.compile(r"^(?P<indent> *)(?P<name>\w+)\(\)(?: <.* at (?P<file>[^:>]+):\d+>)?")


@dataclass
class Node:
    name: str
    file: str | None
    children: list[Node] = field(default_factory=list)


def cflow(*args: str) -> str:
    sources = sorted(str(p.relative_to(HERE)) for p in (HERE / "plugin").glob("*.c"))
    sources += sorted(str(p.relative_to(HERE)) for p in (HERE / "core").glob("*.c"))
    try:
        return subprocess.run(["cflow", "--omit-arguments", "-i", "_", "-I", "core", "-I",
                               "plugin", *args, *sources], cwd=HERE, check=True,
                              capture_output=True, text=True).stdout
    except FileNotFoundError:
        sys.exit("callmap: cflow is not installed: apt-get install cflow")


def tree(text: str) -> list[Node]:
    """cflow's indented output as trees (4 spaces a level)."""
    roots: list[Node] = []
    stack: list[tuple[int, Node]] = []
    for line in text.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        file = m["file"]
        node = Node(m["name"], Path(file).name if file and file.startswith("plugin/")
                    else None)
        depth = len(m["indent"]) // 4
        while stack and stack[-1][0] >= depth:
            stack.pop()
        (stack[-1][1].children if stack else roots).append(node)
        stack.append((depth, node))
    return roots


def edges() -> dict[str, set[str]]:
    """Plugin file -> the other plugin files it calls. Exits when OFF_DEFAULT names a
    function the plugin no longer has: a renamed one would silently join the walk."""
    calls: dict[str, set[str]] = defaultdict(set)
    roots = tree(cflow("--no-main", "-A", "-A", "--depth", "2"))
    gone = OFF_DEFAULT - {r.name for r in roots if r.file}
    if gone:
        sys.exit(f"callmap: OFF_DEFAULT names {', '.join(sorted(gone))}, which the plugin "
                 "no longer defines: rename or remove them in spank/callmap.py")
    for root in roots:
        for child in root.children:
            if root.file and child.file and child.file != root.file:
                calls[root.file].add(child.file)
    return calls


def cycles(calls: dict[str, set[str]]) -> list[list[str]]:
    """Each file-level cycle once, as the files around it."""
    found: set[tuple[str, ...]] = set()

    def visit(path: list[str]) -> None:
        for nxt in sorted(calls.get(path[-1], ())):
            if nxt == path[0]:
                i = path.index(min(path))
                found.add(tuple(path[i:] + path[:i]))
            elif nxt not in path and nxt > path[0]:
                visit(path + [nxt])

    for start in sorted(calls):
        visit([start])
    return [list(c) for c in sorted(found)]


def leaves_above(calls: dict[str, set[str]]) -> dict[str, list[str]]:
    """Each leaf that calls a plugin file other than a leaf, with those files."""
    above = {leaf: sorted(calls.get(leaf, set()) - LEAVES) for leaf in sorted(LEAVES)}
    return {leaf: callees for leaf, callees in above.items() if callees}


def walk(root: Node, off: set[str]) -> list[tuple[str, str, bool]]:
    """The step's way through the files: (from, to, is_call) for each call into another
    file and each return from one, in order, leaving out the calls named in off."""
    moves: list[tuple[str, str, bool]] = []

    def go(node: Node, here: str) -> None:
        for child in node.children:
            if child.name in off or child.file is None or child.file in LEAVES:
                continue
            if child.file == here:
                go(child, here)
                continue
            moves.append((here, child.file, True))
            go(child, child.file)
            moves.append((child.file, here, False))

    assert root.file is not None
    go(root, root.file)
    return moves


def summary(root: str, moves: list[tuple[str, str, bool]]) -> str:
    """Files, distinct file-to-file calls, and re-entries: calls into a file the walk had
    already entered and left (a return to the caller is not one)."""
    seen = {root}
    stack = [root]
    again = 0
    for _, dst, call in moves:
        if call:
            again += dst in seen and dst not in stack
            seen.add(dst)
            stack.append(dst)
        else:
            stack.pop()
    edges = {(src, dst) for src, dst, call in moves if call}
    return (f"{len(seen)} files, {len(edges)} file-to-file calls, "
            f"{again} re-entries")


def entries(moves: list[tuple[str, str, bool]]) -> str:
    """How many times the walk enters each file, most first."""
    count: dict[str, int] = defaultdict(int)
    for _, dst, call in moves:
        if call:
            count[dst] += 1
    return ", ".join(f"{f} {n}" for f, n in sorted(count.items(), key=lambda i: (-i[1], i[0])))


def walk_from(spec: str) -> int:
    """The walk from one function, FILE:FUNCTION or FUNCTION, every branch."""
    name = spec.rsplit(":", 1)[-1]
    roots = tree(cflow("--main", name))
    if not roots or roots[0].file is None:
        sys.exit(f"callmap: {spec!r}: no such function in spank/plugin/")
    moves = walk(roots[0], set())
    print(f"{name}, every branch: {summary(roots[0].file, moves)}")
    print("  entries: " + (entries(moves) or "none"))
    return 0


def main(argv: list[str]) -> int:
    what = argv[1] if len(argv) > 1 else "walk"
    if what == "walk" and len(argv) > 2:
        return walk_from(argv[2])
    if what == "cycles":
        calls = edges()
        found = cycles(calls)
        for c in found:
            print("callmap: plugin files call each other: " + " -> ".join(c + c[:1]))
        above = leaves_above(calls)
        for leaf, callees in above.items():
            print(f"callmap: {leaf} is a leaf (LEAVES) but calls {', '.join(callees)}")
        return 1 if found or above else 0
    if what != "walk":
        sys.exit(f"callmap: {what!r}: use cycles or walk")
    for name in ROOTS:
        roots = tree(cflow("--main", name))
        first = roots[0].file or "?"
        for title, off in (("every branch", set()), ("the default step", OFF_DEFAULT)):
            moves = walk(roots[0], off)
            print(f"{name}, {title}: {summary(first, moves)}")
            if off:
                pairs = sorted({f"{src} > {dst}" for src, dst, call in moves if call})
                print("  calls: " + ", ".join(pairs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
