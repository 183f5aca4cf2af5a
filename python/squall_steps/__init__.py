"""squall_steps: per-rank step timing with named sections, cheap enough to leave on.

Pure Python standard library (3.9 and newer): the squall Enroot hook puts this directory on
a container's ``PYTHONPATH`` (appended, never replacing the user's), so a program in an
image without squall can ``import squall_steps``::

    import squall_steps
    for batch in loader:
        with squall_steps.section("data"):
            batch = next(it)
        ...
        squall_steps.step()          # at each step boundary

Section names are free; ``data``, ``forward``, ``backward``, ``allreduce`` and
``optimizer`` are the ones ``squall steps`` judges by. ``squall_steps.pytorch`` times a
DataLoader and DDP's all-reduce in one line each.

Where: ``$SQUALL_STEPS_DIR/steps.RANK``, else next to the failover's progress files (the
directory of ``$SQUALL_PROGRESS_FILE``). With neither set (not a squall job) every call is
a no-op. The rank is ``RANK``, ``SLURM_PROCID``, ``OMPI_COMM_WORLD_RANK`` or ``PMI_RANK``.

The file, one line each (docs/why-is-my-job-slow.md; any language may write it)::

    squall-steps 1 rank=3 node=node2 pid=4242 start=1733550000.000000
    17 1733550000.532100 0.532100 data=0.120000 forward=0.200000 allreduce=0.100000
    dropped 12

A step line: the step's number, its end (Unix seconds), its length in seconds (since the
previous step's end), then ``name=seconds`` per section timed in it. ``dropped N``: N
lines were not written (the writer was behind). Bounded: past ``SQUALL_STEPS_MAX_BYTES``
(1 MiB) the file is renamed ``steps.RANK.old`` (the one before is replaced) and a new one
starts with its header line: a ring of the recent steps.

Never blocks the step: ``step()`` only puts a tuple on a bounded queue; a writer thread
appends. When the disk is full or the shared file system stalls, lines are dropped
(counted), and the step goes on.
"""

from __future__ import annotations

import atexit
import os
import queue
import socket
import threading
import time
from collections.abc import Mapping

__all__ = ["section", "step", "enabled", "path", "flush", "Recorder"]
FORMAT = 1
QUEUE_MAX = 4096
DEFAULT_MAX_BYTES = 1 << 20
RANK_NAMES = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")

Line = tuple[int, float, float, dict[str, float]]


def _rank(env: Mapping[str, str]) -> int:
    for name in RANK_NAMES:
        value = env.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


def _directory(env: Mapping[str, str]) -> str | None:
    if env.get("SQUALL_STEPS_DIR"):
        return env["SQUALL_STEPS_DIR"]
    progress = env.get("SQUALL_PROGRESS_FILE", "")
    if progress:
        return os.path.dirname(progress) or "."
    return None


class _Writer(threading.Thread):
    """Appends the queued lines to the rank's file; the only code that touches the disk."""

    def __init__(self, path: str, header: str, max_bytes: int) -> None:
        super().__init__(name="squall-steps-writer", daemon=True)
        self.path, self.header, self.max_bytes = path, header, max_bytes
        self.queue: queue.Queue[Line | None] = queue.Queue(QUEUE_MAX)
        self.dropped = 0
        self.fd = -1
        self.size = 0

    def offer(self, line: Line) -> None:
        try:
            self.queue.put_nowait(line)
        except queue.Full:
            self.dropped += 1

    def _open(self) -> None:
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC,
                          0o644)
        self.size = 0
        self._write(self.header)

    def _write(self, text: str) -> None:
        data = text.encode()
        os.write(self.fd, data)
        self.size += len(data)

    def _rotate(self) -> None:
        os.close(self.fd)
        self.fd = -1
        os.replace(self.path, self.path + ".old")
        self._open()

    def _batch(self, first: Line | None) -> tuple[list[Line], bool]:
        lines: list[Line] = [] if first is None else [first]
        done = first is None
        while not done and len(lines) < QUEUE_MAX:
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                break
            if item is None:
                done = True
            else:
                lines.append(item)
        return lines, done

    def _append(self, lines: list[Line]) -> None:
        """Write ``lines``, starting the ring's next part whenever this one is full."""
        if self.fd < 0:
            self._open()
        text = f"dropped {self.dropped}\n" if self.dropped else ""
        for line in lines:
            text += format_line(*line)
            if self.size + len(text) > self.max_bytes:
                self._write(text)
                text = ""
                self._rotate()
        self._write(text)
        self.dropped = 0

    def run(self) -> None:
        done = False
        while not done:
            lines, done = self._batch(self.queue.get())
            try:
                self._append(lines)
            except OSError:
                self.dropped += len(lines)  # full disk, gone directory: count, go on
            finally:
                for _ in range(len(lines) + (1 if done else 0)):
                    self.queue.task_done()


def format_line(number: int, end: float, length: float, sections: dict[str, float]) -> str:
    """One step line of the file format."""
    words = "".join(f" {name}={seconds:.6f}" for name, seconds in sections.items())
    return f"{number} {end:.6f} {length:.6f}{words}\n"


class Recorder:
    """The timing of one process; the module's functions use one made from the
    environment. ``directory`` None: every call is a no-op."""

    def __init__(self, directory: str | None, rank: int = 0, node: str = "",
                 max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.rank = rank
        self.number = 0
        self.sections: dict[str, float] = {}
        self.open: dict[str, float] = {}
        self.last = time.perf_counter()
        self.writer: _Writer | None = None
        self.path: str | None = None
        if directory is None:
            return
        self.path = os.path.join(directory, f"steps.{rank}")
        node = node or socket.gethostname().split(".")[0]
        header = (f"squall-steps {FORMAT} rank={rank} node={node} pid={os.getpid()} "
                  f"start={time.time():.6f}\n")
        self.writer = _Writer(self.path, header, max_bytes)
        self.writer.start()

    def start(self, name: str) -> None:
        if self.writer is not None:
            self.open[name] = time.perf_counter()

    def stop(self, name: str) -> None:
        began = self.open.pop(name, None)
        if began is not None:
            self.sections[name] = self.sections.get(name, 0.0) + time.perf_counter() - began

    def add(self, name: str, seconds: float) -> None:
        """Count ``seconds`` to section ``name`` of the current step (a time measured
        elsewhere, e.g. in a callback)."""
        if self.writer is not None:
            self.sections[name] = self.sections.get(name, 0.0) + seconds

    def step(self) -> None:
        if self.writer is None:
            return
        now = time.perf_counter()
        self.writer.offer((self.number, time.time(), now - self.last, self.sections))
        self.number += 1
        self.last = now
        self.sections = {}

    def flush(self, timeout: float = 2.0) -> None:
        """Wait up to ``timeout`` seconds for the queued lines to be written."""
        writer = self.writer
        if writer is None or not writer.is_alive():
            return
        deadline = time.monotonic() + timeout
        while writer.queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.005)

    def close(self, timeout: float = 2.0) -> None:
        """Write what is queued (up to ``timeout`` seconds) and stop the writer."""
        writer = self.writer
        if writer is None:
            return
        self.writer = None
        try:
            writer.queue.put(None, timeout=timeout)
        except queue.Full:
            return
        writer.join(timeout)


class _Section:
    __slots__ = ("recorder", "name")

    def __init__(self, recorder: Recorder, name: str) -> None:
        self.recorder, self.name = recorder, name

    def __enter__(self) -> None:
        self.recorder.start(self.name)

    def __exit__(self, *exc: object) -> None:
        self.recorder.stop(self.name)


def _from_environment() -> Recorder:
    env = os.environ
    directory = _directory(env)
    max_bytes = env.get("SQUALL_STEPS_MAX_BYTES", "")
    return Recorder(directory, _rank(env), env.get("SLURMD_NODENAME", ""),
                    int(max_bytes) if max_bytes.isdigit() else DEFAULT_MAX_BYTES)


_recorder: Recorder | None = None
_lock = threading.Lock()


def recorder() -> Recorder:
    """This process's recorder, made from the environment at first use."""
    global _recorder
    if _recorder is None:
        with _lock:
            if _recorder is None:
                try:
                    _recorder = _from_environment()
                except OSError:
                    _recorder = Recorder(None)
                atexit.register(_recorder.close)
    return _recorder


class _Nothing:
    __slots__ = ()

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc: object) -> None:
        pass


_NOTHING = _Nothing()


def section(name: str) -> _Section | _Nothing:
    """``with section("data"): ...``: count the block's time to ``name`` in this step."""
    rec = _recorder or recorder()
    return _NOTHING if rec.writer is None else _Section(rec, name)


def step() -> None:
    """Mark a step boundary: the step's line is queued for writing."""
    (_recorder or recorder()).step()


def enabled() -> bool:
    """True in a squall job (the timing is written), False where every call is a no-op."""
    return recorder().writer is not None


def path() -> str | None:
    """This rank's file, or None outside a squall job."""
    return recorder().path


def flush(timeout: float = 2.0) -> None:
    recorder().flush(timeout)
