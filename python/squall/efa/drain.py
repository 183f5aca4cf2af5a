"""``squall doctor --drain``: the doctor's verdict recorded on the node in Slurm.

Slurm runs a HealthCheckProgram as root and does nothing with its exit status: the
program must drain the node itself. The rules (those of LBNL's NHC):

* checks failed: drain the node, reason ``squall doctor: <first failure>``; a node
  already drained for another reason (an admin's, another health check's) is left as
  it is, so squall never overwrites or lifts someone else's drain;
* checks passed: a node that squall doctor drained is resumed; other drains stay.

Every Slurm call is ``scontrol`` with an argv (no shell), as root on the node.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass

from squall.errors import SetupError
from squall.slurm import command

REASON_PREFIX = "squall doctor: "
REASON_MAX = 200        # reasons are shown in sinfo -R and scontrol: keep them readable
_FIELD = re.compile(r"(?:^|\s)(NodeName|State)=(\S+)")
# Reason is free text ending with " [user@time]"
_REASON = re.compile(r"(?:^|\s)Reason=(.*?) \[[^\]\s]*@[^\]\s]*\]")


@dataclass(frozen=True)
class NodeState:
    name: str
    state: str              # as scontrol shows it, e.g. IDLE+DRAIN
    reason: str             # "" when none

    @property
    def drained(self) -> bool:
        """Drained or draining (DRAIN is a flag on any base state)."""
        return "DRAIN" in self.state.split("+")

    @property
    def ours(self) -> bool:
        return self.reason.startswith(REASON_PREFIX)


def node_name(explicit: str | None = None) -> str:
    """The Slurm name of this node: ``--node``, else slurmd's ``SLURMD_NODENAME``,
    else the short host name (Slurm's default NodeName)."""
    return explicit or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def reason_for(failures: list[tuple[str, str]]) -> str:
    """``squall doctor: NAME: DETAIL (+N more: A, B)`` from (name, detail) pairs."""
    name, detail = failures[0]
    text = f"{REASON_PREFIX}{name}: {detail}"
    if len(failures) > 1:
        text += f" (+{len(failures) - 1} more: {', '.join(n for n, _ in failures[1:])})"
    return text if len(text) <= REASON_MAX else text[:REASON_MAX - 3] + "..."


def parse_show_node(text: str) -> NodeState:
    """``scontrol show node --oneliner NAME`` -> its name, state and reason."""
    fields = dict(_FIELD.findall(text))
    if "NodeName" not in fields or "State" not in fields:
        raise SetupError(f"scontrol show node said {text.strip()[:200]!r}: expected "
                         "NodeName=... State=...")
    m = _REASON.search(text)
    return NodeState(fields["NodeName"], fields["State"], m.group(1) if m else "")


def _scontrol(scontrol: str, *args: str) -> str:
    argv = [scontrol, *args]
    proc = command.run(argv, 30, f"{scontrol} not found: --drain needs the Slurm commands "
                       "on the node (slurm-client), or name it with --scontrol")
    if proc.returncode != 0:
        raise SetupError(f"{' '.join(argv)} failed: {command.reason(proc)}: run as root "
                         "(or SlurmUser) on a node Slurm knows, or give --node NAME")
    return proc.stdout


def show_node(name: str, scontrol: str = "scontrol") -> NodeState:
    return parse_show_node(_scontrol(scontrol, "show", "node", "--oneliner", name))


def apply(failures: list[tuple[str, str]], name: str, scontrol: str = "scontrol") -> str:
    """Drain or resume node ``name`` for these failures; returns what was done, one line."""
    node = show_node(name, scontrol)
    if failures:
        reason = reason_for(failures)
        if node.drained and not node.ours:
            return f"{node.name} left drained (reason: {node.reason or 'none'})"
        if node.drained and node.reason == reason:
            return f"{node.name} stays drained: {reason}"
        _scontrol(scontrol, "update", f"NodeName={node.name}", "State=DRAIN",
                  f"Reason={reason}")
        return f"{node.name} drained: {reason}"
    if node.drained and node.ours:
        _scontrol(scontrol, "update", f"NodeName={node.name}", "State=RESUME")
        return f"{node.name} resumed (squall doctor had drained it: {node.reason})"
    return f"{node.name} healthy" + (f", left drained (reason: {node.reason})"
                                      if node.drained else "")
