"""The per-rank files squall_steps writes (format: squall_steps' docstring,
docs/why-is-my-job-slow.md), read back; and where a job's are.

``steps.RANK`` (and the ring's previous part ``steps.RANK.old``) in the job's directory:
``$SQUALL_STEPS_DIR``, else the failover's (``LOG_DIR/.squall-failover-JOBID``, next to
``progress.RANK``). A line that is not in the format is skipped: a file another language
writes, or one cut by a full disk, still reads."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from squall.errors import SetupError, SquallError
from squall.steps.model import Rank, Step

MAX_READ = 8 << 20  # a file larger than this is a file squall_steps did not write
NAME = re.compile(r"steps\.(\d+)(\.old)?$")


def parse(text: str, rank: int, node: str = "") -> Rank:
    """One rank's file (the ring's older part first, when both are given together)."""
    out = Rank(rank=rank, node=node or f"rank{rank}", steps=[])
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        if words[0] == "squall-steps":
            fields = dict(w.split("=", 1) for w in words[2:] if "=" in w)
            out.node = fields.get("node") or out.node
        elif words[0] == "dropped" and len(words) == 2 and words[1].isdigit():
            out.dropped += int(words[1])
        else:
            step = _step(words)
            if step is not None:
                out.steps.append(step)
    return out


def _step(words: list[str]) -> Step | None:
    try:
        number, end, length = int(words[0]), float(words[1]), float(words[2])
        sections = {k: float(v) for k, v in (w.split("=", 1) for w in words[3:])}
    except (ValueError, IndexError):
        return None
    return Step(number, end, length, sections)


def _read(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(MAX_READ).decode(errors="replace")
    except FileNotFoundError:
        return ""
    except OSError as exc:
        raise SetupError(f"cannot read {path}: {exc.strerror}: run as the job's user or "
                         "root") from None


def read_dir(directory: Path) -> list[Rank]:
    """Every rank's recent steps in ``directory``, by rank."""
    try:
        names = os.listdir(directory)
    except OSError as exc:
        raise SetupError(f"cannot list {directory}: {exc.strerror}: give the job's "
                         "directory with --dir (SQUALL_STEPS_DIR, or the failover's)") from None
    ranks = sorted({int(m.group(1)) for m in map(NAME.match, names) if m})
    out = []
    for rank in ranks:
        text = _read(directory / f"steps.{rank}.old") + _read(directory / f"steps.{rank}")
        parsed = parse(text, rank)
        parsed.steps = sorted({s.number: s for s in parsed.steps}.values(),
                              key=lambda s: s.number)
        out.append(parsed)
    return out


def progress(directory: Path) -> dict[int, tuple[int, float]]:
    """The fallback with step boundaries alone: each rank's ``progress.RANK`` (the
    failover's), as (the count it holds, or 0, and when it last changed)."""
    out: dict[int, tuple[int, float]] = {}
    try:
        names = os.listdir(directory)
    except OSError:
        return out
    for name in names:
        m = re.fullmatch(r"progress\.(\d+)", name)
        if not m:
            continue
        try:
            st = os.stat(directory / name)
            words = _read(directory / name).split()
        except OSError:
            continue
        count = int(words[0]) if words and words[0].isdigit() else 0
        out[int(m.group(1))] = (count, st.st_mtime)
    return out


def job_fields(job: str, scontrol: str = "scontrol", timeout: float = 10.0) -> dict[str, str]:
    """``scontrol show job -o JOB``'s fields."""
    try:
        proc = subprocess.run([scontrol, "show", "job", "-o", job], capture_output=True,
                              text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SetupError(f"cannot ask Slurm about job {job} ({exc}): give its directory "
                         "with --dir") from None
    if proc.returncode != 0 or not proc.stdout.strip():
        why = (proc.stderr.strip().splitlines() or ["no answer"])[-1]
        raise SquallError(f"job {job}: {why}: a finished job is forgotten after "
                          "MinJobAge; give its directory with --dir")
    fields: dict[str, str] = {}
    for word in proc.stdout.split():
        key, sep, value = word.partition("=")
        if sep and key not in fields:
            fields[key] = value
    return fields


def job_dir(job: str, fields: dict[str, str]) -> Path:
    """Where the job's files are: the failover's directory next to its log, else
    ``.squall-steps-JOBID`` there, else the job's working directory's."""
    bases = [Path(fields[k]).parent for k in ("StdOut",) if fields.get(k)]
    bases += [Path(fields["WorkDir"])] if fields.get("WorkDir") else []
    tried = []
    for base in bases:
        for name in (f".squall-failover-{job}", f".squall-steps-{job}"):
            tried.append(str(base / name))
            if (base / name).is_dir():
                return base / name
    raise SquallError(f"job {job}: no step files in {' or '.join(tried) or 'its directories'}"
                      ": give the directory of SQUALL_STEPS_DIR with --dir")
