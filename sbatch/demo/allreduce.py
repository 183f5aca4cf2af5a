#!/usr/bin/env python3
"""The coupled demo program: every step is an all-reduce over TCP among all ranks.

Like count.py, but the ranks depend on each other as in data-parallel training: each step
every rank sends its contribution (step number x (rank + 1)) to rank 0, which adds them up
and sends the sum back, so a step's sum exists only when every rank took part. A dead or
frozen peer stops every rank at the next all-reduce, as NCCL does: after --step-timeout
seconds (default 1800, NCCL's 30 minutes) or at once when its connection closes, a rank
exits 3 with one line naming the peer it waited for. Rank 0 tells the others why before it
goes; they wait for rank 0 a little longer (1 s + 5 % of --step-timeout) to hear it.
Nothing is committed after the last complete checkpoint: the steps since then are lost,
and rank 0's line says how many.

Ranks and rendezvous: rank = --rank or SLURM_PROCID, world = --world or SLURM_NTASKS (1 if
unset: no network). Rank 0 listens on MASTER_ADDR:MASTER_PORT (--master-addr and
--master-port override the environment; the port defaults to 29500, torchrun's); the name
is resolved with getaddrinfo and must be an address of rank 0's node. The others connect,
retrying for up to --connect-timeout seconds (default 60), as torch's TCPStore does; rank 0
waits as long for all of them, checks that they agree on the world and the starting step,
and starts the first step. Wire protocol (one ASCII line each, newline-terminated):
``hello squall-allreduce/1 RANK WORLD START HOST`` then ``ready WORLD START``; each step
``step K VALUE STOP`` to rank 0 and ``sum K TOTAL STOP`` back, or ``abort CODE TEXT``.

Checkpoints as count.py's: rank 0 (only) writes one every --checkpoint-every K steps under
--checkpoint-dir as ``ckpt-<steps done>/`` (``--name``): ``state.json`` (the steps done, each
step's all-reduced sum, the world) is written to a temporary file, fsynced and renamed, and
only then the ``COMPLETE`` marker the same way. ``--resume PATH`` continues from the
complete checkpoint at PATH; every rank reads it (a shared filesystem) to know where to
start. At the end rank 0 writes ``--final`` atomically: the steps, their count and sum, each
step's all-reduced sum and their total, identical to what an uninterrupted run with the
same world writes. With ``--log`` rank 0 appends ``<SLURM_RESTART_COUNT> <step>`` per step
it executes.

SIGTERM or SIGUSR1 stop the program after a step: a rank's signal travels in the step's
all-reduce (STOP), so every rank stops after the same step even when the signal reached
them at different steps, or only one of them. Rank 0 then checkpoints and exits 128 + the
signal number ("stopped, not finished"); the others exit 0, so that srun --kill-on-bad-exit
does not end the step while rank 0 is still writing.

Heartbeats for the job's failure detector: when SQUALL_PROGRESS_FILE is set (a path; a
``{rank}`` in it becomes the rank), each rank writes the number of steps it has completed
into that file (a fixed-width decimal line, rewritten in place) after every step: a change
is the heartbeat, and the number lets the supervisor say how many steps a failure cost. If
its directory does not exist (not mounted into the container), or writing fails, a rank
warns once on stderr and runs on.

Exit status: 0 finished (or, on ranks other than 0, stopped by a signal); 1 a local failure
(a checkpoint, the log or --final cannot be written); 2 a bad argument, environment value
or checkpoint, or ranks that disagree on the world or starting step; 3 a peer failed: it
closed its connection, did not answer within --step-timeout, could not be reached or did
not join within --connect-timeout; 128 + signal: rank 0 stopped by a signal, checkpointed.

Python 3 standard library only: it runs on the node image and in the demo container.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import select
import selectors
import signal
import socket
import sys
import time
from typing import Any, NoReturn

PROG = "allreduce.py"
MARKER = "COMPLETE"
PROTOCOL = "squall-allreduce/1"
MAX_LINE = 4096
DEFAULT_PORT = 29500
EXIT_LOCAL, EXIT_USAGE, EXIT_PEER = 1, 2, 3
stop_signal = 0


class Failure(Exception):
    """An expected failure: one line on stderr and an exit status, never a traceback."""

    code = EXIT_LOCAL


class Usage(Failure):
    """A bad argument, environment value or checkpoint, or ranks that disagree."""

    code = EXIT_USAGE


class PeerFailure(Failure):
    """A peer closed its connection, timed out, could not be reached or spoke nonsense."""

    code = EXIT_PEER


def on_signal(signum: int, _frame: object) -> None:
    global stop_signal
    stop_signal = signum


# --- checkpoints and files, as in count.py ---------------------------------------------

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


def checkpoint(directory: str, done: list[int], sums: list[int], world: int,
               name: str) -> str:
    path = os.path.join(directory, name.format(step=len(done)))
    try:
        os.makedirs(path, exist_ok=True)
        state = {"done": done, "allreduced": sums, "world": world}
        write_atomic(os.path.join(path, "state.json"), json.dumps(state))
        write_atomic(os.path.join(path, MARKER), "complete\n")
    except OSError as e:
        raise Failure(f"cannot write checkpoint {path}: {e.strerror or e}") from None
    return path


def load(path: str) -> tuple[list[int], list[int], int | None]:
    """The steps done, their all-reduced sums and the world of the checkpoint at path."""
    if not os.path.isdir(path):
        raise Usage(f"--resume {path}: no such checkpoint directory")
    if not os.path.exists(os.path.join(path, MARKER)):
        raise Usage(f"--resume {path} has no {MARKER} marker: resume only from complete "
                    "checkpoints")
    try:
        with open(os.path.join(path, "state.json"), encoding="utf-8") as fh:
            state = json.load(fh)
    except (OSError, ValueError) as e:
        raise Usage(f"--resume {path}: cannot read state.json: {e}") from None
    done = state.get("done") if isinstance(state, dict) else None
    sums = state.get("allreduced") if isinstance(state, dict) else None
    world = state.get("world") if isinstance(state, dict) else None
    if (not isinstance(done, list) or not isinstance(sums, list) or len(done) != len(sums)
            or done != list(range(len(done)))
            or not all(type(s) is int for s in sums)
            or not (world is None or type(world) is int)):
        raise Usage(f"--resume {path}: state.json is not a state written by {PROG}")
    return done, sums, world


def final_state(done: list[int], sums: list[int]) -> str:
    return json.dumps({"steps": done, "count": len(done), "sum": sum(done),
                       "allreduced": sums, "total": sum(sums)}) + "\n"


def report(path: str, steps_done: int) -> None:
    """The progress file: the steps done, always the same width, so that a reader never
    sees a shorter file or a half-written number."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        os.pwrite(fd, f"{steps_done:012d}\n".encode(), 0)
    finally:
        os.close(fd)


# --- connections ------------------------------------------------------------------------

def where(sockaddr: tuple[object, ...]) -> str:
    host, port = str(sockaddr[0]), sockaddr[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def why(e: OSError) -> str:
    return e.strerror or str(e) or type(e).__name__


def lost(label: str, e: OSError) -> PeerFailure:
    if isinstance(e, ConnectionError):  # reset, broken pipe: the process is gone
        return PeerFailure(f"{label} closed the connection ({why(e)}): it died or gave up")
    return PeerFailure(f"lost the connection to {label}: {why(e)}")


class Conn:
    """One TCP connection carrying newline-terminated ASCII lines."""

    def __init__(self, sock: socket.socket, rank: int, label: str) -> None:
        self.sock = sock
        self.rank = rank
        self.label = label  # "rank 2 on node3 (10.0.0.3:41234)", "rank 0 at node1:29500"
        self.buf = bytearray()
        self.eof = False
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def fill(self) -> None:
        """One recv into the buffer; the socket is readable or has a timeout set."""
        data = self.sock.recv(65536)
        if not data:
            self.eof = True
        self.buf += data
        if len(self.buf) > MAX_LINE and b"\n" not in self.buf:
            raise PeerFailure(f"{self.label} sent a line longer than {MAX_LINE} bytes: "
                              f"not an {PROG} rank")

    def pop_line(self) -> str | None:
        end = self.buf.find(b"\n")
        if end < 0:
            return None
        line = self.buf[:end].decode("ascii", "replace").strip()
        del self.buf[:end + 1]
        return line

    def read_line(self, deadline: float) -> str | None:
        """The next line, or None at the deadline; PeerFailure when the peer is gone."""
        while True:
            line = self.pop_line()
            if line is not None:
                return line
            if self.eof:
                raise PeerFailure(f"{self.label} closed the connection: it died or gave up")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self.sock.settimeout(remaining)
            try:
                self.fill()
            except TimeoutError:
                continue
            except OSError as e:
                raise lost(self.label, e) from None

    def send(self, line: str, timeout: float) -> None:
        self.sock.settimeout(max(timeout, 0.001))
        try:
            self.sock.sendall(line.encode("ascii", "replace") + b"\n")
        except TimeoutError:
            raise PeerFailure(f"{self.label} did not take data within {timeout:g} s: it is "
                              "hung") from None
        except OSError as e:
            raise lost(self.label, e) from None

    def close(self) -> None:
        self.sock.close()


def whole(fields: list[str]) -> list[int] | None:
    """The fields as whole numbers, or None when one is not."""
    try:
        return [int(field) for field in fields]
    except ValueError:
        return None


def one_line(text: str) -> str:
    return " ".join(text.split())


def abort_all(conns: list[Conn], code: int, text: str) -> None:
    """Tell the peers why rank 0 gives up, best effort, within about a second."""
    for conn in conns:
        try:
            conn.sock.settimeout(0.5)
            conn.sock.sendall(f"abort {code} {one_line(text)}\n".encode("ascii", "replace"))
            # Half-close, then read until the peer closes: closing a socket with unread
            # data would send a reset and could drop the abort line on the way.
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
    deadline = time.monotonic() + 1.0
    open_ = {conn.sock: conn for conn in conns if not conn.eof}
    while open_ and (remaining := deadline - time.monotonic()) > 0:
        try:
            readable, _, _ = select.select(list(open_), [], [], remaining)
        except (OSError, ValueError):
            break
        for sock in readable:
            conn = open_[sock]
            try:
                conn.fill()
                conn.buf.clear()
            except (OSError, PeerFailure):
                conn.eof = True
            if conn.eof:
                del open_[sock]
    for conn in conns:
        conn.close()


def resolve(host: str, port: int) -> list[Any]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise OSError(e.errno, f"cannot resolve {host}: {why(e)}") from None
    return [info for info in infos if info[0] in (socket.AF_INET, socket.AF_INET6)]


def listen(host: str, port: int, timeout: float) -> socket.socket:
    """Rank 0's listening socket on host:port, retrying while the port is still taken."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        try:
            infos = resolve(host, port)
            last = f"{host} has no IPv4 or IPv6 address"
        except OSError as e:
            infos, last = [], why(e)
        for family, kind, proto, _name, sockaddr in infos:
            sock = socket.socket(family, kind, proto)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(sockaddr)
                sock.listen(socket.SOMAXCONN)
                return sock
            except OSError as e:
                sock.close()
                if e.errno == errno.EADDRNOTAVAIL:
                    address = where(sockaddr)
                    named = f"{host}:{port}" + ("" if address == f"{host}:{port}"
                                                else f" ({address})")
                    raise Usage(f"cannot listen on {named}: {why(e)}: MASTER_ADDR must name "
                                "rank 0's node") from None
                last = f"cannot listen on {where(sockaddr)}: {why(e)}"
        if time.monotonic() + delay > deadline:
            raise PeerFailure(f"could not listen on {host}:{port} within "
                              f"{timeout:g} s: {last}")
        time.sleep(delay)
        delay = min(delay * 2, 1.0)


def ranks_text(conns: list[Conn]) -> str:
    return ", ".join(conn.label for conn in sorted(conns, key=lambda c: c.rank))


class Root:
    """Rank 0: accepts every other rank, then adds up their contributions each step."""

    def __init__(self, host: str, port: int, world: int, start: int, args: argparse.Namespace
                 ) -> None:
        self.world = world
        self.step_timeout = args.step_timeout
        self.peers: dict[int, Conn] = {}
        self.rejected: list[Conn] = []  # told why before rank 0 gives up
        self.sel = selectors.DefaultSelector()
        listener = listen(host, port, args.connect_timeout)
        try:
            self.accept(listener, host, port, start, args.connect_timeout)
        except Failure as e:
            abort_all([*self.peers.values(), *self.rejected], e.code, str(e))
            raise
        finally:
            listener.close()
        for conn in self.peers.values():
            conn.send(f"ready {world} {start}", self.step_timeout)

    def accept(self, listener: socket.socket, host: str, port: int, start: int,
               timeout: float) -> None:
        deadline = time.monotonic() + timeout
        self.sel.register(listener, selectors.EVENT_READ, None)
        fresh: list[Conn] = []
        try:
            while len(self.peers) < self.world - 1:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    missing = [r for r in range(1, self.world) if r not in self.peers]
                    who = ", ".join(str(r) for r in missing)
                    raise PeerFailure(f"rank{'s' if len(missing) > 1 else ''} {who} did not "
                                      f"join at {host}:{port} within {timeout:g} s")
                for key, _events in self.sel.select(remaining):
                    if key.data is None:
                        try:
                            sock, sockaddr = listener.accept()
                        except OSError:
                            continue
                        sock.settimeout(self.step_timeout)
                        conn = Conn(sock, -1, where(sockaddr))
                        fresh.append(conn)
                        self.sel.register(sock, selectors.EVENT_READ, conn)
                    else:
                        self.hello(key.data, start, fresh)
        finally:
            self.sel.unregister(listener)
            for conn in fresh:
                self.sel.unregister(conn.sock)
                conn.close()

    def hello(self, conn: Conn, start: int, fresh: list[Conn]) -> None:
        try:
            conn.fill()
        except (OSError, PeerFailure):
            conn.eof = True
        line = conn.pop_line()
        if conn.rank >= 0:  # joined already: it may only wait for "ready"
            if conn.eof or line is not None or conn.buf:
                raise PeerFailure(f"{conn.label} left before every rank joined")
            return
        if line is None and not conn.eof:
            return
        fields = (line or "").split()
        numbers = whole(fields[2:5])
        if len(fields) != 6 or fields[:2] != ["hello", PROTOCOL] or numbers is None:
            print(f"{PROG} rank 0: ignored a connection from {conn.label}: not an {PROG} "
                  "rank", file=sys.stderr, flush=True)
            fresh.remove(conn)
            self.sel.unregister(conn.sock)
            conn.close()
            return
        (rank, world, their_start), host = numbers, fields[5]
        fresh.remove(conn)
        conn.rank, conn.label = rank, f"rank {rank} on {host} ({conn.label})"
        if not 1 <= rank < self.world or world != self.world:
            self.rejected.append(conn)
            raise Usage(f"{conn.label} runs as rank {rank} of {world}, rank 0 with a world "
                        f"of {self.world}: start every rank with the same SLURM_NTASKS or "
                        "--world")
        if rank in self.peers:
            self.rejected.append(conn)
            raise Usage(f"two processes claim rank {rank}: {self.peers[rank].label} and "
                        f"{conn.label}")
        self.peers[rank] = conn
        if their_start != start:
            raise Usage(f"{conn.label} starts at step {their_start}, rank 0 at step {start}: "
                        "resume every rank from the same checkpoint")

    def allreduce(self, step: int, value: int, stop: int) -> tuple[int, int]:
        deadline = time.monotonic() + self.step_timeout
        total, agreed = value, stop
        waiting = dict(self.peers)

        def take(conn: Conn) -> None:
            nonlocal total, agreed
            line = conn.pop_line()
            if line is None:
                if conn.eof:
                    raise PeerFailure(f"step {step}: {conn.label} closed the connection: it "
                                      "died or gave up")
                return
            fields = line.split()
            numbers = whole(fields[1:])
            if (conn.rank not in waiting or len(fields) != 4 or fields[0] != "step"
                    or numbers is None or numbers[0] != step):
                raise PeerFailure(f"step {step}: {conn.label} sent {line[:60]!r}, not its "
                                  f"contribution to step {step}")
            total += numbers[1]
            agreed = max(agreed, numbers[2])
            del waiting[conn.rank]

        for conn in list(waiting.values()):
            take(conn)
        while waiting:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise PeerFailure(f"step {step}: no contribution from "
                                  f"{ranks_text(list(waiting.values()))} within "
                                  f"{self.step_timeout:g} s: dead or hung")
            for key, _events in self.sel.select(remaining):
                conn = key.data
                try:
                    conn.fill()
                except OSError as e:
                    raise PeerFailure(f"step {step}: {lost(conn.label, e)}") from None
                if conn.eof:
                    self.sel.unregister(conn.sock)  # never readable again: no busy loop
                take(conn)
        for conn in self.peers.values():
            conn.send(f"sum {step} {total} {agreed}", max(deadline - time.monotonic(), 1.0))
        return total, agreed

    def abort(self, code: int, text: str) -> None:
        abort_all(list(self.peers.values()), code, text)


def grace(step_timeout: float) -> float:
    """How much longer than rank 0 the others wait for a step, to hear rank 0's reason."""
    return round(1 + step_timeout / 20, 3)


class Member:
    """A rank other than 0: connects to rank 0 and asks it for each step's sum."""

    def __init__(self, host: str, port: int, rank: int, world: int, start: int,
                 args: argparse.Namespace) -> None:
        self.step_timeout = args.step_timeout
        self.conn = self.connect(host, port, rank, args.connect_timeout)
        self.conn.send(f"hello {PROTOCOL} {rank} {world} {start} "
                       f"{''.join(socket.gethostname().split()) or 'unknown'}", self.step_timeout)
        # Rank 0 waits up to --connect-timeout from before this connection for the others.
        line = self.conn.read_line(time.monotonic() + args.connect_timeout + 5)
        if line is None:
            raise PeerFailure(f"{self.conn.label} took the connection but did not start "
                              f"within {args.connect_timeout + 5:g} s")
        self.check_abort(line, "before the first step")
        if line.split() != ["ready", str(world), str(start)]:
            raise PeerFailure(f"{self.conn.label} answered {line[:60]!r}: not an {PROG} "
                              "rank 0")

    @staticmethod
    def connect(host: str, port: int, rank: int, timeout: float) -> Conn:
        deadline = time.monotonic() + timeout
        delay, noted, last = 0.02, False, ""
        while True:
            try:
                infos = resolve(host, port)
                last = f"{host} has no IPv4 or IPv6 address"
            except OSError as e:
                infos, last = [], why(e)
            for family, kind, proto, _name, sockaddr in infos:
                sock = socket.socket(family, kind, proto)
                sock.settimeout(min(max(deadline - time.monotonic(), 0.1), 5.0))
                try:
                    sock.connect(sockaddr)
                except OSError as e:
                    sock.close()
                    last = f"{where(sockaddr)}: {why(e)}"
                    continue
                return Conn(sock, 0, f"rank 0 at {host}:{port}")
            if time.monotonic() + delay > deadline:
                raise PeerFailure(f"could not reach rank 0 at {host}:{port} within "
                                  f"{timeout:g} s: {last}")
            if not noted:
                print(f"{PROG} rank {rank}: rank 0 at {host}:{port} not reachable yet "
                      f"({last}); retrying for up to {timeout:g} s", flush=True)
                noted = True
            time.sleep(delay)
            delay = min(delay * 2, 0.5)

    def check_abort(self, line: str, when: str) -> None:
        fields = line.split(maxsplit=2)
        if fields and fields[0] == "abort":
            code = int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else EXIT_PEER
            error = Usage if code == EXIT_USAGE else PeerFailure
            text = fields[2] if len(fields) > 2 else "?"
            text = text.removeprefix(f"{when}: ")
            raise error(f"{when}: rank 0 gave up: {text}")

    def allreduce(self, step: int, value: int, stop: int) -> tuple[int, int]:
        # A little longer than rank 0 waits: rank 0 knows which rank is missing, and tells.
        wait = self.step_timeout + grace(self.step_timeout)
        deadline = time.monotonic() + wait
        try:
            self.conn.send(f"step {step} {value} {stop}", self.step_timeout)
        except PeerFailure:
            pass  # rank 0 is gone: its abort line, if any, waits to be read below
        try:
            line = self.conn.read_line(deadline)
        except PeerFailure as e:
            raise PeerFailure(f"step {step}: {e}") from None
        if line is None:
            raise PeerFailure(f"step {step}: no sum from {self.conn.label} within "
                              f"{wait:g} s: dead or hung")
        self.check_abort(line, f"step {step}")
        fields = line.split()
        numbers = whole(fields[1:])
        if len(fields) != 4 or fields[0] != "sum" or numbers is None or numbers[0] != step:
            raise PeerFailure(f"step {step}: {self.conn.label} sent {line[:60]!r}, not the "
                              f"sum of step {step}")
        return numbers[1], numbers[2]


# --- arguments --------------------------------------------------------------------------

class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{PROG}: error: {message} (see --help)\n")


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        raise Usage(f"{name}={value!r} is not a whole number") from None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = Parser(prog=PROG, description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, required=True, help="run steps 0..N-1")
    parser.add_argument("--checkpoint-every", "--every", dest="every", type=int, default=5,
                        metavar="K", help="rank 0 checkpoints every K steps (default 5)")
    parser.add_argument("--sleep", type=float, default=0.5,
                        help="seconds of work per step (default 0.5)")
    parser.add_argument("--checkpoint-dir", required=True)
    parser.add_argument("--final", required=True, help="file for the final state")
    parser.add_argument("--log", help="rank 0 appends each executed step here")
    parser.add_argument("--resume", help="checkpoint directory to continue from")
    parser.add_argument("--name", default="ckpt-{step:06d}",
                        help="checkpoint directory name; {step} is the steps done")
    parser.add_argument("--rank", type=int, help="this rank (default SLURM_PROCID or 0)")
    parser.add_argument("--world", type=int, help="number of ranks (default SLURM_NTASKS or 1)")
    parser.add_argument("--master-addr", help="rank 0's host name (default MASTER_ADDR)")
    parser.add_argument("--master-port", type=int,
                        help=f"rank 0's port (default MASTER_PORT or {DEFAULT_PORT})")
    parser.add_argument("--connect-timeout", type=float, default=60.0,
                        help="seconds to reach rank 0, or for all ranks to join (default 60)")
    parser.add_argument("--step-timeout", type=float, default=1800.0,
                        help="seconds to wait for a peer in a step (default 1800)")
    args = parser.parse_args(argv)
    for name, minimum in (("steps", 0), ("every", 1)):
        if getattr(args, name) < minimum:
            flag = "--checkpoint-every" if name == "every" else f"--{name}"
            parser.error(f"{flag} must be at least {minimum}, not {getattr(args, name)}")
    for name in ("sleep", "connect_timeout", "step_timeout"):
        value = getattr(args, name)
        if not value >= 0 or value == float("inf") or (name != "sleep" and value == 0):
            flag = "--" + name.replace("_", "-")
            parser.error(f"{flag} must be a positive number of seconds, not {value:g}")
    try:
        args.name.format(step=0)
    except (KeyError, IndexError, ValueError) as e:
        parser.error(f"--name {args.name!r} is not a name with {{step}} in it: {e}")
    return args


def settings(args: argparse.Namespace) -> tuple[int, int, str, int]:
    rank = args.rank if args.rank is not None else env_int("SLURM_PROCID", 0)
    world = args.world if args.world is not None else env_int("SLURM_NTASKS", 1)
    if world < 1:
        raise Usage(f"the world must be at least 1 rank, not {world} (--world, SLURM_NTASKS)")
    if not 0 <= rank < world:
        raise Usage(f"rank {rank} is not in 0..{world - 1} for a world of {world} "
                    "(--rank, SLURM_PROCID)")
    host = args.master_addr or os.environ.get("MASTER_ADDR", "").strip()
    port = args.master_port if args.master_port is not None else env_int("MASTER_PORT",
                                                                          DEFAULT_PORT)
    if world > 1 and not host:
        raise Usage(f"a world of {world} needs rank 0's host name: set MASTER_ADDR or "
                    "--master-addr")
    if not 1 <= port <= 65535:
        raise Usage(f"port {port} is not in 1..65535 (--master-port, MASTER_PORT)")
    return rank, world, host, port


def progress_file(rank: int) -> str | None:
    pattern = os.environ.get("SQUALL_PROGRESS_FILE", "")
    if not pattern:
        return None
    path = pattern.replace("{rank}", str(rank))
    parent = os.path.dirname(path) or "."
    if not os.path.isdir(parent):
        # A heartbeat directory not mounted into the container must not stop the training:
        # say so once; the job then only misses the hang detection.
        print(f"{PROG} rank {rank}: warning: SQUALL_PROGRESS_FILE={pattern}: no directory "
              f"{parent} here (not mounted?): no heartbeats", file=sys.stderr, flush=True)
        return None
    return path


# --- the program ------------------------------------------------------------------------

class Trail:
    """What a step leaves behind: rank 0's line in --log, every rank's heartbeat."""

    def __init__(self, args: argparse.Namespace, rank: int, restart: str) -> None:
        self.args, self.rank, self.restart = args, rank, restart
        self.heartbeat = progress_file(rank)
        self.log = None
        self.warned = False
        if rank == 0:
            try:
                os.makedirs(args.checkpoint_dir, exist_ok=True)
                self.log = open(args.log, "a", encoding="utf-8") if args.log else None
            except OSError as e:
                raise Failure(f"{e.filename}: {why(e)}") from None

    def step(self, step: int) -> None:
        if self.log:
            try:
                self.log.write(f"{self.restart} {step}\n")
                self.log.flush()
            except OSError as e:
                raise Failure(f"cannot write --log {self.args.log}: {why(e)}") from None
        if self.heartbeat:
            try:
                report(self.heartbeat, step + 1)
            except OSError as e:
                if not self.warned:
                    print(f"{PROG} rank {self.rank}: warning: cannot write {self.heartbeat}: "
                          f"{why(e)}", file=sys.stderr, flush=True)
                    self.warned = True


def run(args: argparse.Namespace, rank: int, world: int, host: str, port: int) -> int:
    restart = os.environ.get("SLURM_RESTART_COUNT", "0")
    done, sums, saved_world = load(args.resume) if args.resume else ([], [], None)
    start = len(done)
    if saved_world is not None and saved_world != world:
        print(f"{PROG} rank {rank}: note: {args.resume} was written by a world of "
              f"{saved_world}, resuming with {world}: sums differ from then on", flush=True)
    trail = Trail(args, rank, restart)
    print(f"{PROG} rank {rank}/{world}: restart {restart}, starting at step {start}",
          flush=True)
    group: Root | Member | None = None
    if world > 1:
        group = (Root(host, port, world, start, args) if rank == 0
                 else Member(host, port, rank, world, start, args))
    last_saved = (args.resume, start) if args.resume else ("the start", 0)
    try:
        for step in range(start, args.steps):
            time.sleep(args.sleep)
            value = step * (rank + 1)
            total, agreed = group.allreduce(step, value, stop_signal) if group else \
                (value, stop_signal)
            done.append(step)
            sums.append(total)
            trail.step(step)
            if agreed:
                if rank != 0:
                    # Not a failure: exit 0 so srun --kill-on-bad-exit leaves rank 0 the time
                    # to finish its checkpoint; rank 0's status tells the script "stopped".
                    return 0
                path = checkpoint(args.checkpoint_dir, done, sums, world, args.name)
                print(f"{PROG}: signal {agreed}: checkpointed {path} after step {step}",
                      flush=True)
                return 128 + agreed
            if rank == 0 and (step + 1) % args.every == 0:
                last_saved = (checkpoint(args.checkpoint_dir, done, sums, world, args.name),
                              len(done))
        if rank == 0:
            try:
                write_atomic(args.final, final_state(done, sums))
            except OSError as e:
                raise Failure(f"cannot write --final {args.final}: {why(e)}") from None
            print(f"{PROG}: finished {len(done)} steps, wrote {args.final}", flush=True)
        return 0
    except Failure as e:
        if rank != 0:
            raise
        lost = len(done) - last_saved[1]
        text = (f"{e}; {lost} step{'' if lost == 1 else 's'} since {last_saved[0]} lost")
        if isinstance(group, Root):
            group.abort(e.code, text)
        raise type(e)(text) from None


def peer_lost(line: str) -> None:
    """Tell the job's supervisor at once that a peer is gone (docs/failover.md): one line
    appended to $SQUALL_PEER_LOST_FILE, when it is set; it then confirms the node is gone
    in about a second instead of waiting for the heartbeat timeout."""
    path = os.environ.get("SQUALL_PEER_LOST_FILE")
    if not path:
        return
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line[:400] + "\n")
    except OSError:
        pass  # the heartbeats still tell


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGUSR1, on_signal)
    args = parse_args(argv)
    who = PROG
    try:
        rank, world, host, port = settings(args)
        who = f"{PROG} rank {rank}"
        return run(args, rank, world, host, port)
    except Failure as e:
        prefix = "error: " if e.code == EXIT_USAGE else ""
        print(f"{who}: {prefix}{one_line(str(e))}", file=sys.stderr, flush=True)
        if e.code == EXIT_PEER:
            peer_lost(f"{who}: {one_line(str(e))}")
        return e.code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
