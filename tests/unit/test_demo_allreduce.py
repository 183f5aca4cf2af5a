"""sbatch/demo/allreduce.py: ranks that depend on each other, run as local processes.

Every test starts 1 to 3 ranks on 127.0.0.1 with a free port and short steps: a killed or
frozen rank must stop the others within --step-timeout with one line and status 3, nothing
after the last complete checkpoint may be committed, and a resume must end with the final
state of an uninterrupted run.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

PROGRAM = Path(__file__).resolve().parents[2] / "sbatch" / "demo" / "allreduce.py"
STEPS = 120
EVERY = 10
SLEEP = 0.01
STEP_TIMEOUT = 2.0
SLACK = 3.0  # a loaded two-core machine: seconds allowed beyond the timeout itself


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.005)


class Job:
    """One launch of the program: `world` rank processes sharing a checkpoint directory."""

    def __init__(self, base: Path, world: int, *extra: str, steps: int = STEPS,
                 restart: int = 0, env: dict[str, str] | None = None,
                 worlds: list[int] | None = None, per_rank: dict[int, list[str]] | None = None,
                 ranks: list[int] | None = None) -> None:
        self.base = base
        self.out = base / f"run{restart}"
        self.out.mkdir(parents=True)
        port = free_port()
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        clean = {k: v for k, v in os.environ.items()
                 if not k.startswith(("SLURM_", "MASTER_", "SQUALL_"))}
        for rank in ranks if ranks is not None else range(world):
            args = [sys.executable, str(PROGRAM), f"--steps={steps}",
                    f"--checkpoint-every={EVERY}", f"--sleep={SLEEP}",
                    f"--step-timeout={STEP_TIMEOUT:g}", "--connect-timeout=20",
                    f"--checkpoint-dir={base}/ckpt", f"--final={base}/final.json",
                    f"--log={base}/steps.log", *extra, *(per_rank or {}).get(rank, [])]
            rank_env = {**clean, "SLURM_PROCID": str(rank),
                        "SLURM_NTASKS": str((worlds or [world] * world)[rank]),
                        "SLURM_RESTART_COUNT": str(restart), "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": str(port), **(env or {})}
            with (open(self.out / f"out{rank}", "wb") as out,
                  open(self.out / f"err{rank}", "wb") as err):
                self.procs[rank] = subprocess.Popen(args, env=rank_env, stdout=out, stderr=err)

    def wait(self, timeout: float = 30.0) -> list[int]:
        return [proc.wait(timeout=timeout) for proc in self.procs.values()]

    def err(self, rank: int) -> list[str]:
        return (self.out / f"err{rank}").read_text().splitlines()

    def stdout(self, rank: int) -> str:
        return (self.out / f"out{rank}").read_text()

    def logged(self) -> list[str]:
        log = self.base / "steps.log"
        return log.read_text().splitlines() if log.exists() else []

    def cleanup(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait()


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Callable[..., Job]]:
    jobs: list[Job] = []

    def start(world: int, *extra: str, **kwargs: object) -> Job:
        job = Job(tmp_path, world, *extra, **kwargs)  # type: ignore[arg-type]
        jobs.append(job)
        return job

    yield start
    for job in jobs:
        job.cleanup()


def expected_final(world: int, steps: int = STEPS) -> dict[str, object]:
    done = list(range(steps))
    sums = [step * world * (world + 1) // 2 for step in done]
    return {"steps": done, "count": steps, "sum": sum(done), "allreduced": sums,
            "total": sum(sums)}


@pytest.fixture(scope="module")
def reference() -> dict[int, str]:
    """The final state of uninterrupted runs, per world, computed once."""
    return {}


def uninterrupted(reference: dict[int, str], base: Path, world: int) -> str:
    if world not in reference:
        job = Job(base / f"reference{world}", world)
        try:
            assert job.wait() == [0] * world, [job.err(r) for r in range(world)]
        finally:
            job.cleanup()
        reference[world] = (job.base / "final.json").read_text()
    return reference[world]


def complete_checkpoints(base: Path) -> list[Path]:
    return sorted(p for p in (base / "ckpt").glob("ckpt-*") if (p / "COMPLETE").exists())


def assert_one_line(job: Job, rank: int, *words: str) -> str:
    lines = job.err(rank)
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"allreduce.py rank {rank}: "), lines
    for word in words:
        assert word in lines[0], lines
    return lines[0]


@pytest.mark.parametrize("world", [2, 3])
def test_uninterrupted_run(launch: Callable[..., Job], tmp_path: Path,
                           reference: dict[int, str], world: int) -> None:
    # The other ranks get checkpoint and final paths of their own: they must not write there.
    elsewhere = [f"--checkpoint-dir={tmp_path}/others/ckpt", f"--final={tmp_path}/others/f"]
    job = launch(world, per_rank={rank: elsewhere for rank in range(1, world)})
    assert job.wait() == [0] * world, [job.err(r) for r in range(world)]
    final = (tmp_path / "final.json").read_text()
    assert json.loads(final) == expected_final(world)
    reference.setdefault(world, final)
    assert job.logged() == [f"0 {step}" for step in range(STEPS)]
    names = [p.name for p in complete_checkpoints(tmp_path)]
    assert names == [f"ckpt-{n:06d}" for n in range(EVERY, STEPS + 1, EVERY)]
    state = json.loads((tmp_path / "ckpt" / "ckpt-000020" / "state.json").read_text())
    assert state == {"done": list(range(20)), "world": world,
                     "allreduced": expected_final(world)["allreduced"][:20]}
    assert not (tmp_path / "others").exists()
    assert all(not job.err(r) for r in range(world))


def test_single_rank_needs_no_network(launch: Callable[..., Job], tmp_path: Path) -> None:
    job = launch(1, "--master-port=1", env={"MASTER_ADDR": ""}, steps=12)
    assert job.wait() == [0]
    assert json.loads((tmp_path / "final.json").read_text()) == expected_final(1, 12)


@pytest.mark.parametrize("world", [2, 3])
def test_killed_rank_stops_the_others_and_resume_matches(
        launch: Callable[..., Job], tmp_path: Path, reference: dict[int, str],
        world: int) -> None:
    job = launch(world)
    wait_for(lambda: len(job.logged()) >= 25)
    victim = world - 1
    job.procs[victim].kill()
    killed = time.monotonic()
    survivors = [r for r in range(world) if r != victim]
    for rank in survivors:
        assert job.procs[rank].wait(timeout=STEP_TIMEOUT + SLACK) == 3, job.err(rank)
    assert time.monotonic() - killed < STEP_TIMEOUT + SLACK
    line = assert_one_line(job, 0, f"rank {victim} on ", "closed the connection")
    for rank in survivors[1:]:
        assert_one_line(job, rank, "rank 0 gave up", f"rank {victim} on ")

    # Nothing after the last complete checkpoint is committed: no final state, no
    # incomplete checkpoint, and the lost steps are exactly those rank 0 logged since.
    assert not (tmp_path / "final.json").exists()
    assert not [p for p in (tmp_path / "ckpt").iterdir() if not (p / "COMPLETE").exists()]
    newest = complete_checkpoints(tmp_path)[-1]
    done = json.loads((newest / "state.json").read_text())["done"]
    assert done == list(range(len(done))) and len(done) % EVERY == 0
    lost = len(job.logged()) - len(done)
    assert 0 <= lost < EVERY
    assert f"; {lost} step{'' if lost == 1 else 's'} since {newest} lost" in line

    again = launch(world, f"--resume={newest}", restart=1)
    assert again.wait() == [0] * world, [again.err(r) for r in range(world)]
    final = (tmp_path / "final.json").read_text()
    assert final == uninterrupted(reference, tmp_path, world)
    assert [s for s in again.logged() if s.startswith("1 ")][0] == f"1 {len(done)}"


def test_frozen_rank_times_out(launch: Callable[..., Job]) -> None:
    job = launch(3)
    wait_for(lambda: len(job.logged()) >= 15)
    job.procs[1].send_signal(signal.SIGSTOP)
    frozen = time.monotonic()
    assert job.procs[0].wait(timeout=STEP_TIMEOUT + SLACK) == 3, job.err(0)
    assert job.procs[2].wait(timeout=SLACK) == 3, job.err(2)
    assert STEP_TIMEOUT - 0.5 < time.monotonic() - frozen < STEP_TIMEOUT + SLACK
    assert_one_line(job, 0, "no contribution from rank 1 on ", "within 2 s", "dead or hung")
    assert_one_line(job, 2, "rank 0 gave up", "no contribution from rank 1 on ")


def test_killed_rank0_stops_the_others(launch: Callable[..., Job]) -> None:
    job = launch(3)
    wait_for(lambda: len(job.logged()) >= 15)
    job.procs[0].kill()
    for rank in (1, 2):
        assert job.procs[rank].wait(timeout=STEP_TIMEOUT + SLACK) == 3, job.err(rank)
        assert_one_line(job, rank, "rank 0 at 127.0.0.1:", "closed the connection")


def test_frozen_rank0_times_out(launch: Callable[..., Job]) -> None:
    job = launch(2)
    wait_for(lambda: len(job.logged()) >= 15)
    job.procs[0].send_signal(signal.SIGSTOP)
    assert job.procs[1].wait(timeout=STEP_TIMEOUT + SLACK) == 3, job.err(1)
    assert_one_line(job, 1, "no sum from rank 0 at 127.0.0.1:", "within 3.1 s")


def test_sigusr1_to_every_rank(launch: Callable[..., Job], tmp_path: Path,
                               reference: dict[int, str]) -> None:
    job = launch(3)
    wait_for(lambda: len(job.logged()) >= 15)
    for proc in job.procs.values():
        proc.send_signal(signal.SIGUSR1)
    assert job.wait() == [128 + signal.SIGUSR1, 0, 0], [job.err(r) for r in range(3)]
    assert "checkpointed" in job.stdout(0)
    newest = complete_checkpoints(tmp_path)[-1]
    done = json.loads((newest / "state.json").read_text())["done"]
    # Every executed step is in the checkpoint: a stop loses nothing.
    assert job.logged() == [f"0 {step}" for step in done]
    assert newest.name == f"ckpt-{len(done):06d}"
    assert not (tmp_path / "final.json").exists()

    again = launch(3, f"--resume={newest}", restart=1)
    assert again.wait() == [0, 0, 0]
    assert (tmp_path / "final.json").read_text() == uninterrupted(reference, tmp_path, 3)


def test_signal_to_one_rank_stops_all_after_the_same_step(
        launch: Callable[..., Job], tmp_path: Path) -> None:
    job = launch(2)
    wait_for(lambda: len(job.logged()) >= 15)
    job.procs[1].send_signal(signal.SIGTERM)
    assert job.wait() == [128 + signal.SIGTERM, 0], [job.err(r) for r in range(2)]
    newest = complete_checkpoints(tmp_path)[-1]
    assert len(json.loads((newest / "state.json").read_text())["done"]) == len(job.logged())


def test_progress_file_touched_every_step(launch: Callable[..., Job], tmp_path: Path) -> None:
    (tmp_path / "beats").mkdir()
    steps, sleep = 24, 0.05
    pattern = f"{tmp_path}/beats/rank-{{rank}}.alive"
    job = launch(2, f"--sleep={sleep}", steps=steps, env={"SQUALL_PROGRESS_FILE": pattern})
    files = [tmp_path / "beats" / f"rank-{rank}.alive" for rank in range(2)]
    seen: list[set[int]] = [set(), set()]
    while any(proc.poll() is None for proc in job.procs.values()):
        for rank, path in enumerate(files):
            try:
                seen[rank].add(path.stat().st_mtime_ns)
            except FileNotFoundError:
                pass
        time.sleep(0.005)
    assert job.wait() == [0, 0]
    for rank, path in enumerate(files):
        assert path.exists()
        # Sampled at 5 ms, steps of 50 ms: nearly every step's touch is seen.
        assert len(seen[rank]) >= steps // 2, (rank, len(seen[rank]))
        assert path.read_text() == f"{steps:012d}\n"  # the steps done, for "steps lost"
    assert sorted(p.name for p in (tmp_path / "beats").iterdir()) == [f.name for f in files]


def test_progress_file_in_a_missing_directory_warns(launch: Callable[..., Job],
                                                    tmp_path: Path) -> None:
    job = launch(1, steps=3, env={"SQUALL_PROGRESS_FILE": f"{tmp_path}/absent/beat-{{rank}}"})
    assert job.wait() == [0]
    assert_one_line(job, 0, "warning: SQUALL_PROGRESS_FILE=", f"{tmp_path}/absent here",
                    "no heartbeats")
    assert json.loads((tmp_path / "final.json").read_text()) == expected_final(1, 3)


BAD = [
    (["--rank=2", "--world=2"], {}, "rank 2 is not in 0..1"),
    (["--world=0"], {}, "at least 1 rank"),
    (["--checkpoint-every=0"], {}, "--checkpoint-every must be at least 1"),
    (["--steps=-1"], {}, "--steps must be at least 0"),
    (["--step-timeout=0"], {}, "--step-timeout must be a positive"),
    (["--sleep=nan"], {}, "--sleep must be"),
    (["--world=2", "--rank=1"], {"MASTER_ADDR": ""}, "set MASTER_ADDR or --master-addr"),
    (["--master-port=70000"], {}, "port 70000 is not in 1..65535"),
    ([], {"SLURM_PROCID": "one"}, "SLURM_PROCID='one' is not a whole number"),
    (["--resume=/nonexistent/ckpt-000010"], {}, "no such checkpoint directory"),
    (["--bogus"], {}, "unrecognized arguments: --bogus"),
]


@pytest.mark.parametrize(("args", "env", "says"), BAD, ids=[b[2][:28] for b in BAD])
def test_bad_arguments_fail_in_one_line(tmp_path: Path, args: list[str],
                                        env: dict[str, str], says: str) -> None:
    run = subprocess.run(
        [sys.executable, str(PROGRAM), "--steps=3", "--sleep=0",
         f"--checkpoint-dir={tmp_path}/ckpt", f"--final={tmp_path}/final.json", *args],
        env={**os.environ, "SLURM_PROCID": "0", "SLURM_NTASKS": "1",
             "SQUALL_PROGRESS_FILE": "", **env},
        capture_output=True, text=True, timeout=30, check=False)
    assert run.returncode == 2, run.stderr
    assert len(run.stderr.splitlines()) == 1, run.stderr
    assert says in run.stderr
    assert not (tmp_path / "final.json").exists()


def test_incomplete_checkpoint_is_refused(launch: Callable[..., Job], tmp_path: Path) -> None:
    partial = tmp_path / "ckpt" / "ckpt-000010"
    partial.mkdir(parents=True)
    (partial / "state.json").write_text(json.dumps({"done": list(range(10))}))
    job = launch(2, f"--resume={partial}")
    assert job.wait() == [2, 2]
    for rank in (0, 1):
        assert_one_line(job, rank, "has no COMPLETE marker")


def test_nobody_to_talk_to(launch: Callable[..., Job]) -> None:
    member = launch(2, "--connect-timeout=0.5", ranks=[1])
    assert member.wait() == [3]
    assert_one_line(member, 1, "could not reach rank 0 at 127.0.0.1:", "within 0.5 s",
                    "Connection refused")
    root = launch(3, "--connect-timeout=0.5", ranks=[0], restart=1)
    assert root.wait() == [3]
    assert_one_line(root, 0, "ranks 1, 2 did not join at 127.0.0.1:", "within 0.5 s")


def test_ranks_that_disagree_on_the_world(launch: Callable[..., Job]) -> None:
    job = launch(2, worlds=[2, 3])
    assert job.wait() == [2, 2]
    assert_one_line(job, 0, "rank 1 on ", "runs as rank 1 of 3, rank 0 with a world of 2")
    assert_one_line(job, 1, "rank 0 gave up", "runs as rank 1 of 3")
