#!/usr/bin/env python3
"""The demo program: count steps with atomic checkpoints, survive kills and time limits.

Every rank counts steps 0..N-1 with a short sleep per step. Rank 0 (SLURM_PROCID) writes a
checkpoint every K steps under --checkpoint-dir as ``ckpt-<step>/`` (``--name`` changes the
name, e.g. ``checkpoint-{step}`` as the Hugging Face Trainer writes): ``state.json`` is
written to a temporary file, fsynced and renamed, and only then the ``COMPLETE`` marker is
written the same way; a checkpoint without its marker is incomplete and never resumed from.

``--resume PATH`` continues from the checkpoint at PATH. SIGTERM or SIGUSR1 make every
rank stop after the current step: rank 0 checkpoints and exits 128 + the signal number
("stopped, not finished"); the other ranks exit 0, so that srun --kill-on-bad-exit does not
end the step while rank 0 is still writing. At the end rank 0 writes ``--final``
(atomically): the list of steps in the committed history and their sum, identical to what
an uninterrupted run writes. With ``--log`` rank 0 appends one line per step it executes,
so a test can count repeats.

Python 3 standard library only: it runs on the node image and in the demo container.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

MARKER = "COMPLETE"
stop_signal = 0


def on_signal(signum: int, _frame: object) -> None:
    global stop_signal
    stop_signal = signum


def write_atomic(path: str, data: str) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path) or ".")


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def checkpoint(directory: str, done: list[int], name: str = "ckpt-{step:06d}") -> str:
    step = done[-1] if done else -1
    path = os.path.join(directory, name.format(step=step + 1))
    os.makedirs(path, exist_ok=True)
    write_atomic(os.path.join(path, "state.json"), json.dumps({"done": done}))
    write_atomic(os.path.join(path, MARKER), "complete\n")
    return path


def load(path: str) -> list[int]:
    if not os.path.exists(os.path.join(path, MARKER)):
        sys.exit(f"count.py: {path} has no {MARKER} marker: resume only from complete "
                 "checkpoints")
    with open(os.path.join(path, "state.json"), encoding="utf-8") as fh:
        return list(json.load(fh)["done"])


def final_state(done: list[int]) -> str:
    return json.dumps({"steps": done, "count": len(done), "sum": sum(done)}) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, required=True, help="count steps 0..N-1")
    parser.add_argument("--every", type=int, default=5, help="checkpoint every K steps")
    parser.add_argument("--sleep", type=float, default=0.5, help="seconds per step")
    parser.add_argument("--checkpoint-dir", required=True)
    parser.add_argument("--final", required=True, help="file for the final state")
    parser.add_argument("--log", help="rank 0 appends each executed step here")
    parser.add_argument("--resume", help="checkpoint directory to continue from")
    parser.add_argument("--name", default="ckpt-{step:06d}",
                        help="checkpoint directory name; {step} is the steps done")
    args = parser.parse_args()

    rank = int(os.environ.get("SLURM_PROCID", "0"))
    restart = os.environ.get("SLURM_RESTART_COUNT", "0")
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGUSR1, on_signal)
    if rank == 0:
        os.makedirs(args.checkpoint_dir, exist_ok=True)

    done = load(args.resume) if args.resume else []
    start = done[-1] + 1 if done else 0
    print(f"count.py rank {rank}: restart {restart}, starting at step {start}", flush=True)
    log = open(args.log, "a", encoding="utf-8") if (args.log and rank == 0) else None
    for step in range(start, args.steps):
        time.sleep(args.sleep)
        done.append(step)
        if log:
            log.write(f"{restart} {step}\n")
            log.flush()
        if stop_signal:
            if rank != 0:
                # Not a failure: exit 0 so srun --kill-on-bad-exit leaves rank 0 the time
                # to finish its checkpoint; rank 0's status tells the script "stopped".
                return 0
            path = checkpoint(args.checkpoint_dir, done, args.name)
            print(f"count.py: signal {stop_signal}: checkpointed {path}", flush=True)
            return 128 + stop_signal
        if rank == 0 and (step + 1) % args.every == 0:
            checkpoint(args.checkpoint_dir, done, args.name)
    if rank == 0:
        write_atomic(args.final, final_state(done))
        print(f"count.py: finished {len(done)} steps, wrote {args.final}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
