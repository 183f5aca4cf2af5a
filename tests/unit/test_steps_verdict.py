"""The verdict of ``squall steps`` on synthetic jobs (docs/why-is-my-job-slow.md),
simulated by steps_sim.py."""

from __future__ import annotations

import pytest
from steps_sim import simulate

from squall.errors import SquallError
from squall.steps.verdict import judge


def test_a_balanced_job_is_balanced() -> None:
    report = judge(simulate(), job="7")
    assert report.verdict.kind == "balanced"
    assert report.verdict.text.startswith("balanced")
    assert report.verdict.rank is None and report.verdict.node is None


def test_one_rank_starving_every_8th_step_is_data_on_that_rank() -> None:
    report = judge(simulate(slow_data=(3, 8, 1.9)), job="7")
    v = report.verdict
    assert (v.kind, v.rank, v.node, v.section) == ("data", 3, "node2", "data")
    assert "rank 3 (node2)" in v.text
    assert "every 8th step" in v.text and "1.9 s" in v.text


def test_a_rank_slow_on_every_step_is_data_without_a_period() -> None:
    v = judge(simulate(slow_data=(4, 1, 0.3)), job="7").verdict
    assert (v.kind, v.rank, v.node) == ("data", 4, "node3")
    assert "waits 0.31 s a step for its batch" in v.text and "every" not in v.text


def test_every_rank_waiting_in_the_allreduce_is_allreduce() -> None:
    v = judge(simulate(comm=0.8), job="7").verdict
    assert v.kind == "allreduce" and v.section == "allreduce"
    assert v.rank is None and v.node is None
    assert "0.8 s a step" in v.text and "squall nccl-check" in v.text


def test_a_slow_node_is_a_straggler_with_the_drain_line() -> None:
    v = judge(simulate(slow_node=(2, 1.6)), job="7").verdict
    assert (v.kind, v.node, v.section) == ("straggler", "node2", "compute")
    assert "1.6x slower in compute" in v.text
    assert v.drain == ('scontrol update nodename=node2 state=drain '
                       'reason="squall steps: job 7: 1.6x slower compute"')


def test_the_other_ranks_waiting_for_the_straggler_are_not_an_allreduce_verdict() -> None:
    v = judge(simulate(slow_node=(1, 3.0), comm=0.001), job="7").verdict
    assert v.kind == "straggler" and v.node == "node1"


def test_scores_relative_and_individual() -> None:
    report = judge(simulate(slow_node=(3, 2.0)), job="7")
    by_rank = {f.rank: f for f in report.ranks}
    assert by_rank[0].relative == pytest.approx(1.0, abs=0.06)
    assert by_rank[5].relative == pytest.approx(0.5, abs=0.05)
    assert all(0 < f.individual <= 1.0 for f in report.ranks)


def test_json_has_the_verdict_and_per_rank_figures() -> None:
    data = judge(simulate(slow_data=(1, 4, 0.5)), job="7").to_json()
    assert data["verdict"]["kind"] == "data" and data["verdict"]["rank"] == 1
    assert data["verdict"]["node"] == "node1" and data["verdict"]["text"]
    assert {r["rank"] for r in data["ranks"]} == set(range(6))
    assert {"node", "steps", "step_s", "data_s", "allreduce_s", "compute_s", "relative",
            "individual"} <= set(data["ranks"][0])


def test_without_sections_the_step_length_alone_is_balanced_or_told() -> None:
    report = judge(simulate(sections=False), job="7")
    assert report.verdict.kind == "balanced"
    assert "no sections" in report.verdict.text


def test_too_few_steps_is_a_one_line_error() -> None:
    with pytest.raises(SquallError, match=r"only 2 steps .* run longer"):
        judge(simulate(steps=3), job="7")


def test_no_ranks_is_a_one_line_error() -> None:
    with pytest.raises(SquallError, match="no rank"):
        judge([], job="7")


def test_the_slowest_rank_is_the_one_the_others_wait_for() -> None:
    report = judge(simulate(slow_data=(5, 1, 0.2)), job="7")
    assert report.slowest.rank == 5 and report.slowest.node == "node3"


def test_the_slowest_rank_counts_a_wait_every_nth_step():
    """A rank late every 5th step is the one the others wait for, though its median
    step is like theirs (the mini cluster named rank 0 before this)."""
    report = judge(simulate(slow_data=(2, 5, 0.6)), job="7")
    assert report.slowest.rank == 2 and report.slowest.node == "node2"
