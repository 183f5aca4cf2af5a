"""Which nodes run the step and which wait as spares: pure decisions, no Slurm."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Plan:
    active: tuple[str, ...]  # the step's nodes, rank 0's first
    spares: tuple[str, ...]  # ready to take a lost node's place, in the order used
    lost: tuple[str, ...] = ()

    @classmethod
    def initial(cls, allocation: list[str], nodes: int, batch_host: str) -> Plan:
        """The first ``nodes`` of the allocation run the step, except the batch host (where
        the supervisor runs), which comes last: it waits as the last spare (or, without
        spares, runs the last ranks), so the node of rank 0 can die and the job goes on."""
        order = [n for n in allocation if n != batch_host]
        if batch_host in allocation:
            order.append(batch_host)
        return cls(tuple(order[:nodes]), tuple(order[nodes:]))

    def replace(self, lost: set[str]) -> Plan | None:
        """The plan without ``lost`` nodes (spares take their places, in order), or None
        when too few nodes are left."""
        return self.shrink(lost, min_nodes=len(self.active))

    def shrink(self, lost: set[str], min_nodes: int) -> Plan | None:
        """Elastic: the plan without ``lost`` nodes, spares first taking their places and
        the step going on with fewer nodes when none are left; None below ``min_nodes``."""
        spares = [n for n in self.spares if n not in lost]
        active = []
        for n in self.active:
            if n not in lost:
                active.append(n)
            elif spares:
                active.append(spares.pop(0))
        if len(active) < min_nodes:
            return None
        return Plan(tuple(active), tuple(spares), tuple(sorted({*self.lost, *lost})))

    def drop_spares(self, lost: set[str]) -> Plan:
        return Plan(self.active, tuple(n for n in self.spares if n not in lost),
                    tuple(sorted({*self.lost, *(lost & set(self.spares))})))
