#!/usr/bin/env python3
"""The demo's training program: PyTorch DDP over gloo, checkpoints with torch.save, resume.

A small deterministic model (an MLP 256-1024-1024-16, 1.33 M parameters, 5.3 MB), seeded,
learns a fixed random teacher network from synthetic data made in the job: the batch of
step S on rank R is drawn from a generator seeded with (S, R), so a resumed run sees the
same data as an uninterrupted one. Each step every rank runs forward and backward on its
batch and DistributedDataParallel averages the gradients over gloo (each rank's gradient
times 1/world, then an all-reduce sum), then SGD with momentum steps. One thread per rank
(torch.set_num_threads(1)): the kernels then do the same arithmetic in every run.

Started by torchrun (RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT from its rendezvous), one
worker per node. Rank 0 writes a checkpoint every --checkpoint-every K steps under
--checkpoint-dir as ``ckpt-<steps done>/``: ``state.pt`` (torch.save of the model's and the
optimizer's state and the steps done) written to a temporary file, fsynced and renamed,
then the ``COMPLETE`` marker the same way; ``--resume PATH`` continues from the complete
checkpoint at PATH (every rank loads it from the shared filesystem). At the end rank 0
writes ``--final`` (JSON, atomically): the steps, the world, the parameters' count and the
sha256 of their bytes (every tensor of the state dict in order, little-endian float32),
and ``final.pt`` beside it. With ``--log`` rank 0 appends ``<attempt> <step>`` per step it
executes (the attempt: $SQUALL_FAILOVER_ATTEMPT, else $SLURM_RESTART_COUNT, else 0).

``--reference`` runs the same training uninterrupted in one process, with ``--world``
ranks simulated: each simulated rank's gradient on its own batch, times 1/world, summed in
rank order. For two ranks that is the arithmetic DDP's gloo all-reduce does (x/2 is exact,
and a + b = b + a), so its ``--final`` is bitwise the one of a two-node DDP run.

Heartbeats for squall's failover supervisor, as allreduce.py's: each rank writes the steps
it has done into $SQUALL_PROGRESS_FILE (``{rank}`` in it becomes the rank) after every step;
a collective that fails (a peer gone) appends one line to $SQUALL_PEER_LOST_FILE and exits 3.
SIGTERM or SIGUSR1 stop every rank after the same step (the stop travels in a one-element
all-reduce each step): rank 0 checkpoints and exits 128 + the signal, the others exit 0.

Exit status: 0 finished; 1 a local failure (a file that cannot be written); 2 a bad
argument or checkpoint; 3 a peer failed; 128 + signal: stopped by a signal, checkpointed.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import signal
import sys
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

PROG = "train_ddp.py"
MARKER = "COMPLETE"
SEED = 20240
IN, HIDDEN, OUT, BATCH, LR, MOMENTUM = 256, 1024, 16, 32, 0.01, 0.9
stop_signal = 0


class Failure(Exception):
    code = 1


class Usage(Failure):
    code = 2


class PeerFailure(Failure):
    code = 3


def on_signal(signum: int, _frame: object) -> None:
    global stop_signal
    stop_signal = signum


def build_model() -> nn.Module:
    torch.manual_seed(SEED)
    return nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN),
                         nn.ReLU(), nn.Linear(HIDDEN, OUT))


def teacher() -> torch.Tensor:
    return torch.randn(IN, OUT, generator=torch.Generator().manual_seed(SEED + 1)) / IN ** 0.5


def batch(step: int, rank: int, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(SEED * 1_000_003 + step * 1009 + rank)
    x = torch.randn(BATCH, IN, generator=g)
    return x, torch.tanh(x @ target) + 0.01 * torch.randn(BATCH, OUT, generator=g)


def write_atomic(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_atomic(path: str, obj: Any) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as fh:
        torch.save(obj, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def checkpoint(directory: str, model: nn.Module, opt: torch.optim.Optimizer, done: int,
               world: int) -> str:
    path = os.path.join(directory, f"ckpt-{done:06d}")
    try:
        os.makedirs(path, exist_ok=True)
        save_atomic(os.path.join(path, "state.pt"),
                    {"model": model.state_dict(), "optimizer": opt.state_dict(),
                     "steps": done, "world": world})
        write_atomic(os.path.join(path, MARKER), b"complete\n")
    except OSError as e:
        raise Failure(f"cannot write checkpoint {path}: {e.strerror or e}") from None
    return path


def load(path: str, model: nn.Module, opt: torch.optim.Optimizer, world: int) -> int:
    if not os.path.exists(os.path.join(path, MARKER)):
        raise Usage(f"{path} has no {MARKER} marker: resume only from complete checkpoints")
    try:
        state = torch.load(os.path.join(path, "state.pt"), map_location="cpu",
                           weights_only=True)
    except (OSError, RuntimeError) as e:
        raise Usage(f"cannot read checkpoint {path}: {e}") from None
    if state.get("world") != world:
        raise Usage(f"checkpoint {path} is of a {state.get('world')}-rank run, this one has "
                    f"{world} ranks: the data each rank sees would differ")
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    return int(state["steps"])


def digest(model: nn.Module) -> tuple[str, int]:
    h, count = hashlib.sha256(), 0
    for name, t in model.state_dict().items():
        h.update(name.encode())
        h.update(t.detach().contiguous().numpy().astype("<f4").tobytes())
        count += t.numel()
    return h.hexdigest(), count


def finish(args: argparse.Namespace, model: nn.Module, done: int, world: int) -> None:
    sha, count = digest(model)
    try:
        os.makedirs(os.path.dirname(args.final) or ".", exist_ok=True)
        save_atomic(os.path.join(os.path.dirname(args.final) or ".", "final.pt"),
                    model.state_dict())
        write_atomic(args.final, (json.dumps({"steps": done, "world": world,
                                              "parameters": count, "sha256": sha})
                                  + "\n").encode())
    except OSError as e:
        raise Failure(f"cannot write --final {args.final}: {e.strerror or e}") from None
    print(f"{PROG}: finished {done} steps, {count} parameters, sha256 {sha[:16]}..., "
          f"wrote {args.final}", flush=True)


class Trail:
    """Rank 0's per-step log and every rank's progress file."""

    def __init__(self, args: argparse.Namespace, rank: int) -> None:
        self.attempt = os.environ.get("SQUALL_FAILOVER_ATTEMPT",
                                      os.environ.get("SLURM_RESTART_COUNT", "0"))
        self.log = open(args.log, "a", encoding="utf-8") if args.log and rank == 0 else None
        path = os.environ.get("SQUALL_PROGRESS_FILE", "")
        self.progress = path.replace("{rank}", str(rank)) if path else ""
        self.warned = False

    def step(self, step: int) -> None:
        if self.log:
            self.log.write(f"{self.attempt} {step}\n")
            self.log.flush()
        if not self.progress:
            return
        try:
            fd = os.open(self.progress, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                os.write(fd, f"{step + 1:012d}\n".encode())
            finally:
                os.close(fd)
        except OSError as e:
            if not self.warned:
                print(f"{PROG}: cannot write progress to {self.progress}: {e.strerror}",
                      file=sys.stderr, flush=True)
                self.warned = True


def peer_lost(text: str) -> None:
    path = os.environ.get("SQUALL_PEER_LOST_FILE")
    if path:
        try:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(text[:400] + "\n")
        except OSError:
            pass


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, required=True, help="train steps 0..N-1")
    p.add_argument("--checkpoint-every", dest="every", type=int, default=10)
    p.add_argument("--sleep", type=float, default=0.0, help="extra seconds per step")
    p.add_argument("--checkpoint-dir", default="")
    p.add_argument("--final", required=True, help="JSON file for the final state")
    p.add_argument("--log", help="rank 0 appends each executed step here")
    p.add_argument("--resume", help="complete checkpoint directory to continue from")
    p.add_argument("--step-timeout", type=float, default=1800.0,
                   help="seconds a collective may wait for a peer (gloo's timeout)")
    p.add_argument("--reference", action="store_true",
                   help="one process, --world ranks simulated, no checkpoints")
    p.add_argument("--world", type=int, default=2, help="ranks simulated by --reference")
    args = p.parse_args(argv)
    if args.steps < 1 or args.every < 1 or args.world < 1:
        raise Usage("--steps, --checkpoint-every and --world must be at least 1")
    if not args.reference and not args.checkpoint_dir:
        raise Usage("--checkpoint-dir is needed (or --reference)")
    return args


def reference(args: argparse.Namespace) -> int:
    model = build_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    target, loss_fn, world = teacher(), nn.MSELoss(), args.world
    params = list(model.parameters())
    for step in range(args.steps):
        total: list[torch.Tensor] = []
        for rank in range(world):
            model.zero_grad(set_to_none=True)
            x, y = batch(step, rank, target)
            loss_fn(model(x), y).backward()
            g = [p.grad * (1.0 / world) for p in params if p.grad is not None]
            total = g if not total else [a + b for a, b in zip(total, g, strict=True)]
        for p, g in zip(params, total, strict=True):
            p.grad = g
        opt.step()
    finish(args, model, args.steps, world)
    return 0


def run(args: argparse.Namespace) -> int:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.step_timeout))
    model = build_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    start = load(args.resume, model, opt, world) if args.resume else 0
    ddp = nn.parallel.DistributedDataParallel(model)
    print(f"{PROG} rank {rank}/{world} on {os.uname().nodename}: attempt "
          f"{os.environ.get('SQUALL_FAILOVER_ATTEMPT', '0')}, starting at step {start}",
          flush=True)
    if rank == 0:
        os.makedirs(args.checkpoint_dir, exist_ok=True)
    target, loss_fn, trail = teacher(), nn.MSELoss(), Trail(args, rank)
    stop = torch.zeros(1)
    for step in range(start, args.steps):
        time.sleep(args.sleep)
        x, y = batch(step, rank, target)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x), y)
        loss.backward()  # DDP's gloo all-reduce of the gradients
        opt.step()
        stop[0] = stop_signal
        dist.all_reduce(stop, op=dist.ReduceOp.MAX)
        trail.step(step)
        done = step + 1
        if stop[0]:
            if rank != 0:
                return 0
            path = checkpoint(args.checkpoint_dir, model, opt, done, world)
            print(f"{PROG}: signal {int(stop[0])}: checkpointed {path}", flush=True)
            return 128 + int(stop[0])
        if rank == 0 and (done % args.every == 0 or step % 20 == 0):
            print(f"{PROG}: step {step} loss {loss.item():.5f}", flush=True)
        if rank == 0 and done % args.every == 0:
            checkpoint(args.checkpoint_dir, model, opt, done, world)
    if rank == 0:
        finish(args, model, args.steps, world)
    dist.barrier()
    dist.destroy_process_group()
    return 0


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGUSR1, on_signal)
    torch.set_num_threads(1)
    who = f"{PROG} rank {os.environ.get('RANK', '0')}"
    try:
        args = parse_args(argv)
        return reference(args) if args.reference else run(args)
    except Failure as e:
        print(f"{who}: {'error: ' if e.code == 2 else ''}{e}", file=sys.stderr, flush=True)
        return e.code
    except (RuntimeError, dist.DistBackendError) as e:  # a collective failed: a peer is gone
        line = f"{who}: a collective failed, a peer is gone: {str(e).splitlines()[0][:300]}"
        print(line, file=sys.stderr, flush=True)
        peer_lost(line)
        return PeerFailure.code


if __name__ == "__main__":
    sys.exit(main())
