"""The newest complete checkpoint of a directory, as the generated sbatch script finds it.

Shared by ``mksbatch`` (which writes the same rule in bash into the script) and the
failover supervisor (which picks the checkpoint of each relaunch): a package of neither.

Orders (``newest_by``):

- ``numeric`` (default): numbers inside names compare as numbers, the rest as bytes;
  names whose numbers are equal (``ckpt-10``, ``ckpt-010``) go by name.
- ``name``: byte order of the names (zero-padded step numbers).
- ``mtime``: the most recently modified; equal times go to the first by name.
"""

from __future__ import annotations

import glob
import os
import re

_RUN = re.compile(rb"[0-9]+")


def numeric_key(name: bytes) -> bytes:
    """``name`` with every run of digits as its length (3 digits) and the digits without
    leading zeros: comparing keys as bytes compares the numbers as numbers.

    A digit run's key starts with a digit, so against a non-digit it compares as the
    digit it replaces. The bash template builds the very same key.
    """

    def number(match: re.Match[bytes]) -> bytes:
        digits = match.group().lstrip(b"0")
        return b"%03d%s" % (len(digits), digits)

    return _RUN.sub(number, name)


def candidates(directory: str, pattern: str, marker: str) -> list[str]:
    """The entries of ``directory`` matching ``pattern`` that hold ``marker``, sorted by
    name as bash sorts a glob under ``LC_ALL=C`` (byte order, hidden names skipped)."""
    found = [p for p in glob.glob(os.path.join(glob.escape(directory), pattern))
             if os.path.exists(os.path.join(p, marker))]
    return sorted(found, key=os.fsencode)


def newest_complete(directory: str, pattern: str, marker: str,
                    newest_by: str = "numeric") -> str | None:
    """The path the script would resume from, or None when no checkpoint is complete."""
    found = candidates(directory, pattern, marker)
    if not found:
        return None
    if newest_by == "name":
        return found[-1]
    if newest_by == "mtime":
        best = found[0]
        for path in found[1:]:
            if os.stat(path).st_mtime_ns > os.stat(best).st_mtime_ns:
                best = path
        return best
    return max(found, key=lambda p: (numeric_key(os.fsencode(os.path.basename(p))),
                                     os.fsencode(p)))
