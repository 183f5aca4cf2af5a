"""squall_steps, the in-program timing (python/squall_steps): its file format, the ring,
no-op outside a squall job, and never blocking the step (a stalled or full file system)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import squall_steps
from squall.steps.files import parse, read_dir
from squall_steps import Recorder
from squall_steps import pytorch as steps_torch

PYTHON = Path(__file__).resolve().parents[2] / "python"


def run_program(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter that sees squall_steps alone (as in a container)."""
    base = {"PATH": os.environ["PATH"], "PYTHONPATH": str(PYTHON)}
    return subprocess.run([sys.executable, "-S", "-c", code],
                          env={**base, **env}, capture_output=True, text=True, timeout=60,
                          check=True)


PROGRAM = """
import squall_steps, time
for k in range(5):
    with squall_steps.section("data"):
        time.sleep(0.01)
    with squall_steps.section("forward"):
        pass
    squall_steps.step()
print(squall_steps.enabled(), squall_steps.path())
"""


def test_outside_a_squall_job_it_is_a_no_op(tmp_path):
    proc = run_program(PROGRAM, {"HOME": str(tmp_path)})
    assert proc.stdout.split() == ["False", "None"]
    assert list(tmp_path.iterdir()) == []


def test_a_rank_writes_its_file_in_squall_steps_dir(tmp_path):
    proc = run_program(PROGRAM, {"SQUALL_STEPS_DIR": str(tmp_path), "SLURM_PROCID": "3",
                                 "SLURMD_NODENAME": "node2"})
    assert proc.stdout.split() == ["True", str(tmp_path / "steps.3")]
    lines = (tmp_path / "steps.3").read_text().splitlines()
    assert lines[0].startswith("squall-steps 1 rank=3 node=node2 pid=")
    rank = parse("\n".join(lines), 3)
    assert rank.node == "node2" and [s.number for s in rank.steps] == [0, 1, 2, 3, 4]
    assert all(0.009 < s.sections["data"] < 0.5 and "forward" in s.sections
               for s in rank.steps)
    assert all(s.length >= s.sections["data"] for s in rank.steps)


def test_next_to_the_failovers_progress_files(tmp_path):
    run_program(PROGRAM, {"SQUALL_PROGRESS_FILE": f"{tmp_path}/progress.{{rank}}",
                          "RANK": "1"})
    assert [r.rank for r in read_dir(tmp_path)] == [1]
    assert len(read_dir(tmp_path)[0].steps) == 5


def test_the_file_is_a_bounded_ring(tmp_path):
    rec = Recorder(str(tmp_path), rank=0, node="n", max_bytes=2000)
    for _ in range(500):
        with squall_steps._Section(rec, "data"):
            pass
        rec.step()
    rec.close()
    assert (tmp_path / "steps.0.old").exists()
    assert (tmp_path / "steps.0").stat().st_size <= 2000 + 200
    assert (tmp_path / "steps.0.old").stat().st_size <= 2000 + 200
    numbers = [s.number for s in read_dir(tmp_path)[0].steps]
    assert numbers[-1] == 499 and numbers == list(range(numbers[0], 500))
    assert len(numbers) < 100


def test_a_stalled_file_system_costs_the_step_nothing(tmp_path):
    os.mkfifo(tmp_path / "steps.0")  # its open blocks until a reader comes: a stalled /fsx
    rec = Recorder(str(tmp_path), rank=0)
    began = time.perf_counter()
    for _ in range(10_000):
        rec.step()
    took = time.perf_counter() - began
    assert took < 2.0, f"10,000 steps took {took:.2f} s with the writer stalled"
    assert rec.writer is not None and rec.writer.dropped >= 10_000 - 2 * squall_steps.QUEUE_MAX - 1
    began = time.perf_counter()
    rec.close(timeout=0.2)
    assert time.perf_counter() - began < 1.0
    # let the stalled writer go (a reader opens the FIFO) so the thread ends
    fd = os.open(tmp_path / "steps.0", os.O_RDONLY | os.O_NONBLOCK)
    os.close(fd)


def test_a_full_disk_is_counted_not_raised(tmp_path):
    (tmp_path / "steps.0").symlink_to("/dev/full")
    rec = Recorder(str(tmp_path), rank=0)
    for _ in range(50):
        rec.step()
    rec.flush()
    assert rec.writer is not None and rec.writer.dropped >= 50
    rec.close(timeout=0.5)


def test_a_missing_directory_is_counted_not_raised(tmp_path):
    rec = Recorder(str(tmp_path / "not-mounted"), rank=0)
    rec.step()
    rec.flush()
    assert rec.writer is not None and rec.writer.dropped == 1
    rec.close(timeout=0.5)


def test_dropped_lines_are_reported_in_the_file(tmp_path):
    rec = Recorder(str(tmp_path), rank=0)
    assert rec.writer is not None
    rec.writer.dropped = 7
    rec.step()
    rec.close()
    assert read_dir(tmp_path)[0].dropped == 7


def test_the_dataloader_wrapper_times_each_batch_wait(tmp_path, monkeypatch):
    rec = Recorder(str(tmp_path), rank=0)
    monkeypatch.setattr(squall_steps, "_recorder", rec)

    def slow_batches():
        for k in range(3):
            time.sleep(0.02)
            yield k

    seen = []
    for batch in steps_torch.loader(slow_batches()):
        seen.append(batch)
        rec.step()
    rec.close()
    assert seen == [0, 1, 2]
    steps = read_dir(tmp_path)[0].steps
    assert len(steps) == 3 and all(s.sections["data"] >= 0.019 for s in steps)


class FakeFuture:
    """Test double for torch.futures.Future (PyTorch cannot be installed here)."""

    def __init__(self, value: object) -> None:
        self.result = value
        self.callbacks: list = []

    def then(self, callback):
        out = FakeFuture(None)
        self.callbacks.append((callback, out))
        return out

    def value(self):
        return self.result

    def complete(self):
        for callback, out in self.callbacks:
            out.result = callback(self)


class FakeDDPModel:
    """Test double for DistributedDataParallel's register_comm_hook."""

    def register_comm_hook(self, state, hook):
        self.state, self.hook = state, hook


def test_the_ddp_hook_times_from_the_first_bucket_to_the_last(tmp_path, monkeypatch):
    rec = Recorder(str(tmp_path), rank=0)
    monkeypatch.setattr(squall_steps, "_recorder", rec)
    launched = []

    def allreduce(state, bucket):
        launched.append(FakeFuture(bucket))
        return launched[-1]

    model = FakeDDPModel()
    steps_torch.time_allreduce(model, hook=allreduce)
    outs = [model.hook(None, b) for b in ("b0", "b1")]
    time.sleep(0.03)
    for future in launched:
        future.complete()
    assert [o.value() for o in outs] == ["b0", "b1"]
    rec.step()
    rec.close()
    step = read_dir(tmp_path)[0].steps[0]
    assert 0.029 < step.sections["allreduce"] < 1.0
