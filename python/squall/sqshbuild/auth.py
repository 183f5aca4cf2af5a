"""The token dance: parsing ``WWW-Authenticate`` challenges.

Where credentials come from is :mod:`squall.sqshbuild.credentials` (re-exported here).
Bearer challenges (``WWW-Authenticate: Bearer realm=...,service=...,scope=...``) are
answered by fetching a token from the realm, with Basic credentials when there are some;
Basic challenges are answered with the credentials directly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from squall.sqshbuild.credentials import Credentials, find_credentials

__all__ = ["Challenge", "Credentials", "find_credentials", "parse_challenge"]


@dataclass(frozen=True)
class Challenge:
    scheme: str  # "bearer" or "basic"
    params: dict[str, str]


_PARAM = re.compile(r'([A-Za-z_][A-Za-z0-9_-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]+))')


def parse_challenge(header: str) -> Challenge | None:
    """Parse a ``WWW-Authenticate`` value; None if there is no usable scheme."""
    header = header.strip()
    if not header:
        return None
    scheme, _, rest = header.partition(" ")
    params = {m.group(1).lower(): (m.group(2) if m.group(2) is not None else m.group(3))
              for m in _PARAM.finditer(rest)}
    return Challenge(scheme.lower(), params)
