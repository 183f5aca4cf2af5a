"""Overrides: ``--set KEY=VALUE`` on the command line, ``{"KEY": value}`` from Python.

An override is merged into the recipe's composed YAML before validation, so it is checked
exactly like the file: ``--set nodes=010`` fails as ``nodes: 010`` does. ``KEY`` is dotted
(``environment.LR``, ``container.image``, ``sbatch.mail-type``); ``VALUE`` is YAML text
(``4``, ``3.10``, ``[--cpu-bind=cores, -l]``). Python values are written as YAML for the
same path. Messages name the override instead of a line of the file.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import yaml

from squall.errors import SquallError
from squall.mksbatch.yamlpos import Source, compose_node, key_text

_KEY = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*")
_CORE = "tag:yaml.org,2002:"
# Characters json.dumps leaves raw that YAML would refuse or read as a line break.
_YAML_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029\ud800-\udfff\ufffe\uffff]")
KEY_HELP = "give KEY=VALUE with a dotted KEY, e.g. --set nodes=4 or --set environment.LR=3e-4"


class OverrideError(SquallError):
    """A malformed override: no '=', or a key that is not a dotted name."""


@dataclass(frozen=True)
class Override:
    """One override: the dotted key, its value as YAML text, and where it came from."""

    key: str
    text: str
    origin: str  # how messages name it: "--set nodes=4" or "override nodes"

    @property
    def written(self) -> str:
        """The override as its user wrote it: ``--set nodes=4`` or ``nodes=4``."""
        return self.origin if self.origin.startswith("--set ") else f"{self.key}={self.text}"


def _label(text: str) -> str:
    """An origin fit for a one-line message: control characters become '?'."""
    text = "".join(ch if ch.isprintable() else "?" for ch in text)
    return text if len(text) <= 80 else text[:77] + "..."


def parse_set(arg: str) -> Override:
    """``KEY=VALUE`` as given to ``--set``."""
    key, eq, text = arg.partition("=")
    if not eq or not _KEY.fullmatch(key):
        raise OverrideError(f"--set {_label(arg)!r}: {KEY_HELP}")
    return Override(key, text, _label(f"--set {arg}"))


def from_python(key: str, value: object) -> Override:
    """A Python value for ``key``, written as the YAML that reads back as that value."""
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise OverrideError(f"override {key!r}: {KEY_HELP}")
    return Override(key, yaml_text(value, f"override {key}"), f"override {key}")


def yaml_text(value: object, label: str) -> str:
    """YAML (JSON, which YAML reads) that reads back as ``value``: strings stay strings,
    whatever they look like; characters YAML refuses raw are escaped."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=_plain)
    except (TypeError, ValueError) as exc:
        raise OverrideError(f"{label}: {exc}") from None
    return _YAML_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _plain(value: object) -> object:
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"a value of type {type(value).__name__} cannot be used: give a str, "
                    "int, float, bool, list or dict")


def normalize(overrides: Mapping[str, object] | Iterable[str | Override] | None
              ) -> tuple[Override, ...]:
    """Overrides in any accepted form: a mapping of Python values, ``KEY=VALUE`` strings."""
    if overrides is None:
        return ()
    if isinstance(overrides, Mapping):
        return tuple(from_python(k, v) for k, v in overrides.items())
    return tuple(o if isinstance(o, Override) else parse_set(o) for o in overrides)


def apply(source: Source, root: yaml.MappingNode, overrides: Sequence[Override]
          ) -> yaml.MappingNode:
    """``root`` with every override merged in, in order; the last one for a key wins.
    Mappings on the way are copied, so a YAML alias elsewhere keeps its own value."""
    root = _copy(root)
    for o in overrides:
        source.lineless.add(o.origin)
        _, value = compose_node(o.origin, o.text, lineless=True)
        mark = yaml.Mark(o.origin, 0, 0, 0, "", 0)
        if value is None:
            value = yaml.ScalarNode(_CORE + "null", "", mark, mark)
        parts = o.key.split(".")
        node = root
        for depth, part in enumerate(parts[:-1]):
            where = ".".join(parts[:depth + 1])
            index = _find(source, node, part)
            if index is None:
                child = yaml.MappingNode(_CORE + "map", [], mark, mark)
                node.value.append((yaml.ScalarNode(_CORE + "str", part, mark, mark), child))
            else:
                key_node, child = node.value[index]
                if not isinstance(child, yaml.MappingNode):
                    raise source.error(value, where, f"is not a mapping in the recipe, so "
                                       f"{o.key} cannot be set: set {where} as a whole")
                child = _copy(child)
                node.value[index] = (key_node, child)
            node = child
        index = _find(source, node, parts[-1])
        if index is None:
            node.value.append((yaml.ScalarNode(_CORE + "str", parts[-1], mark, mark), value))
        else:
            node.value[index] = (node.value[index][0], value)
    return root


def _copy(node: yaml.MappingNode) -> yaml.MappingNode:
    return yaml.MappingNode(node.tag, list(node.value), node.start_mark, node.end_mark,
                            node.flow_style)


def _find(source: Source, node: yaml.MappingNode, key: str) -> int | None:
    for i, (key_node, _) in enumerate(node.value):
        if isinstance(key_node, yaml.ScalarNode) and key_text(source, key_node, "") == key:
            return i
    return None
