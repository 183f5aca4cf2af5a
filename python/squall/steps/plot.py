"""``squall steps --plot``: the picture (matplotlib, the ``plot`` extra or Debian's
python3-matplotlib).

Top: a heat map, one row per rank (grouped by node, a line between nodes), one column per
step, coloured by the time the rank *held* the step (its length less its wait in the
all-reduce for slower ranks: the wait beyond the least any rank waited), as a multiple of
the job's usual work (the median step less its all-reduce; 1x is black). A balanced job is
black; a starving rank shows as a periodic stripe on its row, a slow all-reduce as a bright
band over every row, a straggler node as bright rows. Bottom: the sections of each rank
stacked, averaged over the chosen steps (``--range``; the last 20 by default), between the
heat map's dashed lines."""

from __future__ import annotations

import statistics
import textwrap
from collections.abc import Sequence
from typing import Any

from squall.errors import SetupError, UsageError
from squall.steps.model import KNOWN, Rank, Step
from squall.steps.verdict import Report

COLOURS = {"data": "#d62728", "forward": "#1f77b4", "backward": "#2ca02c",
           "allreduce": "#ff7f0e", "optimizer": "#9467bd", "other": "#7f7f7f"}


def _pyplot() -> Any:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SetupError("--plot needs matplotlib: apt install python3-matplotlib, or pip "
                         "install 'squall[plot]'") from None
    return plt


def held(ranks: Sequence[Rank], numbers: Sequence[int]) -> list[list[float]]:
    """Per rank (in the given order) per step: the step less its wait for slower ranks."""
    by = [{s.number: s for s in r.steps} for r in ranks]
    least = {n: min(b[n].allreduce for b in by) for n in numbers}
    return [[b[n].length - (b[n].allreduce - least[n]) for n in numbers] for b in by]


def usual_work(ranks: Sequence[Rank], numbers: Sequence[int]) -> float:
    """The median over ranks and steps of the step less its all-reduce: the work a step
    usually takes, the heat map's 1x."""
    by = [{s.number: s for s in r.steps} for r in ranks]
    return statistics.median(b[n].length - b[n].allreduce for b in by for n in numbers)


def _s(seconds: float) -> str:
    return f"{seconds:.2g}"


def stacked(steps: Sequence[Step]) -> dict[str, float]:
    """Mean seconds per section over ``steps`` (untimed time as ``other``)."""
    out = dict.fromkeys((*KNOWN, "other"), 0.0)
    for s in steps:
        timed = 0.0
        for name, secs in s.sections.items():
            key = name if name in KNOWN else "other"
            out[key] += secs
            timed += secs
        out["other"] += max(0.0, s.length - timed)
    return {k: v / max(1, len(steps)) for k, v in out.items()}


def _heat_map(fig: Any, top: Any, order: list[Rank], numbers: list[int],
              edges: tuple[int, int]) -> None:
    cells = held(order, numbers)
    work = usual_work(order, numbers) or statistics.median(c for row in cells for c in row)
    ratios = [[c / work for c in row] for row in cells] if work > 0 else cells
    image = top.imshow(ratios, aspect="auto", interpolation="nearest", cmap="inferno",
                       vmin=1.0, vmax=max(3.0, max(max(row) for row in ratios)),
                       extent=(numbers[0] - 0.5, numbers[-1] + 0.5, len(order) - 0.5, -0.5))
    fig.colorbar(image, ax=top, label=f"x the usual work ({_s(work)} s)")
    top.set_yticks(range(len(order)), [f"rank {r.rank} ({r.node})" for r in order])
    for k in range(1, len(order)):
        if order[k].node != order[k - 1].node:
            top.axhline(k - 0.5, color="white", linewidth=1.5)
    for edge in (edges[0] - 0.5, edges[1] + 0.5):  # the steps stacked below
        top.axvline(edge, color="cyan", linestyle="--", linewidth=1)
    top.set_xlabel("step")


def _sections(bottom: Any, order: list[Rank], picked: list[int]) -> None:
    by = [{s.number: s for s in r.steps} for r in order]
    means = [stacked([b[n] for n in picked]) for b in by]
    base = [0.0] * len(order)
    for name, colour in COLOURS.items():
        heights = [m[name] for m in means]
        if any(heights):
            bottom.bar(range(len(order)), heights, bottom=base, color=colour, label=name)
            base = [a + b for a, b in zip(base, heights, strict=True)]
    bottom.set_xticks(range(len(order)), [f"{r.rank}\n{r.node}" for r in order])
    bottom.set_ylabel(f"s a step, steps {picked[0]}..{picked[-1]}")
    bottom.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")


def draw(ranks: list[Rank], report: Report, out: str,
         chosen: tuple[int, int] | None = None) -> None:
    """The picture of ``ranks`` into PNG file ``out``; ``chosen``: the steps stacked."""
    plt = _pyplot()
    order = sorted(ranks, key=lambda r: (r.node, r.rank))
    shared = set.intersection(*({s.number for s in r.steps} for r in order))
    numbers = sorted(n for n in shared if n >= report.steps[0])
    first, last = chosen or (numbers[max(0, len(numbers) - 20)], numbers[-1])
    picked = [n for n in numbers if first <= n <= last]
    if not picked:
        raise UsageError(f"--range {first}:{last}: no step there every rank recorded; the "
                         f"job's are {numbers[0]}..{numbers[-1]}")
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 7.5), height_ratios=(3, 2))
    _heat_map(fig, top, order, numbers, (first, last))
    top.set_title(f"job {report.job}: {report.verdict.kind}", loc="left")
    _sections(bottom, order, picked)
    fig.text(0.01, 0.005, "\n".join(textwrap.wrap(report.verdict.text, 150)),
             fontsize="small")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    try:
        fig.savefig(out, dpi=80)
    except OSError as exc:
        raise SetupError(f"cannot write {out}: {exc.strerror}: give a writable path") from None
    finally:
        plt.close(fig)
