"""A build waiting for another's download of a layer: who pulls it, how fast, and when to
stop waiting (issue 39, docs/security.md).

The build that holds a layer's lock writes into it every second who it is and how far it
is (:func:`status`). A build waiting for that lock reads it (:class:`HolderWatch`) and says
so on its progress lines; when the holder brings fewer than :data:`FLOOR` bytes a second
over one stall window (``SQSHBUILD_TIMEOUT``, 30 s), or pulls a blob that cannot be this
layer (more bytes than this build's manifest gives it, or another size), the waiter stops
waiting and pulls the same digest from its own source (:mod:`.layers`). The blob is
content addressed: whichever verified copy is placed first is the layer
(:mod:`.noreplace`) and the other is dropped. So a user whose registry trickles a popular
layer (a manifest may give it no size) costs the builds waiting for it one window, not the
hours a lock may be waited for.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable

from squall.sqshbuild.progress import human
from squall.sqshbuild.transport import short_digest
from squall.sqshbuild.trust import who

# Slower than this, a layer of a real image does not arrive in the hours a waiter would
# wait (1 GiB in 4.5 h), while a real registry sends megabytes a second: 64 times the
# transport's own floor (SQSHBUILD_LOW_SPEED), which a trickling registry can stay above.
FLOOR = 64 << 10
PULLS, SYNCS = "pulls", "syncs"


def status(digest: str, pulled: int | None, size: int, serves: str) -> dict[str, object]:
    """What a layer's holder writes into its lock (``pulled`` None: its bytes are all
    there and it makes them durable)."""
    out: dict[str, object] = {"layer": digest, "user": who(os.geteuid())}
    if serves:
        out["for"] = serves
    if pulled is None:
        out["state"] = SYNCS
    else:
        out.update(state=PULLS, pulled=pulled, size=size)
    return out


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class HolderWatch:
    """The holder of one layer's lock as a waiter sees it, from the lock's contents read
    every :attr:`every` seconds (:meth:`see`). ``why`` turns non-empty when the waiter
    should stop waiting; :meth:`text` is what its progress line says of the holder."""

    def __init__(self, digest: str, size: int, window: float, floor: float = FLOOR,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.digest, self.size = digest, size
        self.window, self.floor, self.clock = window, floor, clock
        self.every = min(2.0, max(0.2, window / 10))
        self.why = ""
        self.owner: dict[str, object] = {}
        self.rate: float | None = None
        self._start: tuple[float, int] | None = None  # this window's first sample
        # the samples of the last window, for the rate said: the holder writes its count
        # once a second, so two samples in a row would say 0 or a burst
        self._seen: deque[tuple[float, int]] = deque()
        self._who: tuple[object, ...] = ()

    def see(self, owner: dict[str, object] | None) -> None:
        """One reading of the lock (None: absent, untrusted or malformed)."""
        if not owner:
            self._start = None
            self._seen.clear()
            return
        ident = (owner.get("host"), owner.get("pid"), owner.get("since"))
        if ident != self._who:  # another holder: watched afresh
            self._who, self._start, self.rate = ident, None, None
            self._seen.clear()
        self.owner = owner
        if owner.get("state") != PULLS or "pulled" not in owner:
            self._start = None  # not pulling (making it durable) or an older sqshbuild:
            self._seen.clear()  # nothing to judge, as before
            return
        now, pulled = self.clock(), _int(owner.get("pulled"))
        self._rate(now, pulled)
        self.why = self._judge(now, pulled, _int(owner.get("size")))

    def _rate(self, now: float, pulled: int) -> None:
        self._seen.append((now, pulled))
        while len(self._seen) > 2 and now - self._seen[1][0] >= max(1.0, self.window):
            self._seen.popleft()
        then, before = self._seen[0]
        if now - then >= 1.0:
            self.rate = max(0.0, (pulled - before) / (now - then))

    def _judge(self, now: float, pulled: int, theirs: int) -> str:
        if self.size and (pulled > self.size or theirs and theirs != self.size):
            told = f"{theirs} bytes" if theirs else "no size"
            return (f"it pulls a blob of {told} ({human(pulled)} so far) for a layer this "
                    f"build's manifest gives {self.size} bytes")
        if self._start is None:
            self._start = (now, pulled)
            return ""
        took = now - self._start[0]
        if took < self.window:
            return ""
        got = pulled - self._start[1]
        if got >= self.floor * took:
            self._start = (now, pulled)
            return ""
        return (f"it brought {human(got)} in {took:.0f} s (under {human(self.floor)}/s over "
                "the SQSHBUILD_TIMEOUT window)")

    def holder(self) -> str:
        """'root on node1 (pid 123) for job KEY'."""
        o = self.owner
        text = f"{o.get('user') or 'another build'} on {o.get('host')} (pid {o.get('pid')})"
        return text + (f" for {o['for']}" if o.get("for") else "")

    def text(self) -> str:
        """'layer sha256:abcd12345678, pulled by ROOT on HOST (pid N) for KEY: 12.0 KiB of
        ?, 4.0 KiB/s': whom this build waits for and how fast that one goes."""
        head = f"layer {short_digest(self.digest)}, pulled by {self.holder()}"
        o = self.owner
        if o.get("state") == SYNCS:
            return f"{head}: all there, being written to disk"
        if "pulled" not in o:
            return head
        size = _int(o.get("size")) or self.size
        rate = f", {human(self.rate)}/s" if self.rate is not None else ""
        return (f"{head}: {human(_int(o.get('pulled')))} of "
                f"{human(size) if size else '?'}{rate}")
