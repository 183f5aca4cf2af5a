"""HTTP for the registry client: urllib3's ``Retry`` under a per-request deadline, and bodies
read with a size cap.

* 429 and 5xx (500, 502, 503, 504) and connection failures are retried by urllib3's
  ``Retry``: capped exponential backoff with jitter, ``Retry-After`` honoured (on 429, 503
  and 413) as long as it fits in the deadline; a server that asks for a longer wait fails at
  once (its answer is returned as it is, and the error says how long it asked for).
  ``SQSHBUILD_RETRIES`` (default 5) tries at most.
* Every request has a total deadline, ``SQSHBUILD_TIMEOUT`` seconds (default 30), retries and
  waits included: a server that accepts the connection and never answers fails within it.
  Manifests, configs and tokens must also arrive in full within it; a blob body may take
  longer, but must bring at least ``SQSHBUILD_LOW_SPEED`` bytes per second (default 1024)
  over each such period. A server that trickles (a byte now and then, never silent for a
  whole read timeout) is cut off by a :class:`BodyWatch`, and the download resumes.
* Manifests, indexes, configs and token answers are read only up to a cap
  (:data:`MANIFEST_CAP`, :data:`CONFIG_CAP`, :data:`TOKEN_CAP`), never whole into memory
  first. A layer blob is bounded by its descriptor's size, or (a descriptor without one)
  by the server's ``Content-Length``, and always by ``SQSHBUILD_MAX_BLOB_SIZE``
  (:func:`blob_bound`). The body of a redirect is never read (requests would read it
  whole): its connection is closed instead.
"""

from __future__ import annotations

import inspect
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.exceptions import HTTPError, MaxRetryError
from urllib3.util.retry import Retry

if TYPE_CHECKING:
    from urllib3.response import BaseHTTPResponse

from squall.errors import SquallError
from squall.sqshbuild import site
from squall.sqshbuild.cache import parse_size

TIMEOUT_ENV = "SQSHBUILD_TIMEOUT"
RETRIES_ENV = "SQSHBUILD_RETRIES"
LOW_SPEED_ENV = "SQSHBUILD_LOW_SPEED"
MAX_BLOB_ENV = "SQSHBUILD_MAX_BLOB_SIZE"
DEFAULT_TIMEOUT = 30.0
DEFAULT_LOW_SPEED = 1024.0  # bytes per second: slower than this, a 10 GB image never arrives
DEFAULT_RETRIES = 5
RETRY_STATUS = (429, 500, 502, 503, 504)
BACKOFF_FACTOR = 0.5  # 0 s, 1 s, 2 s, 4 s ... (urllib3 2: no wait before the first retry)
BACKOFF_MAX = 10.0
BACKOFF_JITTER = 0.5
MANIFEST_CAP = 4 << 20  # the distribution registry's own limit on manifests
CONFIG_CAP = 32 << 20
TOKEN_CAP = 1 << 20
# The default is the site file's (site.DEFAULTS: 16 GiB); a registry's larger layers need
# max_blob_size in /etc/squall/sqshbuild.toml.
DEFAULT_MAX_BLOB = site.DEFAULTS["max_blob_size"]
_SMALL_ERROR_BODY = 64 << 10
_PIECE_1_26 = 16 << 10  # urllib3 1.26 (no read1): reads short enough for the BodyWatch


def env_number(name: str, default: float) -> float:
    raw = os.environ.get(name, "")
    if not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SquallError(f"{name}={raw!r} is not a number") from None
    if value <= 0:
        raise SquallError(f"{name}={raw!r}: give a number above 0")
    return value


def request_timeout() -> float:
    """Seconds one request may take, retries included (``SQSHBUILD_TIMEOUT``)."""
    return env_number(TIMEOUT_ENV, DEFAULT_TIMEOUT)


def low_speed() -> float:
    """Bytes per second a blob body must bring, averaged over each request timeout."""
    return env_number(LOW_SPEED_ENV, DEFAULT_LOW_SPEED)


def env_size(name: str, default: int) -> int:
    """A size from the environment (``64G``, ``500M``, bytes), above 0."""
    raw = os.environ.get(name, "")
    if not raw.strip():
        return default
    try:
        value = parse_size(raw)
    except SquallError:
        raise SquallError(f"{name}={raw!r} is not a size: give e.g. 64G, 500M or a number "
                          "of bytes") from None
    if value <= 0:
        raise SquallError(f"{name}={raw!r}: give a size above 0, e.g. 64G")
    return value


def human(n: float) -> str:
    """``68719476736`` -> ``64 GiB``, for messages that give the byte count too."""
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "bytes" or n == int(n) else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def short_digest(digest: str) -> str:
    """``sha256:`` and the first 12 hex digits, for one-line messages."""
    algo, _, hexpart = digest.partition(":")
    return f"{algo}:{hexpart[:12]}"


def max_blob_size() -> tuple[int, str]:
    """The most bytes a layer blob may have, whatever its descriptor says, and the setting
    that says so (the site file's max_blob_size, lowered by SQSHBUILD_MAX_BLOB_SIZE)."""
    return site.load().limit("max_blob_size", MAX_BLOB_ENV)


def blob_bound(digest: str, size: int, where: str) -> int:
    """The most bytes the blob ``digest`` may bring: its descriptor's ``size``, or the site
    maximum when the descriptor gives none (0). A size above the maximum is refused here,
    before anything is downloaded."""
    most, setting = max_blob_size()
    if size > most:
        raise SquallError(
            f"layer {short_digest(digest)} of {where} is {size} bytes ({human(size)}) by its "
            f"manifest, more than the {most} ({human(most)}) allowed by {setting}: "
            f"raise {setting} if the image is real")
    return size if size > 0 else most


def too_long(digest: str, where: str, bound: int, length: int | None = None) -> str:
    """What to say about a blob without a size in its descriptor that brings (or, by its
    ``Content-Length``, would bring) more than ``bound`` bytes."""
    got = (f"is {length} bytes by the registry's Content-Length" if length is not None else
           "goes on past that")
    setting = max_blob_size()[1]
    return (f"layer {short_digest(digest)} of {where} names no size in its manifest and "
            f"{got}, more than the {bound} ({human(bound)}) allowed by {setting}: the "
            f"download was stopped; the registry is broken or hostile, or raise "
            f"{setting} if the image is real")


def retries() -> int:
    return max(1, int(env_number(RETRIES_ENV, DEFAULT_RETRIES)))


def http_timeout() -> tuple[float, float]:
    """(connect, read) for requests: the read timeout is the longest silence allowed."""
    total = request_timeout()
    return (min(10.0, total), total)


def deadline() -> float:
    return time.monotonic() + request_timeout()


class RateLimited(Exception):
    """The server asked to wait longer than the deadline allows."""


class DeadlineRetry(Retry):
    """urllib3's ``Retry`` that also gives up at a monotonic deadline, never waits past it,
    and does not drain a large or endless error body before retrying."""

    def __init__(self, *args: Any, deadline: float | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.deadline = deadline
        self.last_retry_after: float | None = None

    def new(self, **kw: Any) -> DeadlineRetry:
        new = super().new(**kw)
        new.deadline = self.deadline
        new.last_retry_after = self.last_retry_after
        return new

    def remaining(self) -> float:
        return float("inf") if self.deadline is None else self.deadline - time.monotonic()

    def is_exhausted(self) -> bool:
        return super().is_exhausted() or self.remaining() <= 0

    def get_backoff_time(self) -> float:
        return max(0.0, min(super().get_backoff_time(), self.remaining()))

    def increment(self, method: str | None = None, url: str | None = None,
                  response: BaseHTTPResponse | None = None, error: Exception | None = None,
                  _pool: Any = None, _stacktrace: Any = None) -> DeadlineRetry:
        if response is not None:
            wait = self.get_retry_after(response)
            if wait is not None and wait > self.remaining():
                self.last_retry_after = wait
                raise MaxRetryError(_pool, url or "", RateLimited(f"Retry-After {wait:g} s"))
            length = response.headers.get("Content-Length", "")
            if not length.isdigit() or int(length) > _SMALL_ERROR_BODY:
                response.close()  # nothing worth reading: do not let urllib3 drain it
        new = super().increment(method, url, response, error, _pool, _stacktrace)
        assert isinstance(new, DeadlineRetry)
        return new


_RETRY_ARGS = set(inspect.signature(Retry.__init__).parameters)


def policy(tries: int) -> DeadlineRetry:
    extra: dict[str, float] = {}
    if "backoff_max" in _RETRY_ARGS:  # urllib3 2 (urllib3 1.26, EL9: no jitter, 120 s cap)
        extra = {"backoff_max": BACKOFF_MAX, "backoff_jitter": BACKOFF_JITTER}
    return DeadlineRetry(total=tries, connect=tries, read=tries, status=tries, other=0,
                         redirect=False, status_forcelist=RETRY_STATUS,
                         allowed_methods=frozenset({"GET", "HEAD"}),
                         backoff_factor=BACKOFF_FACTOR, respect_retry_after_header=True,
                         raise_on_status=False, raise_on_redirect=False, **extra)


class DeadlineAdapter(HTTPAdapter):
    """Gives every request a fresh retry budget ending at its own deadline."""

    def __init__(self, tries: int) -> None:
        self.tries = tries
        super().__init__(max_retries=policy(tries))

    def send(self, request: requests.PreparedRequest, *args: Any,
             **kwargs: Any) -> requests.Response:
        retry = policy(self.tries)
        retry.deadline = deadline()
        self.max_retries = retry
        return super().send(request, *args, **kwargs)


def new_session() -> requests.Session:
    session = requests.Session()
    adapter = DeadlineAdapter(retries())
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    session.headers["User-Agent"] = "squall-sqshbuild/0.1"
    session.hooks["response"].append(_skip_redirect_body)
    return session


def _skip_redirect_body(resp: requests.Response, *args: Any, **kwargs: Any) -> None:
    """requests reads a redirect's body whole before it follows the redirect (an endless
    one: until memory runs out). Its body says nothing the Location header does not: an
    empty one is taken as it is, any other one is not read and its connection closed."""
    if not resp.is_redirect or resp.headers.get("Content-Length", "").strip() == "0":
        return
    resp.raw.close()  # urllib3 does not put a closed connection back in the pool
    resp._content = b""  # what resolve_redirects reads instead of the socket


def describe(exc: BaseException) -> str:
    """A short reason for a requests/urllib3 failure, without URLs or headers."""
    text = str(exc)
    if isinstance(exc, requests.Timeout) or "timed out" in text.lower():
        return f"no answer within {request_timeout():g} s ({TIMEOUT_ENV})"
    if "Connection refused" in text:
        return "connection refused"
    if "Name or service not known" in text or "NameResolution" in text:
        return "unknown host name"
    return type(exc).__name__


def read_capped(resp: requests.Response, cap: int, what: str, until: float) -> bytes:
    """The body of a streamed response, at most ``cap`` bytes and by ``until``."""
    length = resp.headers.get("Content-Length", "")
    if length.isdigit() and int(length) > cap:
        resp.close()
        raise SquallError(f"{what} is {int(length)} bytes, more than the {cap} allowed: the "
                          "registry is broken or hostile")
    data = bytearray()
    late = SquallError(f"{what} did not arrive within {request_timeout():g} s "
                       f"({TIMEOUT_ENV}): the registry is too slow or stuck")
    watch = BodyWatch(resp, request_timeout(), until=until)
    try:
        with watch:
            for chunk in resp.iter_content(64 << 10):
                data += chunk
                if len(data) > cap:
                    raise SquallError(f"{what} is larger than the {cap} bytes allowed: the "
                                      "registry is broken or hostile")
                if time.monotonic() > until:
                    raise late
    except requests.RequestException as exc:
        if watch.why:
            raise late from None
        raise SquallError(f"the connection broke while reading {what} ({describe(exc)}): "
                          "try again") from None
    finally:
        resp.close()
    if watch.why:  # urllib3 1.26 may end a cut body without an error
        raise late
    return bytes(data)


class BodyWatch:
    """Watches a streamed body from a thread of its own and cuts its connection (the socket
    shut down, so the read blocked on it ends with an error) when the body is too slow:
    ``until`` (a monotonic time) passed, or fewer than ``least`` bytes (:meth:`add`) came
    in one ``window`` of seconds. A read timeout cannot see this: it only bounds the silence
    between two reads, and each read waits for a whole chunk. ``why`` says why it was cut.
    Use as a context manager around the reads."""

    def __init__(self, resp: requests.Response, window: float, least: int = 0,
                 until: float | None = None) -> None:
        self.window, self.least, self.until = window, least, until
        self.got = 0
        self.why = ""
        self._sock = _socket_of(resp)
        self._done = threading.Event()

    def __enter__(self) -> BodyWatch:
        if self._sock is not None:
            threading.Thread(target=self._run, name="body-watch", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()

    def add(self, n: int) -> None:
        self.got += n

    def _run(self) -> None:
        seen = 0
        while True:
            wait = self.window
            if self.until is not None:
                wait = min(wait, max(0.0, self.until - time.monotonic()))
            if self._done.wait(wait):
                return
            if self.until is not None and time.monotonic() >= self.until:
                return self._cut(f"not all there within {request_timeout():g} s "
                                 f"({TIMEOUT_ENV})")
            if self.least and self.got - seen < self.least:
                return self._cut(f"{self.got - seen} bytes in {self.window:g} s, slower than "
                                 f"{self.least / self.window:g} bytes/s ({LOW_SPEED_ENV})")
            seen = self.got

    def _cut(self, why: str) -> None:
        self.why = why
        try:
            assert self._sock is not None
            # the plain socket's shutdown, also for TLS: the reader's SSL object stays whole
            socket.socket.shutdown(self._sock, socket.SHUT_RDWR)
        except OSError:
            pass  # already closed: the read has ended anyway


def _socket_of(resp: requests.Response) -> socket.socket | None:
    """The socket a streamed response reads from (urllib3 2: ``connection``; 1.26:
    ``_connection``), or None when it cannot be found (the watch then does nothing)."""
    raw = resp.raw
    conn = getattr(raw, "connection", None) or getattr(raw, "_connection", None)
    sock = getattr(conn, "sock", None)
    return sock if isinstance(sock, socket.socket) else None


def body_chunks(resp: requests.Response, size: int,
                arrived: Callable[[int], None]) -> Iterator[bytes]:
    """A streamed body in chunks of ``size`` bytes (the last one shorter), read as the
    socket delivers it (urllib3 2's ``read1``) so that ``arrived`` counts bytes when they
    come (a :class:`BodyWatch`), not when a whole chunk is there; urllib3 1.26 has no
    ``read1``: reads of 16 KiB there. Whole chunks go on, because the hashing, the partial
    file and the inflater cost more per call than per byte. A broken connection raises
    requests' ``ChunkedEncodingError``, also when the body ends short of its
    ``Content-Length`` (urllib3 1.26 ends such a body without an error)."""
    read1 = getattr(resp.raw, "read1", None)
    read, most = (read1, size) if read1 is not None else (resp.raw.read, _PIECE_1_26)
    length = resp.headers.get("Content-Length", "")
    pieces: list[bytes] = []
    have = total = 0
    try:
        while piece := read(min(most, size - have), decode_content=False):
            arrived(len(piece))
            pieces.append(piece)
            have += len(piece)
            total += len(piece)
            if have >= size:
                yield b"".join(pieces)
                pieces.clear()
                have = 0
    except (HTTPError, OSError) as exc:
        raise requests.exceptions.ChunkedEncodingError(
            f"the connection broke after {total} bytes ({type(exc).__name__})") from None
    if pieces:
        yield b"".join(pieces)
    if length.isdigit() and total < int(length):
        raise requests.exceptions.ChunkedEncodingError(
            f"the body ended after {total} of {length} bytes")
