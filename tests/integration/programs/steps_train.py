#!/usr/bin/env python3
"""A coupled training loop timed with squall_steps, with faults to inject (issue 43,
tests/integration/test_steps_cluster.py). Not PyTorch (not on the mini cluster): each step
loads a batch (a sleep), computes (a sleep), all-reduces over TCP through rank 0 (every rank
sends its step number, rank 0 answers when all have: no rank leaves the all-reduce before
the last arrives, as with NCCL) and steps the optimizer, each in its squall_steps section.

Faults: --data-slow RANK:EVERY:SECONDS (that rank's batch waits SECONDS more every EVERYth
step), --allreduce-delay SECONDS (every rank, inside its all-reduce, as a slow network),
--slow-node NODE:SECONDS (the ranks on NODE busy-loop SECONDS more in compute).

Rank SLURM_PROCID of SLURM_NTASKS; rank 0 listens on MASTER_ADDR:MASTER_PORT.
Python 3 standard library and squall_steps only."""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time

import squall_steps


def connect(rank: int, world: int, addr: str, port: int) -> list[socket.socket]:
    if rank == 0:
        server = socket.create_server(("", port), reuse_port=True)
        server.settimeout(60)
        peers = [server.accept()[0] for _ in range(world - 1)]
        server.close()
        return peers
    deadline = time.monotonic() + 60
    while True:
        try:
            return [socket.create_connection((addr, port), timeout=60)]
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def allreduce(peers: list[socket.socket], rank: int, k: int) -> None:
    if rank == 0:
        for p in peers:
            if p.recv(64) == b"":
                raise SystemExit("a peer left")
        for p in peers:
            p.sendall(f"{k}\n".encode())
    else:
        peers[0].sendall(f"{k}\n".encode())
        if peers[0].recv(64) == b"":
            raise SystemExit("rank 0 left")


def busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--data", type=float, default=0.005)
    ap.add_argument("--compute", type=float, default=0.04)
    ap.add_argument("--data-slow", default="")
    ap.add_argument("--allreduce-delay", type=float, default=0.0)
    ap.add_argument("--slow-node", default="")
    a = ap.parse_args()
    rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
    node = os.environ.get("SLURMD_NODENAME", socket.gethostname())
    slow_rank, every, extra = -1, 1, 0.0
    if a.data_slow:
        r, e, s = a.data_slow.split(":")
        slow_rank, every, extra = int(r), int(e), float(s)
    slow_node, busy_s = a.slow_node.split(":") if a.slow_node else ("", "0")
    peers = connect(rank, world, os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
    allreduce(peers, rank, -1)  # everyone here before the first step
    squall_steps.step()  # step 0: the start-up, which squall steps leaves out
    for k in range(1, a.steps + 1):
        with squall_steps.section("data"):
            time.sleep(a.data + (extra if rank == slow_rank and k % every == 0 else 0.0))
        with squall_steps.section("forward"):
            time.sleep(a.compute / 2)
            if node == slow_node:
                busy(float(busy_s))
        with squall_steps.section("backward"):
            time.sleep(a.compute / 2)
        with squall_steps.section("allreduce"):
            time.sleep(a.allreduce_delay)
            allreduce(peers, rank, k)
        with squall_steps.section("optimizer"):
            time.sleep(0.002)
        squall_steps.step()
    squall_steps.flush()
    print(f"rank {rank} on {node}: {a.steps} steps, timing {squall_steps.path()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
