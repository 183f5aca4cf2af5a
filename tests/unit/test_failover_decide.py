"""The supervisor's decisions (squall/failover/decide.py), without a cluster: what a look
at the job means during an attempt, and what to do once the attempt ended."""

from __future__ import annotations

from squall.failover.decide import ANY, Course, Look, Settings, Verdict, after, judge
from squall.failover.plan import Plan

S = Settings(detect_seconds=10, hang_seconds=0, confirm_seconds=2, max_restarts=3)
PLAN = Plan(("n2", "n3"), ("n1",))


def fresh(**silent: float) -> dict[str, float]:
    return {"n1": 0.3, "n2": 0.3, "n3": 0.3, **silent}


def test_quiet_is_running() -> None:
    assert judge(PLAN, Look(fresh()), S).how == "running"


def test_a_reported_node_silent_two_beats_is_lost_at_once() -> None:
    v = judge(PLAN, Look(fresh(n3=2.2), reports=frozenset({"n3"})), S)
    assert (v.how, v.nodes) == ("lost", ("n3",)) and v.why.startswith("reported")


def test_a_report_naming_no_node_suspects_every_node_of_the_step() -> None:
    v = judge(PLAN, Look(fresh(n2=2.5), reports=frozenset({ANY})), S)
    assert v.nodes == ("n2",)


def test_a_slow_rank_is_not_a_dead_node() -> None:
    """A report about a node that goes on beating: never acted on, however long."""
    look = Look(fresh(), reports=frozenset({"n3"}), idle=30.0)
    v = judge(PLAN, look, S)
    assert v.how == "running" and v.confirm == ("n3",)


def test_the_supervisor_s_own_stall_is_no_node_s_death() -> None:
    """Every heartbeat old at once (the supervisor or the filesystem stalled): no node is
    confirmed lost from a report, only after detect_seconds."""
    look = Look({"n1": 3.0, "n2": 3.0, "n3": 3.0}, reports=frozenset({"n3"}))
    assert judge(PLAN, look, S).how == "running"


def test_every_heartbeat_silent_at_once_is_a_stall_not_every_node_lost() -> None:
    """Issue 27, 257 nodes on two CPUs: every heartbeat was 11.5 s old at once, and the
    supervisor declared every node lost (and the spare). A shared file system that stalls
    (a Lustre MDS recovering takes minutes) does the same. No node beat for half of
    detect_seconds: nothing is judged from silence until one beats again, except a node
    Slurm counts as down."""
    all_silent = {"n1": 11.5, "n2": 11.5, "n3": 11.5}
    v = judge(PLAN, Look(all_silent), S)
    assert v.how == "running" and v.spares_lost == () and v.stalled == 11.5, v
    v = judge(PLAN, Look(all_silent, down=frozenset({"n3"})), S)
    assert (v.how, v.nodes) == ("lost", ("n3",)), v
    assert judge(PLAN, Look({"n1": 4.0, "n2": 4.0, "n3": 10.5}), S).nodes == ("n3",)
    assert judge(PLAN, Look(fresh(n3=10.5)), S).stalled == 0.0


def test_slurm_s_down_confirms_a_report() -> None:
    v = judge(PLAN, Look(fresh(), reports=frozenset({"n2"}), down=frozenset({"n2"})), S)
    assert v.nodes == ("n2",)


def test_silence_without_a_report_waits_for_detect_seconds() -> None:
    assert judge(PLAN, Look(fresh(n3=9.0)), S).how == "running"
    v = judge(PLAN, Look(fresh(n3=10.5)), S)
    assert v.nodes == ("n3",) and v.why == "no heartbeat for 10.5 s" and v.silent == 10.5


def test_a_failed_step_suspects_every_node_then_is_the_program_s_failure() -> None:
    v = judge(PLAN, Look(fresh(n2=2.1), exited=3, exited_for=0.5), S)
    assert v.nodes == ("n2",)
    assert judge(PLAN, Look(fresh(), exited=3, exited_for=1.0), S).how == "running"
    v = judge(PLAN, Look(fresh(), exited=3, exited_for=S.settle_seconds + 0.1), S)
    assert (v.how, v.rc) == ("exit", 3)
    assert judge(PLAN, Look(fresh(), exited=0), S) == Verdict("exit", rc=0)


def test_an_exit_0_after_a_report_waits_for_the_heartbeats() -> None:
    """Open MPI 5's prterun exits 0 when it lost a daemon: not the end of the job."""
    look = Look(fresh(n3=0.8), exited=0, exited_for=0.3, reports=frozenset({ANY}))
    assert judge(PLAN, look, S).how == "running"
    v = judge(PLAN, Look(fresh(n3=2.1), exited=0, exited_for=1.6, reports=frozenset({ANY})), S)
    assert v.nodes == ("n3",)
    assert judge(PLAN, Look(fresh(), exited=0, exited_for=S.settle_seconds + 0.1,
                            reports=frozenset({ANY})), S).how == "exit"


def test_a_hang_names_the_nodes_whose_tasks_are_stopped() -> None:
    s = Settings(detect_seconds=10, hang_seconds=12)
    v = judge(PLAN, Look(fresh(), idle=12.5, stopped={"n3": 2}), s)
    assert (v.how, v.nodes) == ("hung", ("n3",)) and "tasks stopped on n3" in v.why
    assert judge(PLAN, Look(fresh(), idle=12.5, exited=1), s).how == "running"


def test_a_silent_spare_is_dropped() -> None:
    v = judge(PLAN, Look(fresh(n1=11.0)), S)
    assert v.how == "running" and v.spares_lost == ("n1",)


def test_after_a_loss_the_spare_takes_its_place() -> None:
    d = after(Course(PLAN), Verdict("lost", ("n3",)), "/ck/ckpt-20", S)
    assert d.what == "relaunch" and d.course.plan.active == ("n2", "n1")
    assert d.course.attempt == 1 and d.course.previous == "/ck/ckpt-20"


def test_no_spare_left_or_too_many_restarts_requeues() -> None:
    d = after(Course(Plan(("n2", "n3"), ())), Verdict("lost", ("n3",)), None, S)
    assert (d.what, d.why) == ("requeue", "no spare left")
    d = after(Course(PLAN, attempt=3), Verdict("lost", ("n3",)), "/ck/a", S)
    assert (d.what, d.why) == ("requeue", "failover.max_restarts=3 reached")


def test_elastic_shrinks_down_to_min_nodes() -> None:
    s = Settings(elastic=True, min_nodes=1)
    d = after(Course(Plan(("n2", "n3"), ())), Verdict("lost", ("n3",)), None, s)
    assert d.what == "shrink" and d.course.plan.active == ("n2",)
    s2 = Settings(elastic=True, min_nodes=2)
    assert after(Course(Plan(("n2", "n3"), ())), Verdict("lost", ("n3",)), None,
                 s2).what == "requeue"


def test_two_relaunches_from_the_same_checkpoint_are_a_storm() -> None:
    s = Settings(max_restarts=10)
    course = Course(Plan(("n2",), ("n1",)))
    hung = Verdict("hung")
    seen = []
    for _ in range(4):
        d = after(course, hung, None, s)
        seen.append(d.what)
        course = d.course
        if d.what == "stop":
            break
    assert seen == ["relaunch", "relaunch", "stop"]
    assert "never moved the checkpoint forward" in d.why


def test_an_exit_is_done_with_its_status() -> None:
    assert after(Course(PLAN), Verdict("exit", rc=4), None, S).rc == 4


def test_the_supervisor_imports_nothing_of_mksbatch() -> None:
    import subprocess
    import sys

    code = ("import sys, squall.failover.supervise; "
            "bad = [m for m in sys.modules if m.startswith('squall.mksbatch')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
