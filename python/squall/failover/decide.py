"""The supervisor's decisions, as pure functions of what it saw: no Slurm, no files, no
clock. ``supervise.py`` looks (heartbeats, progress, the peer-lost file, the step's exit),
asks :func:`judge` what the look means during an attempt and :func:`after` what to do
when the attempt ended, and does it.

A node is **lost** when:

- a rank or the launcher said something is wrong (a line in ``$SQUALL_PEER_LOST_FILE``,
  a task that exited, the step that failed) *and* the node's heartbeat has been silent
  ``confirm_seconds`` (two beats of the agent, which writes every second) while another
  node's is fresh, or Slurm says it is DOWN / NOT_RESPONDING; a report about a node that
  goes on beating is not acted on (a slow rank is not a dead node);
- or its heartbeat has been silent ``detect_seconds`` with no report at all, while some
  node beat within half of that: when no heartbeat changed for so long, the supervisor,
  its node or the shared file system stalled (a Lustre MDS recovering), not every node
  died at once, and only a node Slurm counts as down is lost until one beats again.

The job is **hung** when no rank reported progress for ``hang_seconds``; the nodes whose
tasks are stopped then count as lost. After an attempt: **relaunch** on the spares, or
**shrink** (elastic), or **requeue** (no spare left, ``max_restarts`` reached), or
**stop** (two relaunches in a row from the same checkpoint: a restart storm).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from squall.failover.plan import Plan

ANY = "*"  # a report that does not name a node of the step: every node is a suspect


@dataclass(frozen=True)
class Settings:
    detect_seconds: float = 10.0
    hang_seconds: float = 0.0
    confirm_seconds: float = 2.0
    max_restarts: int = 3
    elastic: bool = False
    min_nodes: int = 1

    @property
    def settle_seconds(self) -> float:
        """How long a failed step waits for a node's silence to be confirmed before its
        exit is the program's own failure."""
        return self.confirm_seconds + 1.0


@dataclass(frozen=True)
class Look:
    """One look at the job during an attempt."""

    silent: Mapping[str, float]          # seconds since each node's heartbeat changed
    idle: float = 0.0                    # seconds since any rank's progress changed
    stopped: Mapping[str, int] = field(default_factory=dict)  # stopped tasks per node
    exited: int | None = None            # the step's exit status; None while it runs
    exited_for: float = 0.0              # seconds since it exited
    reports: frozenset[str] = frozenset()  # nodes named by the ranks or launcher (or ANY)
    down: frozenset[str] = frozenset()   # nodes Slurm counts as down


@dataclass(frozen=True)
class Verdict:
    how: str                     # "running", "lost", "hung", "exit"
    nodes: tuple[str, ...] = ()  # lost (or frozen) nodes
    rc: int = 0
    why: str = ""
    spares_lost: tuple[str, ...] = ()
    confirm: tuple[str, ...] = ()  # suspects whose Slurm state is worth asking for
    silent: float = 0.0          # how long the lost nodes (or the progress) were silent
    stalled: float = 0.0         # every heartbeat silent this long: a stall, no verdict


def suspects(plan: Plan, look: Look) -> tuple[str, ...]:
    """The step's nodes someone said may be gone."""
    named = [n for n in plan.active if n in look.reports]
    if named and not look.exited:
        return tuple(named)
    if look.exited or (look.reports and not named):
        return plan.active  # a task died or a report named no node of the step
    return ()


def confirmed(node: str, look: Look, s: Settings) -> bool:
    """The suspect's silence is its own, not the supervisor's or the filesystem's: at
    least one other node beat within ``confirm_seconds``."""
    if node in look.down:
        return True
    if look.silent.get(node, 0.0) < s.confirm_seconds:
        return False
    return any(t < s.confirm_seconds for n, t in look.silent.items() if n != node)


def stall(look: Look, s: Settings) -> float:
    """How long every heartbeat has been silent, when no node beat within half of
    detect_seconds (0.0 otherwise)."""
    quietest = min(look.silent.values(), default=0.0)
    return quietest if quietest >= s.detect_seconds / 2 else 0.0


def silent_for(nodes: tuple[str, ...], look: Look, s: Settings,
               stalled: float) -> tuple[str, ...]:
    """The nodes silent past detect_seconds; in a stall, only those Slurm counts down."""
    return tuple(n for n in nodes if look.silent.get(n, 0.0) > s.detect_seconds
                 and (not stalled or n in look.down))


def judge(plan: Plan, look: Look, s: Settings) -> Verdict:
    stalled = stall(look, s)
    gone = silent_for(plan.spares, look, s, stalled)
    heard = suspects(plan, look)
    lost = tuple(n for n in heard if confirmed(n, look, s))
    if lost:
        quiet = max(look.silent.get(n, 0.0) for n in lost)
        return Verdict("lost", lost, spares_lost=gone, silent=quiet,
                       why=f"reported by the step; no heartbeat for {quiet:.1f} s")
    silent = silent_for(plan.active, look, s, stalled)
    if silent:
        quiet = max(look.silent[n] for n in silent)
        return Verdict("lost", silent, spares_lost=gone, silent=quiet,
                       why=f"no heartbeat for {quiet:.1f} s")
    if s.hang_seconds and look.idle > s.hang_seconds and look.exited is None:
        frozen = tuple(n for n in plan.active if look.stopped.get(n, 0))
        return Verdict("hung", frozen, spares_lost=gone, silent=look.idle,
                       why=f"no progress for {look.idle:.1f} s (hung)" +
                           (f"; tasks stopped on {','.join(frozen)}" if frozen else ""))
    if look.exited == 0 and (not heard or look.exited_for > s.settle_seconds):
        # a launcher that lost a node may still exit 0 (Open MPI 5's prterun does):
        # with a report pending, the heartbeats have settle_seconds to say
        return Verdict("exit", rc=0, spares_lost=gone)
    if look.exited is not None and look.exited_for > s.settle_seconds:
        return Verdict("exit", rc=look.exited, spares_lost=gone)
    return Verdict("running", spares_lost=gone, stalled=stalled,
                   confirm=tuple(n for n in heard if n not in look.down))


@dataclass(frozen=True)
class Course:
    """What the supervisor remembers across attempts."""

    plan: Plan
    attempt: int = 0
    stuck: int = 0                # relaunches in a row from the same checkpoint
    previous: str | None = None   # the checkpoint the last relaunch resumed from


@dataclass(frozen=True)
class Decision:
    what: str        # "done", "relaunch", "shrink", "requeue", "stop"
    course: Course
    rc: int = 0
    why: str = ""


def after(course: Course, verdict: Verdict, checkpoint: str | None, s: Settings) -> Decision:
    """What to do once an attempt ended with ``verdict``; ``checkpoint`` is the newest
    complete one now."""
    if verdict.how == "exit":
        return Decision("done", course, rc=verdict.rc)
    stuck = course.stuck + 1 if course.attempt and checkpoint == course.previous else 0
    course = replace(course, stuck=stuck, previous=checkpoint)
    if stuck >= 2:
        return Decision("stop", course, rc=1, why=(
            f"{stuck} relaunches in a row resumed from {checkpoint or 'the beginning'} and "
            "never moved the checkpoint forward: stopping the job (fix the program or the "
            "nodes, then resubmit)"))
    lost = set(verdict.nodes)
    what = "relaunch"
    plan = course.plan.replace(lost) if lost else course.plan
    if plan is None and s.elastic:
        plan = course.plan.shrink(lost, s.min_nodes)
        what = "shrink"
    if plan is None or course.attempt + 1 > s.max_restarts:
        why = ("no spare left" if plan is None else
               f"failover.max_restarts={s.max_restarts} reached")
        return Decision("requeue", course, why=why)
    return Decision(what, replace(course, plan=plan, attempt=course.attempt + 1))
