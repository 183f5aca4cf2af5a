"""Synthetic jobs for the ``squall steps`` tests: a coupled data-parallel step simulated.

Each rank loads its batch (``data``) and computes, then waits in the all-reduce until the
last rank arrives, plus the reduction itself; every rank's step has the same length."""

from __future__ import annotations

from pathlib import Path

from squall.steps.model import Rank, Step
from squall_steps import format_line


def simulate(nodes: int = 3, per_node: int = 2, steps: int = 40, data: float = 0.01,
             compute: float = 0.1, comm: float = 0.005,
             slow_data: tuple[int, int, float] | None = None,
             slow_node: tuple[int, float] | None = None, sections: bool = True) -> list[Rank]:
    ranks = [Rank(rank=r, node=f"node{r // per_node + 1}", steps=[])
             for r in range(nodes * per_node)]
    clock = 1000.0
    for k in range(steps):
        arrive = {}
        loads = {}
        for rk in ranks:
            d = data
            if slow_data and rk.rank == slow_data[0] and k % slow_data[1] == 0:
                d += slow_data[2]
            c = compute * (slow_node[1] if slow_node and rk.node == f"node{slow_node[0]}"
                           else 1.0)
            c *= 1.0 + 0.01 * ((rk.rank * 7 + k * 3) % 5)  # a little noise
            loads[rk.rank] = (d, c)
            arrive[rk.rank] = d + c
        finish = max(arrive.values()) + comm
        clock += finish
        for rk in ranks:
            d, c = loads[rk.rank]
            secs = {"data": d, "forward": c * 0.4, "backward": c * 0.6,
                    "allreduce": finish - arrive[rk.rank]} if sections else {}
            rk.steps.append(Step(number=k, end=clock, length=finish, sections=secs))
    return ranks


def write_files(directory: Path, ranks: list[Rank]) -> None:
    """The ranks' files as squall_steps writes them."""
    for r in ranks:
        text = f"squall-steps 1 rank={r.rank} node={r.node} pid=1 start=1000.0\n"
        text += "".join(format_line(s.number, s.end, s.length, dict(s.sections))
                        for s in r.steps)
        (directory / f"steps.{r.rank}").write_text(text)
