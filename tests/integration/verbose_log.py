"""What `--container-log=verbose` says about each step: how it got its container."""

from __future__ import annotations

import re


def served(text: str) -> list[str]:
    """How each step got its container: the parenthesis after "timings on NODE"."""
    ways = []
    for m in re.finditer(r"timings on \S+ \(", text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        ways.append(text[m.end():i - 1])
    return ways
