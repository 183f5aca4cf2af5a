"""Which complete checkpoint a job resumes from, as the generated script decides it.

The script does this in bash (``newest_complete_checkpoint`` in the template); the rule in
Python lives in ``squall.newest_checkpoint`` (shared with the failover supervisor), for
code that wants to know before submitting, and for the tests that hold the two to the
same answer.
"""

from __future__ import annotations

from squall import newest_checkpoint as _newest
from squall.mksbatch.recipe import Checkpoint, Recipe
from squall.newest_checkpoint import numeric_key

__all__ = ["candidates", "newest_checkpoint", "newest_complete", "numeric_key"]


def candidates(checkpoint: Checkpoint) -> list[str]:
    """The complete checkpoints of ``checkpoint``, sorted by name as bash sorts a glob."""
    return _newest.candidates(checkpoint.dir, checkpoint.pattern, checkpoint.complete_marker)


def newest_complete(checkpoint: Checkpoint) -> str | None:
    """The path the script would resume from, or None when no checkpoint is complete."""
    return _newest.newest_complete(checkpoint.dir, checkpoint.pattern,
                                   checkpoint.complete_marker, checkpoint.newest_by)


def newest_checkpoint(recipe: Recipe) -> str | None:
    """Where a job of ``recipe`` started now would resume from (None: from the start)."""
    return None if recipe.checkpoint is None else newest_complete(recipe.checkpoint)
