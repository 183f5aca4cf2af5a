"""The script template: sections of bash read from ``templates/sbatch.sh.tmpl``.

A section starts with a line ``#@ NAME`` and runs up to the next one. ``@@{name}`` in a
line is replaced by a value (``string.Template`` with ``@@`` as its delimiter, so bash's own
``$`` needs no escaping); a line that holds only ``@@{name}`` is replaced by a block of
lines. The template is package data, so an installed wheel finds it next to this module.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources

from squall.errors import SquallError

TEMPLATE = "templates/sbatch.sh.tmpl"
_MARKER = "#@ "
_BLOCK = re.compile(r"@@\{([A-Za-z_][A-Za-z0-9_]*)\}")


class _AtTemplate(string.Template):
    delimiter = "@@"


@dataclass(frozen=True)
class Template:
    """The template's sections, by name."""

    sections: Mapping[str, tuple[str, ...]]

    def fill(self, name: str, values: Mapping[str, str] | None = None,
             blocks: Mapping[str, Sequence[str]] | None = None) -> list[str]:
        """The lines of section ``name`` with its values and blocks put in."""
        values = values or {}
        blocks = blocks or {}
        out: list[str] = []
        for line in self.sections[name]:
            match = _BLOCK.fullmatch(line)
            if match and match.group(1) in blocks:
                out.extend(blocks[match.group(1)])
            else:
                out.append(_AtTemplate(line).substitute(values))
        return out


def parse_template(text: str) -> Template:
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith(_MARKER):
            current = sections.setdefault(line[len(_MARKER):].strip(), [])
        elif current is not None:
            current.append(line)
    return Template({name: tuple(lines) for name, lines in sections.items()})


@cache
def load_template() -> Template:
    """The packaged template (read once per process)."""
    try:
        text = resources.files("squall.mksbatch").joinpath(TEMPLATE).read_text("utf-8")
    except OSError as exc:
        raise SquallError(f"the mksbatch script template {TEMPLATE} is missing from the "
                          f"installed squall package ({exc.strerror}): reinstall squall"
                          ) from None
    return parse_template(text)
