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
  longer but may not stall for that long between two reads.
* Manifests, indexes, configs and token answers are read only up to a cap
  (:data:`MANIFEST_CAP`, :data:`CONFIG_CAP`, :data:`TOKEN_CAP`), never whole into memory
  first.
"""

from __future__ import annotations

import inspect
import os
import time
from typing import TYPE_CHECKING, Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.exceptions import MaxRetryError
from urllib3.util.retry import Retry

if TYPE_CHECKING:
    from urllib3.response import BaseHTTPResponse

from squall.errors import SquallError

TIMEOUT_ENV = "SQSHBUILD_TIMEOUT"
RETRIES_ENV = "SQSHBUILD_RETRIES"
DEFAULT_TIMEOUT = 30.0
DEFAULT_RETRIES = 5
RETRY_STATUS = (429, 500, 502, 503, 504)
BACKOFF_FACTOR = 0.5  # 0 s, 1 s, 2 s, 4 s ... (urllib3 2: no wait before the first retry)
BACKOFF_MAX = 10.0
BACKOFF_JITTER = 0.5
MANIFEST_CAP = 4 << 20  # the distribution registry's own limit on manifests
CONFIG_CAP = 32 << 20
TOKEN_CAP = 1 << 20
_SMALL_ERROR_BODY = 64 << 10


def _env_number(name: str, default: float) -> float:
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
    return _env_number(TIMEOUT_ENV, DEFAULT_TIMEOUT)


def retries() -> int:
    return max(1, int(_env_number(RETRIES_ENV, DEFAULT_RETRIES)))


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
    return session


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
    try:
        for chunk in resp.iter_content(64 << 10):
            data += chunk
            if len(data) > cap:
                raise SquallError(f"{what} is larger than the {cap} bytes allowed: the "
                                  "registry is broken or hostile")
            if time.monotonic() > until:
                raise SquallError(f"{what} did not arrive within {request_timeout():g} s "
                                  f"({TIMEOUT_ENV}): the registry is too slow or stuck")
    except requests.RequestException as exc:
        raise SquallError(f"the connection broke while reading {what} ({describe(exc)}): "
                          "try again") from None
    finally:
        resp.close()
    return bytes(data)
