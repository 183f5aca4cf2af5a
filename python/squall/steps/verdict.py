"""The verdict: from the ranks' recent steps to one sentence, pure (no I/O).

Over the steps every rank recorded (the last ``WINDOW``; each rank's first step, which holds
its start-up, is left out), three losses per step are weighed:

* **allreduce**: the least time any rank waited in the all-reduce, step by step (the rank
  that arrived last waits only for the reduction itself), its median;
* **data**: the rank whose mean data wait most exceeds the ranks' median one;
* **straggler**: the node whose ranks' median compute (the step less data and all-reduce)
  most exceeds the other nodes' (1.2x at least).

The largest loss above 10 % of the step (and 5 ms) is the verdict; none: ``balanced``.
Scores as NVIDIA's straggler detection defines them, on compute: ``relative`` is the best
rank's median over this rank's (1.0: the best), ``individual`` this rank's own best (10th
percentile) over its median of its last 10 steps (1.0: as fast as it ever was).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from squall.errors import SquallError
from squall.steps.model import ALLREDUCE, DATA, Rank, Step

WINDOW = 500
MIN_STEPS = 3
SHARE = 0.10
FLOOR = 0.005
STRAGGLER_RATIO = 1.2


@dataclass(frozen=True)
class Verdict:
    kind: str  # data, allreduce, straggler, balanced
    text: str
    rank: int | None = None
    node: str | None = None
    section: str | None = None
    drain: str | None = None
    loss_s: float = 0.0


@dataclass(frozen=True)
class Figures:
    rank: int
    node: str
    steps: int
    step_s: float
    data_s: float  # mean: a wait every Nth step counts
    allreduce_s: float
    compute_s: float
    relative: float
    individual: float
    dropped: int = 0


@dataclass(frozen=True)
class Report:
    job: str
    steps: tuple[int, int]  # first and last step judged
    verdict: Verdict
    ranks: list[Figures]
    slowest: Figures
    sections: bool
    mean_step_s: float = 0.0  # over every rank and step judged: a wait every Nth step counts

    def to_json(self) -> dict[str, object]:
        return {"job": self.job, "steps": list(self.steps), "verdict": asdict(self.verdict),
                "slowest": {"rank": self.slowest.rank, "node": self.slowest.node},
                "mean_step_s": self.mean_step_s,
                "ranks": [asdict(f) for f in self.ranks]}


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else 0.0


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def common_steps(ranks: Sequence[Rank], job: str) -> tuple[list[int], dict[int, dict[int, Step]]]:
    """The step numbers every rank recorded (the last WINDOW, the first step left out),
    and each rank's steps by number."""
    if not ranks:
        raise SquallError(f"job {job}: no rank recorded a step: time the program with "
                          "squall_steps (docs/why-is-my-job-slow.md)")
    by_rank = {r.rank: {s.number: s for s in r.steps} for r in ranks}
    shared = set.intersection(*(set(steps) for steps in by_rank.values()))
    shared.discard(min((s.number for r in ranks for s in r.steps), default=0))
    numbers = sorted(shared)[-WINDOW:]
    if len(numbers) < MIN_STEPS:
        raise SquallError(f"job {job}: only {len(numbers)} steps recorded on every rank: "
                          f"run longer ({MIN_STEPS} needed after the first)")
    return numbers, by_rank


def _figures(ranks: Sequence[Rank], numbers: list[int],
             by_rank: dict[int, dict[int, Step]]) -> list[Figures]:
    compute = {r.rank: _median([by_rank[r.rank][n].compute for n in numbers]) for r in ranks}
    best = min(compute.values())
    out = []
    for r in ranks:
        steps = [by_rank[r.rank][n] for n in numbers]
        own = [s.compute for s in steps]
        recent = _median(own[-10:])
        out.append(Figures(
            rank=r.rank, node=r.node, steps=len(r.steps),
            step_s=_median([s.length for s in steps]), data_s=_mean([s.data for s in steps]),
            allreduce_s=_median([s.allreduce for s in steps]), compute_s=compute[r.rank],
            relative=round(best / compute[r.rank], 3) if compute[r.rank] > 0 else 1.0,
            individual=round(min(1.0, _percentile(own, 0.1) / recent), 3) if recent > 0
            else 1.0, dropped=r.dropped))
    return sorted(out, key=lambda f: f.rank)


def _s(seconds: float) -> str:
    """Seconds for a sentence: two significant digits below 1 s, one decimal above."""
    return f"{seconds:.1f}" if seconds >= 1 else f"{seconds:.2g}"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _period(numbers: list[int], waits: list[float], threshold: float) -> int | None:
    """The step period of the waits above ``threshold``, when they recur regularly."""
    spikes = [n for n, w in zip(numbers, waits, strict=True) if w > threshold]
    gaps = [b - a for a, b in zip(spikes, spikes[1:], strict=False)]
    if len(gaps) < 2 or len(spikes) > len(numbers) // 2:
        return None
    common = statistics.mode(gaps)
    return common if common > 1 and gaps.count(common) >= 0.8 * len(gaps) else None


def _data(figs: list[Figures], numbers: list[int], by_rank: dict[int, dict[int, Step]]
          ) -> Verdict:
    usual = _median([f.data_s for f in figs])
    worst = max(figs, key=lambda f: f.data_s)
    loss = worst.data_s - usual
    waits = [by_rank[worst.rank][n].data for n in numbers]
    base = _median(waits)
    high = max(waits)
    period = _period(numbers, waits, base + 0.5 * (high - base))
    where = f"rank {worst.rank} ({worst.node})"
    if period is not None:
        spike = _median([w for w in waits if w > base + 0.5 * (high - base)])
        how = f"every {_ordinal(period)} step waits {_s(spike)} s for its batch"
    else:
        how = (f"waits {_s(worst.data_s)} s a step for its batch (the ranks' median "
               f"{_s(usual)} s)")
    return Verdict("data", f"data loading on {where}: {how}", worst.rank, worst.node, DATA,
                   loss_s=loss)


def _allreduce(numbers: list[int], by_rank: dict[int, dict[int, Step]]) -> Verdict:
    least = [min(steps[n].allreduce for steps in by_rank.values()) for n in numbers]
    loss = _median(least)
    text = (f"all-reduce: all ranks wait at the same step boundary, {_s(loss)} s a step; "
            "look at the network (NCCL on TCP? `squall nccl-check`)")
    return Verdict("allreduce", text, section=ALLREDUCE, loss_s=loss)


def _straggler(figs: list[Figures], job: str) -> Verdict | None:
    nodes = sorted({f.node for f in figs})
    key: Callable[[Figures], str] = (lambda f: f.node) if len(nodes) > 1 else (
        lambda f: str(f.rank))
    groups = sorted({key(f) for f in figs})
    if len(groups) < 2:
        return None
    med = {g: _median([f.compute_s for f in figs if key(f) == g]) for g in groups}
    slow = max(groups, key=lambda g: med[g])
    others = _median([f.compute_s for f in figs if key(f) != slow])
    if others <= 0 or med[slow] / others < STRAGGLER_RATIO:
        return None
    ratio = med[slow] / others
    node = slow if len(nodes) > 1 else nodes[0]
    rank = None if len(nodes) > 1 else int(slow)
    who = f"{node}'s ranks are" if rank is None else f"rank {rank} on {node} is"
    drain = (f'scontrol update nodename={node} state=drain '
             f'reason="squall steps: job {job}: {ratio:.1f}x slower compute"')
    text = (f"straggler node: {who} {ratio:.1f}x slower in compute every step; an admin "
            f"may drain it: {drain}")
    return Verdict("straggler", text, rank, node, "compute", drain, med[slow] - others)


def _balanced(figs: list[Figures], sections: bool) -> Verdict:
    step = _median([f.step_s for f in figs])
    if not sections:
        return Verdict("balanced", f"balanced as far as step lengths tell ({_s(step)} s a "
                       "step): no sections timed, time data and allreduce with squall_steps "
                       "to tell them apart")
    return Verdict("balanced", f"balanced: no rank, node or section stands out ({_s(step)} s "
                   "a step)")


def judge(ranks: Sequence[Rank], job: str) -> Report:
    """The job's verdict and per-rank figures, from its ranks' recent steps."""
    numbers, by_rank = common_steps(ranks, job)
    figs = _figures(ranks, numbers, by_rank)
    sections = any(s.sections for r in ranks for s in r.steps)
    step = _median([f.step_s for f in figs])
    candidates = [_data(figs, numbers, by_rank), _allreduce(numbers, by_rank),
                  _straggler(figs, job)]
    found = [v for v in candidates if v is not None and v.loss_s > max(SHARE * step, FLOOR)]
    verdict = max(found, key=lambda v: v.loss_s) if found and sections else _balanced(
        figs, sections)
    held = {r: _mean([s.length - s.allreduce for s in (by_rank[r][n] for n in numbers)])
            for r in by_rank}  # the mean: a wait every Nth step counts
    slowest = max(figs, key=lambda f: held[f.rank])
    mean_step = _mean([by_rank[r][n].length for r in by_rank for n in numbers])
    return Report(job, (numbers[0], numbers[-1]), verdict, figs, slowest, sections,
                  round(mean_step, 6))
