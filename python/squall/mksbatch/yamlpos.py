"""Read a YAML document as composed nodes, so every value keeps the line it came from.

Recipe validation reports ``file:line: field: problem and fix``; PyYAML's composer gives
each node a start mark, and this module wraps the few node operations validation needs.
Input is bounded before PyYAML sees it: a size limit (``/dev/zero`` is one read away),
no control characters (PyYAML's own check raises a multi-line error), and a nesting limit
(PyYAML's composer recurses once per level).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from squall.errors import SquallError

MAX_BYTES = 1 << 20
MAX_DEPTH = 32
# The characters YAML 1.1 forbids in a stream (PyYAML's Reader.NON_PRINTABLE).
_NON_PRINTABLE = re.compile(
    "[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
# Tags a plain or quoted scalar may carry; anything else is an explicit '!!' tag.
_CORE = "tag:yaml.org,2002:"
PLAIN_TAGS = frozenset(_CORE + t for t in ("str", "int", "float", "bool", "null",
                                           "timestamp"))
MERGE_TAG = _CORE + "merge"


class RecipeError(SquallError):
    """A recipe problem, already formatted as ``file:line: field: what and how to fix``."""


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader with a nesting limit and its marks named after ``origin``."""

    def __init__(self, text: str, origin: str, lineless: bool) -> None:
        super().__init__(text)
        self.name = origin  # the Reader puts this name in every mark
        self.lineless = lineless
        self.depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise RecipeError(f"{_where(self.name, mark.line, self.lineless)}: recipe: "
                                  f"nested more than {MAX_DEPTH} levels deep (a recipe "
                                  "needs 4): check the brackets and the indentation")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


@dataclass
class Source:
    """Where a recipe came from: the path shown in messages and the composing loader.

    Nodes from other origins (``--set`` values, Python overrides) carry their own origin
    in their marks; ``lineless`` holds the origins whose line numbers mean nothing.
    """

    path: str
    loader: yaml.SafeLoader
    lineless: set[str] = field(default_factory=set)

    def error(self, node: yaml.Node | None, field: str, message: str) -> RecipeError:
        # a key or value with a newline or escape in it must not split (or repaint) the line
        field, message = shown_field(field), _escape(message)
        if node is None:
            return RecipeError(f"{self.path}:1: {field}: {message}")
        mark = node.start_mark
        origin = mark.name or self.path
        if origin in self.lineless:
            return RecipeError(f"{origin}: {field}: {message}")
        return RecipeError(f"{origin}:{mark.line + 1}: {field}: {message}")

    def check_tag(self, node: yaml.Node, field: str) -> None:
        """Refuse explicit tags (``!!python/object``, ``!!binary``): values are plain."""
        if node.tag not in PLAIN_TAGS:
            raise self.error(node, field, f"unsupported YAML tag {node.tag}: write a plain "
                             "value without a '!!' tag")

    def scalar(self, node: yaml.ScalarNode, field: str) -> Any:
        """The Python value of a scalar node under YAML's safe (1.1 core) rules."""
        self.check_tag(node, field)
        try:
            return self.loader.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, OverflowError):
            raise self.error(node, field, f"{_short(node.value)!r} cannot be read as a YAML "
                             "value: quote it") from None


def _escape(text: str) -> str:
    """``text`` with each character that is not printable written as its escape."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def shown_field(field: str) -> str:
    """A field name as messages show it: as written, or quoted with escapes (repr-like)
    when a key in it holds a newline or another character that is not printable."""
    return field if field.isprintable() else repr(field)


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _where(origin: str, line: int, lineless: bool) -> str:
    """``origin:LINE`` (LINE counted from 1), or the origin alone."""
    return origin if lineless else f"{origin}:{line + 1}"


def check_text(origin: str, text: str, lineless: bool = False) -> None:
    """Refuse what PyYAML would refuse with a traceback: control characters."""
    bad = _NON_PRINTABLE.search(text)
    if bad is None:
        return
    line = text.count("\n", 0, bad.start())
    column = bad.start() - (text.rfind("\n", 0, bad.start()) + 1) + 1
    code = ord(bad.group())
    raise RecipeError(f"{_where(origin, line, lineless)}: recipe: control character "
                      f"U+{code:04X} at column "
                      f"{column}: remove it (inside a double-quoted string write it as an "
                      f"escape, e.g. \"\\u{code:04x}\")")


def compose_node(origin: str, text: str, lineless: bool = False
                 ) -> tuple[yaml.SafeLoader, yaml.Node | None]:
    """Compose ``text`` into its single node; syntax errors name ``origin`` and the line."""
    check_text(origin, text, lineless)
    loader = _BoundedLoader(text, origin, lineless)
    try:
        return loader, loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line if mark is not None else 0
        problem = exc.problem or exc.context or "invalid YAML"
        if exc.problem and exc.context and exc.context.startswith("expected"):
            problem = f"{exc.context}, {exc.problem}"  # "expected a single document, but..."
        fix = "fix the YAML" if lineless else "fix the YAML at this line"
        raise RecipeError(f"{_where(origin, line, lineless)}: YAML syntax: {problem}: {fix}"
                          ) from None
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else "invalid YAML"
        raise RecipeError(f"{_where(origin, 0, lineless)}: YAML syntax: {first}: fix the YAML"
                          ) from None


def compose(path: str, text: str, lineless: bool = False) -> tuple[Source, yaml.MappingNode]:
    """Compose ``text`` into its top-level mapping node; syntax errors name file and line
    (``lineless``: text made from Python data, whose lines mean nothing to the user)."""
    loader, node = compose_node(path, text, lineless)
    source = Source(path, loader, {path} if lineless else set())
    if node is None:
        raise RecipeError(f"{path}:1: recipe: the file is empty: write the recipe fields "
                          "(see docs/mksbatch.md)")
    if not isinstance(node, yaml.MappingNode):
        raise source.error(node, "recipe", "the top level must be a mapping of fields "
                           "(name: ..., nodes: ...), not a list or a single value")
    return source, node


def key_text(source: Source, node: yaml.Node, field: str) -> str:
    """A mapping key as written: keys are names, so ``010:`` is "010", never 8."""
    if not isinstance(node, yaml.ScalarNode):
        raise source.error(node, field or "recipe", "keys must be plain names")
    if node.tag == MERGE_TAG:
        raise source.error(node, "<<", "YAML merge keys are not supported: write the fields "
                           "out")
    source.check_tag(node, field or "recipe")
    return str(node.value)


def mapping_items(
    source: Source, node: yaml.MappingNode, field: str
) -> dict[str, tuple[yaml.Node, yaml.Node]]:
    """The keys of a mapping node with their key and value nodes; duplicates are errors."""
    items: dict[str, tuple[yaml.Node, yaml.Node]] = {}
    for key_node, value_node in node.value:
        key = key_text(source, key_node, field)
        where = f"{field}.{key}" if field else key
        if key in items:
            first = items[key][0].start_mark.line + 1
            raise source.error(key_node, where,
                               f"given twice (first at line {first}): keep one")
        items[key] = (key_node, value_node)
    return items
