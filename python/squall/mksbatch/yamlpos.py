"""Read a YAML document as composed nodes, so every value keeps the line it came from.

Recipe validation reports ``file:line: field: problem and fix``; PyYAML's composer gives
each node a start mark, and this module wraps the few node operations validation needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from squall.errors import SquallError


class RecipeError(SquallError):
    """A recipe problem, already formatted as ``file:line: field: what and how to fix``."""


@dataclass(frozen=True)
class Source:
    """Where a recipe came from: the path shown in messages and the composing loader."""

    path: str
    loader: yaml.SafeLoader

    def error(self, node: yaml.Node | None, field: str, message: str) -> RecipeError:
        line = node.start_mark.line + 1 if node is not None else 1
        return RecipeError(f"{self.path}:{line}: {field}: {message}")

    def scalar(self, node: yaml.ScalarNode, field: str) -> Any:
        """The Python value of a scalar node under YAML's safe (1.1 core) rules."""
        try:
            return self.loader.construct_object(node, deep=True)
        except yaml.YAMLError:
            raise self.error(node, field, f"unsupported YAML tag {node.tag}: "
                             "write a plain value without a '!!' tag") from None


def compose(path: str, text: str) -> tuple[Source, yaml.MappingNode]:
    """Compose ``text`` into its top-level mapping node; syntax errors name file and line."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        problem = exc.problem or exc.context or "invalid YAML"
        raise RecipeError(
            f"{path}:{line}: YAML syntax: {problem}: fix the YAML at this line"
        ) from None
    except yaml.YAMLError as exc:
        raise RecipeError(f"{path}:1: YAML syntax: {exc}: fix the YAML") from None
    source = Source(path, loader)
    if node is None:
        raise RecipeError(f"{path}:1: recipe: the file is empty: write the recipe fields "
                          "(see docs/mksbatch.md)")
    if not isinstance(node, yaml.MappingNode):
        raise source.error(node, "recipe", "the top level must be a mapping of fields "
                           "(name: ..., nodes: ...), not a list or a single value")
    return source, node


def mapping_items(
    source: Source, node: yaml.MappingNode, field: str
) -> dict[str, tuple[yaml.Node, yaml.Node]]:
    """The keys of a mapping node with their key and value nodes; duplicates are errors."""
    items: dict[str, tuple[yaml.Node, yaml.Node]] = {}
    for key_node, value_node in node.value:
        if not isinstance(key_node, yaml.ScalarNode):
            raise source.error(key_node, field, "keys must be plain names")
        key = str(source.scalar(key_node, field or "recipe"))
        where = f"{field}.{key}" if field else key
        if key in items:
            first = items[key][0].start_mark.line + 1
            raise source.error(key_node, where,
                               f"given twice (first at line {first}): keep one")
        items[key] = (key_node, value_node)
    return items
