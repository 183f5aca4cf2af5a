"""Field readers: one composed YAML node in, one validated Python value out.

Values are read as written, not as YAML 1.1 would read them: a plain ``3.10``, ``010``,
``1:30``, ``0x1F`` or ``1_000`` in a text field is that text; a numeric field takes a plain
decimal number and refuses every other spelling, naming what YAML would have made of it.
Booleans stay the one YAML reading a text field refuses (``yes``, ``off``): quote them.
"""

from __future__ import annotations

import difflib
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import yaml

from squall.mksbatch.yamlpos import RecipeError, Source, mapping_items

T = TypeVar("T")
Read = Callable[[yaml.Node, str], T]

_CORE = "tag:yaml.org,2002:"
# Plain scalars YAML 1.1 would turn into numbers or dates: text fields keep them as written.
_AS_WRITTEN = frozenset(_CORE + t for t in ("int", "float", "timestamp"))
_NULL, _BOOL = _CORE + "null", _CORE + "bool"
_DECIMAL = re.compile(r"[-+]?[0-9]+")
MAX_DIGITS = 18


class Reader:
    """Reads scalars and lists out of one recipe's nodes; errors name file:line: field."""

    def __init__(self, source: Source):
        self.source = source

    def err(self, node: yaml.Node | None, fld: str, msg: str) -> RecipeError:
        return self.source.error(node, fld, msg)

    def scalar_node(self, node: yaml.Node, fld: str, what: str) -> yaml.ScalarNode:
        if not isinstance(node, yaml.ScalarNode):
            raise self.err(node, fld, f"must be {what}, not a list or mapping")
        return node

    def is_null(self, node: yaml.Node) -> bool:
        return isinstance(node, yaml.ScalarNode) and node.tag == _NULL

    def string(self, node: yaml.Node, fld: str) -> str:
        scalar = self.scalar_node(node, fld, "a string")
        if scalar.style is None and scalar.tag in _AS_WRITTEN:
            value: Any = scalar.value  # 3.10 stays "3.10", 010 stays "010"
        else:
            value = self.source.scalar(scalar, fld)
        if value is None:
            raise self.err(node, fld, "is empty: give a value or remove the field")
        if isinstance(value, bool):
            raise self.err(node, fld, f"{scalar.value!r} is read as a YAML boolean: quote "
                           f"it, e.g. \"{scalar.value}\"")
        if not isinstance(value, (str, int, float)):
            raise self.err(node, fld, f"must be a string, got {value!r}: quote it")
        text = str(value)
        if text == "":
            raise self.err(node, fld, "is empty: give a value or remove the field")
        if "\0" in text:
            raise self.err(node, fld, "contains a NUL character: remove it")
        return text

    def integer(self, node: yaml.Node, fld: str, low: int, high: int | None = None) -> int:
        scalar = self.scalar_node(node, fld, "a whole number")
        self.source.check_tag(scalar, fld)  # !!binary and the like
        value = _whole_number(scalar, lambda msg: self.err(node, fld, msg))
        if value < low or (high is not None and value > high):
            bound = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise self.err(node, fld, f"must be {bound}, got {value}")
        return value

    def boolean(self, node: yaml.Node, fld: str) -> bool:
        scalar = self.scalar_node(node, fld, "true or false")
        value = self.source.scalar(scalar, fld)
        if not isinstance(value, bool):
            raise self.err(node, fld, f"must be true or false, got {scalar.value!r}")
        return value

    def choice(self, node: yaml.Node, fld: str, choices: tuple[str, ...]) -> str:
        value = self.string(node, fld)
        if value not in choices:
            raise self.err(node, fld, f"must be one of {', '.join(choices)}, got {value!r}")
        return value

    def matching(self, node: yaml.Node, fld: str, pattern: re.Pattern[str], why: str) -> str:
        value = self.string(node, fld)
        if not pattern.fullmatch(value):
            raise self.err(node, fld, f"{value!r} {why}")
        return value

    def string_list(self, node: yaml.Node, fld: str, split: bool = False,
                    argv: bool = False) -> tuple[str, ...]:
        """A list of strings (``split``: or one string split as a shell splits words).
        ``argv``: a program and its arguments, where an empty argument (``""``, ``''``) is
        one, passed as it is; the program itself must be named."""
        if isinstance(node, yaml.ScalarNode) and split:
            text = self.string(node, fld)
            try:
                words = shlex.split(text)
            except ValueError as exc:
                raise self.err(node, fld, f"cannot split into words ({exc}): "
                               "write it as a YAML list instead") from None
            if not words:
                raise self.err(node, fld, "is empty: give at least one word")
            if argv and words[0] == "":
                raise self.err(node, fld, "starts with an empty word: name the program first")
            return tuple(words)
        if not isinstance(node, yaml.SequenceNode):
            raise self.err(node, fld, "must be a list, e.g. [a, b]")
        items = tuple(self._item(item, f"{fld}[{i}]", i if argv else -1)
                      for i, item in enumerate(node.value))
        if not items:
            raise self.err(node, fld, "is an empty list: give at least one item or remove it")
        return items

    def _item(self, node: yaml.Node, fld: str, word: int) -> str:
        """Item ``word`` of a program's argv (-1: of any list). An argument may be empty
        (``""``, not a bare null); the program may not."""
        if word >= 0 and isinstance(node, yaml.ScalarNode) and node.value == "":
            if word == 0:
                raise self.err(node, fld, "is empty: name the program first")
            if node.style is not None:
                return ""
        return self.string(node, fld)

    def mapping(self, node: yaml.Node, fld: str) -> yaml.MappingNode:
        if not isinstance(node, yaml.MappingNode):
            raise self.err(node, fld, "must be a mapping of fields (key: value)")
        return node


def _whole_number(node: yaml.ScalarNode, fail: Callable[[str], RecipeError]) -> int:
    """A plain decimal whole number as written; any other spelling is an error."""
    text = str(node.value)
    if node.tag == _NULL:
        raise fail("is empty: give a whole number or remove the field")
    if node.style is not None or node.tag == _BOOL:
        if node.style is not None and _DECIMAL.fullmatch(text.strip()):
            raise fail(f"{text!r} is quoted, so YAML reads it as text: write the number "
                       "without quotes")
        raise fail(f"must be a whole number, got {text!r}")
    digits = sum(ch.isdigit() for ch in text)
    if digits > MAX_DIGITS:
        raise fail(f"has {digits} digits: give a whole number of at most {MAX_DIGITS} digits")
    unsigned = text.lstrip("+-")
    if _DECIMAL.fullmatch(text):
        if len(unsigned) > 1 and unsigned.startswith("0"):
            octal = (f", which YAML 1.1 reads as octal ({int(unsigned, 8)})"
                     if re.fullmatch("[0-7]+", unsigned) else "")
            raise fail(f"{text!r} has a leading zero{octal}: write the number in decimal "
                       "without it")
        return int(text)
    for prefix, base, name in (("0x", 16, "hexadecimal"), ("0o", 8, "octal"),
                               ("0b", 2, "binary")):
        if unsigned.lower().startswith(prefix):
            try:
                number = int(unsigned[2:].replace("_", ""), base)
            except ValueError:
                break
            raise fail(f"{text!r} is {name}: write it in decimal ({number})")
    if node.tag == _CORE + "int" and ":" in text:
        number = 0
        for part in unsigned.replace("_", "").split(":"):
            number = number * 60 + int(part)
        raise fail(f"{text!r} is read by YAML 1.1 as base 60 ({number}): write the number "
                   "in decimal")
    if "_" in text and _DECIMAL.fullmatch(text.replace("_", "")):
        raise fail(f"{text!r} has '_' separators, which YAML 1.1 drops and YAML 1.2 keeps "
                   f"as text: write {text.replace('_', '')}")
    raise fail(f"must be a whole number, got {text!r}")


@dataclass
class Section:
    """The fields of one mapping: read each once; unknown keys are reported at once."""

    reader: Reader
    node: yaml.MappingNode
    prefix: str
    known: tuple[str, ...]
    anchor: yaml.Node | None = None  # the section's key, where "missing" errors point
    items: dict[str, tuple[yaml.Node, yaml.Node]] = field(init=False)

    def __post_init__(self) -> None:
        self.items = mapping_items(self.reader.source, self.node, self.prefix)
        for key, (key_node, _) in self.items.items():
            if key not in self.known:
                raise self.reader.err(key_node, self.name(key),
                                      f"unknown field{closest(key, self.known)}; known "
                                      f"fields here: {', '.join(self.known)}")

    def name(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def has(self, key: str) -> bool:
        return key in self.items

    def get(self, key: str, read: Read[T], default: T) -> T:
        if key not in self.items:
            return default
        return read(self.items[key][1], self.name(key))

    def optional(self, key: str, read: Read[T]) -> T | None:
        if key not in self.items:
            return None
        return read(self.items[key][1], self.name(key))

    def require(self, key: str, read: Read[T], example: str) -> T:
        if key not in self.items:
            where = self.prefix or "recipe"
            raise self.reader.err(self.anchor or self.node, self.name(key),
                                  f"missing: add it to {where}, e.g. {example}")
        return read(self.items[key][1], self.name(key))

    def node_of(self, key: str) -> yaml.Node:
        return self.items[key][1] if key in self.items else self.node

    def key_of(self, key: str) -> yaml.Node:
        return self.items[key][0] if key in self.items else self.node

    def section(self, key: str, known: tuple[str, ...]) -> Section:
        """The mapping under ``key`` as a section of its own."""
        name = self.name(key)
        return Section(self.reader, self.reader.mapping(self.node_of(key), name), name,
                       known, self.key_of(key))


def closest(key: str, known: tuple[str, ...]) -> str:
    match = difflib.get_close_matches(key, known, n=1)
    return f" (did you mean {match[0]!r}?)" if match else ""
