#!/usr/bin/env python3
"""Find rank 0 one of the ways training programs do, check it, then run the all-reduce.

    find_rank0.py MODE ALLREDUCE_PY [ALLREDUCE ARGS...]

MODE says where rank 0 is, as programs written each way believe it:

- ``master_addr``: ``MASTER_ADDR`` (PyTorch ``env://``), port ``MASTER_PORT``;
- ``step_nodelist``: the first host of ``SLURM_STEP_NODELIST`` (hand-written launchers);
- ``nodelist``: the first host of ``SLURM_NODELIST`` (Lightning-style code);
- ``nodeid``: the node whose ``SLURM_NODEID`` is 0 hosts the store: it writes its name
  next to the checkpoints, the others read it;
- ``mpi``: rank and world from Open MPI (``OMPI_COMM_WORLD_RANK``/``SIZE``), rank 0 at
  ``MASTER_ADDR`` (mpirun's first host);
- ``all``: the first four at once (one job checks every way; the all-reduce meets at the
  first, ``master_addr``'s).

Rank and world come from ``SLURM_PROCID``/``SLURM_NTASKS`` (but ``mpi``). The rank that
is 0 checks that it runs where the others will look for it, and exits 2 with one line per
way that says otherwise; under ``all`` every other rank checks that the ways agree, and
exits 2 if not: a relaunch that breaks Slurm's meaning of a rank variable fails at once
instead of timing out. Then it execs ALLREDUCE_PY with --rank, --world, --master-addr and
--master-port (not derived from MASTER_PORT except in master_addr and mpi modes).
Standard library only.
"""

from __future__ import annotations

import os
import socket
import sys
import time


def first_host(nodelist: str) -> str:
    """The first name of a Slurm node list: ``node[1-2,5]`` -> ``node1``."""
    head, depth = "", 0
    for ch in nodelist:
        if ch == "," and depth == 0:
            break
        depth += ch == "["
        depth -= ch == "]"
        head += ch
    if "[" not in head:
        return head
    prefix, rest = head.split("[", 1)
    inside, suffix = rest.split("]", 1)
    return prefix + inside.split(",")[0].split("-")[0] + suffix


def env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        sys.exit(f"find_rank0: {name} is not set")
    return value


def store_host(directory: str) -> str:
    """Mode nodeid: the node with SLURM_NODEID 0 publishes its name; the others wait."""
    path = os.path.join(directory, f"rank0-host.{env('SLURM_JOB_ID')}.{env('SLURM_STEP_ID')}")
    if env("SLURM_NODEID") == "0":
        if os.environ.get("SLURM_LOCALID", "0") == "0":
            tmp = f"{path}.tmp.{os.getpid()}"
            with open(tmp, "w") as fh:
                fh.write(socket.gethostname())
            os.replace(tmp, path)
        return socket.gethostname()
    deadline = time.monotonic() + 60
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            sys.exit(f"find_rank0: nobody published {path} within 60 s")
        time.sleep(0.1)
    with open(path) as fh:
        return fh.read().strip()


WAYS = ("master_addr", "step_nodelist", "nodelist", "nodeid")


def rank0_at(mode: str, rest: list[str], derived: int) -> tuple[str, int]:
    """Where ``mode`` says rank 0 is: its host and the all-reduce's port."""
    if mode in ("master_addr", "mpi"):
        return env("MASTER_ADDR"), int(env("MASTER_PORT"))
    if mode == "step_nodelist":
        return first_host(env("SLURM_STEP_NODELIST")), derived
    if mode == "nodelist":
        return first_host(env("SLURM_NODELIST")), derived
    if mode == "nodeid":
        ckdir = next((a.split("=", 1)[1] for a in rest if a.startswith("--checkpoint-dir=")),
                     ".")
        os.makedirs(ckdir, exist_ok=True)
        return store_host(ckdir), derived
    sys.exit(f"find_rank0: unknown mode {mode}")


def main() -> int:
    mode, program, *rest = sys.argv[1:]
    if mode == "mpi":
        rank, world = int(env("OMPI_COMM_WORLD_RANK")), int(env("OMPI_COMM_WORLD_SIZE"))
    else:
        rank, world = int(env("SLURM_PROCID")), int(env("SLURM_NTASKS"))
    derived = 31000 + int(env("SLURM_JOB_ID")) % 100 * 10 + \
        int(os.environ.get("SLURM_STEP_ID", "0")) % 10
    modes = WAYS if mode == "all" else (mode,)
    found = {m: rank0_at(m, rest, derived) for m in modes}
    host, port = found[modes[0]]
    me = socket.gethostname()
    if rank == 0 and any(h != me for h, _ in found.values()):
        for m, (h, _) in found.items():
            if h != me:
                print(f"find_rank0: rank 0 runs on {me}, but {m} says rank 0 is on {h}",
                      file=sys.stderr, flush=True)
        return 2
    if len({h for h, _ in found.values()}) > 1:
        print(f"find_rank0: rank {rank} on {me}: the ways disagree where rank 0 is: "
              + ", ".join(f"{m} {h}" for m, (h, _) in found.items()),
              file=sys.stderr, flush=True)
        return 2
    os.execv(sys.executable, [sys.executable, program, f"--rank={rank}", f"--world={world}",
                              f"--master-addr={host}", f"--master-port={port}", *rest])


if __name__ == "__main__":
    sys.exit(main())
