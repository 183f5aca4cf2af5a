"""The records ``squall steps`` judges: one rank's recent steps."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# The sections the verdicts know by name (any other name counts as compute).
DATA, ALLREDUCE = "data", "allreduce"
KNOWN = ("data", "forward", "backward", "allreduce", "optimizer")


@dataclass(frozen=True)
class Step:
    number: int
    end: float  # Unix seconds
    length: float  # seconds since the previous step's end
    sections: Mapping[str, float] = field(default_factory=dict)

    @property
    def data(self) -> float:
        return self.sections.get(DATA, 0.0)

    @property
    def allreduce(self) -> float:
        return self.sections.get(ALLREDUCE, 0.0)

    @property
    def compute(self) -> float:
        """The step less its data wait and all-reduce: forward, backward, optimizer and
        whatever was not timed."""
        return max(0.0, self.length - self.data - self.allreduce)


@dataclass
class Rank:
    rank: int
    node: str
    steps: list[Step]
    dropped: int = 0
