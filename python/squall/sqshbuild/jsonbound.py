"""JSON from outside (registries, archives, the cache's records), parsed with its nesting
bounded.

``json.loads`` recurses once per ``[`` or ``{``: a 100,000-deep document ends in
``RecursionError`` (an ``internal error``). :func:`check` counts the depth first, outside
strings, without recursing; :func:`loads` then parses. Real manifests, indexes and
configs are a few levels deep.
"""

from __future__ import annotations

import json
import re
from typing import Any

from squall.errors import SquallError

MAX_DEPTH = 64
# A JSON string (escapes included): brackets inside one are text, not nesting.
_STRING = re.compile(rb'"(?:[^"\\]+|\\.)*"', re.DOTALL)
_BRACKETS = re.compile(rb"[\[\]{}]")


def depth(raw: bytes) -> int:
    """The deepest nesting of ``raw`` (0 for a scalar); unbalanced text counts as deep as
    it opens, and json.loads refuses it afterwards."""
    most = here = 0
    for m in _BRACKETS.finditer(_STRING.sub(b"", raw)):
        if m.group() in (b"[", b"{"):
            here += 1
            most = max(most, here)
        else:
            here -= 1
    return most


def check(raw: bytes | str, what: str, max_depth: int = MAX_DEPTH) -> None:
    """Raise :class:`SquallError` naming ``what`` when ``raw`` nests deeper than
    ``max_depth``."""
    data = raw.encode(errors="surrogateescape") if isinstance(raw, str) else raw
    if depth(data) > max_depth:
        raise SquallError(f"{what} nests JSON deeper than {max_depth} levels: it is not "
                          "an image document; the image is broken or hostile")


def loads(raw: bytes | str, what: str, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` of ``raw`` once :func:`check` passed; not JSON is one
    :class:`SquallError` naming ``what``."""
    check(raw, what, max_depth)
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        raise SquallError(f"{what} is not valid JSON: the image is broken") from None
