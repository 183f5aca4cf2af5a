"""The recipe's pass-through fields: ``sbatch:`` (extra ``#SBATCH`` long options), ``srun:``
(extra options for the launch) and ``setup:`` (the user's own shell lines).

Options mksbatch writes itself are refused with the recipe field that owns them: a second
``--nodes`` or ``--signal`` would silently undo the gang allocation or the requeue logic.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import yaml

from squall.mksbatch.reader import Reader
from squall.mksbatch.yamlpos import mapping_items

# sbatch options mksbatch writes, by long name (and the short letters of the same options).
SBATCH_OWNED = {
    "job-name": "name", "J": "name",
    "nodes": "nodes", "N": "nodes",
    "ntasks-per-node": "tasks_per_node",
    "ntasks": "nodes and tasks_per_node", "n": "nodes and tasks_per_node",
    "cpus-per-task": "cpus_per_task", "c": "cpus_per_task",
    "gpus-per-node": "gpus_per_node",
    "partition": "partition", "p": "partition",
    "account": "account", "A": "account",
    "qos": "qos", "q": "qos",
    "time": "time", "t": "time",
    "exclusive": "exclusive",
    "output": "log_dir", "o": "log_dir", "error": "log_dir", "e": "log_dir",
    "open-mode": "log_dir",
    "requeue": "requeue.max_restarts", "no-requeue": "requeue.max_restarts",
    "signal": "signal",
}
SBATCH_REFUSED = {
    "wait-all-nodes": "is always 1: mksbatch starts a job only when all its nodes are up",
    "wrap": "cannot be used: mksbatch writes the batch script",
}
# srun options the launch line already carries, with the field that sets them.
SRUN_OWNED = {
    "kill-on-bad-exit": "launcher", "K": "launcher",
    "mpi": "mpi",
    "auto-resume": "target",
    "nodes": "nodes", "N": "nodes",
    "ntasks": "nodes and tasks_per_node", "n": "nodes and tasks_per_node",
    "ntasks-per-node": "tasks_per_node",
}
_LONG_NAME = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")
# sbatch splits an #SBATCH line at spaces and reads quotes, backslashes and # itself.
_SBATCH_VALUE = re.compile(r"[!$-&(-\[\]-~]+")
_CONTAINER = re.compile(r"(no-)?container-")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def sbatch_safe(value: str) -> bool:
    """True when ``value`` can stand on an #SBATCH line as it is."""
    return _SBATCH_VALUE.fullmatch(value) is not None


def _owned(owner: str) -> str:
    return f"is set by mksbatch from {owner}: change {owner} in the recipe instead"


def read_sbatch(r: Reader) -> Callable[[yaml.Node, str], tuple[tuple[str, str | None], ...]]:
    """``sbatch:`` -> ((option, value or None for a flag), ...) in the recipe's order."""

    def read(node: yaml.Node, fld: str) -> tuple[tuple[str, str | None], ...]:
        out: list[tuple[str, str | None]] = []
        for key, (key_node, value_node) in mapping_items(r.source, r.mapping(node, fld),
                                                         fld).items():
            name = f"{fld}.{key}"
            if key in SBATCH_OWNED:
                raise r.err(key_node, name, _owned(SBATCH_OWNED[key]))
            if key in SBATCH_REFUSED:
                raise r.err(key_node, name, SBATCH_REFUSED[key])
            if _CONTAINER.match(key):
                raise r.err(key_node, name, "container flags go in the container section, "
                            "where srun gets them (on an #SBATCH line they would run the "
                            "batch shell itself in the container)")
            if not _LONG_NAME.fullmatch(key):
                raise r.err(key_node, name, "is not a long sbatch option name: write the "
                            "name without dashes, in lower case, e.g. mail-type")
            given, value = _sbatch_value(r, value_node, name)
            if given:
                out.append((key, value))
        return tuple(out)

    return read


def _sbatch_value(r: Reader, node: yaml.Node, fld: str) -> tuple[bool, str | None]:
    """(written at all, the value): true is a flag (None), false leaves it out."""
    if not isinstance(node, yaml.ScalarNode):
        raise r.err(node, fld, "must be one value, true (an option without a value) or "
                    "false (left out)")
    if r.is_null(node):
        raise r.err(node, fld, "is empty: give a value, or true for an option without one")
    if node.tag.endswith(":bool"):
        return r.boolean(node, fld), None
    value = r.string(node, fld)
    if not sbatch_safe(value):
        raise r.err(node, fld, f"{value!r} is written on an #SBATCH line, where sbatch "
                    "splits at spaces and reads quotes, backslashes and # itself: leave "
                    "those out")
    return True, value


def read_srun(r: Reader) -> Callable[[yaml.Node, str], tuple[str, ...]]:
    """``srun:`` -> the extra srun options, each one argument (``--opt=value``)."""

    def read(node: yaml.Node, fld: str) -> tuple[str, ...]:
        options = r.string_list(node, fld)
        for i, option in enumerate(options):
            item, name = node.value[i], f"{fld}[{i}]"
            if not option.startswith("-") or option == "-":
                raise r.err(item, name, f"{option!r} is not an option: give srun options "
                            "starting with -, each with its value in the same item, e.g. "
                            "--cpu-bind=cores")
            if option.startswith("--"):
                flag = option[2:].split("=", 1)[0]
            else:
                flag = option[1:2]
            shown = ("--" if option.startswith("--") else "-") + flag
            if _CONTAINER.match(flag):
                raise r.err(item, name, f"{shown} belongs in the container section: move it "
                            "there")
            if flag in SRUN_OWNED:
                raise r.err(item, name, f"{shown} {_owned(SRUN_OWNED[flag])}")
        return options

    return read


def read_setup(r: Reader) -> Callable[[yaml.Node, str], tuple[str, ...]]:
    """``setup:`` -> shell lines, as written (a list, or one block of lines)."""

    def read(node: yaml.Node, fld: str) -> tuple[str, ...]:
        lines: tuple[str, ...]
        if isinstance(node, yaml.ScalarNode):
            lines, items = (r.string(node, fld),), [node]
            names = [fld]
        else:
            lines = r.string_list(node, fld)
            items = list(node.value)
            names = [f"{fld}[{i}]" for i in range(len(lines))]
        for line, item, name in zip(lines, items, names, strict=True):
            bad = _CONTROL.search(line)
            if bad:
                raise r.err(item, name, f"contains control character U+{ord(bad.group()):04X}"
                            ": write it with printf or a $'...' escape instead")
        return lines

    return read
