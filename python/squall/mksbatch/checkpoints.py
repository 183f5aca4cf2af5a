"""Which complete checkpoint a job resumes from, as the generated script decides it.

The script does this in bash (``newest_complete_checkpoint`` in the template); this module
does the same in Python, for code that wants to know before submitting, and for the tests
that hold the two to the same answer.

Orders (``checkpoint.newest_by``):

- ``numeric`` (default): numbers inside names compare as numbers, the rest as bytes;
  names whose numbers are equal (``ckpt-10``, ``ckpt-010``) go by name.
- ``name``: byte order of the names (zero-padded step numbers).
- ``mtime``: the most recently modified; equal times go to the first by name.
"""

from __future__ import annotations

import glob
import os
import re

from squall.mksbatch.recipe import Checkpoint, Recipe

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


def candidates(checkpoint: Checkpoint) -> list[str]:
    """The entries of ``checkpoint.dir`` matching the pattern that hold the marker, sorted
    by name as bash sorts a glob under ``LC_ALL=C`` (byte order, hidden names skipped)."""
    pattern = os.path.join(glob.escape(checkpoint.dir), checkpoint.pattern)
    found = [p for p in glob.glob(pattern)
             if os.path.exists(os.path.join(p, checkpoint.complete_marker))]
    return sorted(found, key=os.fsencode)


def newest_complete(checkpoint: Checkpoint) -> str | None:
    """The path the script would resume from, or None when no checkpoint is complete."""
    found = candidates(checkpoint)
    if not found:
        return None
    if checkpoint.newest_by == "name":
        return found[-1]
    if checkpoint.newest_by == "mtime":
        best = found[0]
        for path in found[1:]:
            if os.stat(path).st_mtime_ns > os.stat(best).st_mtime_ns:
                best = path
        return best
    return max(found, key=lambda p: (numeric_key(os.fsencode(os.path.basename(p))),
                                     os.fsencode(p)))


def newest_checkpoint(recipe: Recipe) -> str | None:
    """Where a job of ``recipe`` started now would resume from (None: from the start)."""
    return None if recipe.checkpoint is None else newest_complete(recipe.checkpoint)
