"""How far a pull is, said while it runs (issue 27).

A build counts the bytes it pulls and squashes (:class:`PullCount`); its lock's heartbeat
writes that count into the lock file (:mod:`.lock`), so the builds waiting for it on other
nodes read who pulls what and how far. With ``--progress-every S`` a build prints one
``sqshbuild: progress: ...`` line every S seconds on stderr, even with -q
(:class:`ProgressLines`): the plugin passes them on to srun, so a step whose image is being
pulled never looks hung (the field's "pyxis: importing docker image" with nothing after it).
"""

from __future__ import annotations

import socket
import sys
import threading
import time


class Reporter:
    """Progress callbacks; the CLI draws them on a terminal. Methods may be called from
    download threads. ``progress_every``: seconds between the lines a build waiting for
    another's says (:meth:`waiting_progress`); 0: none."""

    progress_every = 0.0

    def stage(self, text: str) -> None: ...
    def waiting(self, owner: dict[str, object] | None) -> None: ...
    def waiting_progress(self, owner: dict[str, object] | None) -> None: ...
    def download_start(self, total: int) -> None: ...
    def download_advance(self, n: int) -> None: ...
    def squash_start(self, layers: int) -> None: ...
    def squash_advance(self, n: int) -> None: ...
    def done(self) -> None: ...


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


class PullCount(Reporter):
    """The bytes one build pulled and squashed, passed on to the reporter it wraps; read
    by the lock's heartbeat (:meth:`fields`) from another thread."""

    def __init__(self, inner: Reporter, ref: str) -> None:
        self.inner = inner
        self.ref = ref
        # the user this build works for (--for-user), said in its layers' locks ('': none)
        self.serves = ""
        self._lock = threading.Lock()
        self.total, self.pulled, self.written = 0, 0, 0
        self._waits: dict[str, str] = {}  # layer digest -> whose pull of it this build waits for

    def fields(self) -> dict[str, object]:
        with self._lock:
            out: dict[str, object] = {"ref": self.ref, "total": self.total,
                                      "pulled": self.pulled, "written": self.written}
            if self._waits:
                out["waiting"] = next(iter(self._waits.values()))
            return out

    def layer_wait(self, digest: str, text: str | None) -> None:
        """This build waits for another's pull of a layer (``text``: whose, how fast, as
        layerwait.HolderWatch.text says it), or no longer (None)."""
        with self._lock:
            if text is None:
                self._waits.pop(digest, None)
            else:
                self._waits[digest] = text

    def waits(self) -> list[str]:
        with self._lock:
            return list(self._waits.values())

    def stage(self, text: str) -> None:
        self.inner.stage(text)

    def waiting(self, owner: dict[str, object] | None) -> None:
        self.inner.waiting(owner)

    def waiting_progress(self, owner: dict[str, object] | None) -> None:
        self.inner.waiting_progress(owner)

    def download_start(self, total: int) -> None:
        with self._lock:
            self.total = total
        self.inner.download_start(total)

    def download_advance(self, n: int) -> None:
        with self._lock:
            self.pulled += n
        self.inner.download_advance(n)

    def squash_start(self, layers: int) -> None:
        self.inner.squash_start(layers)

    def squash_advance(self, n: int) -> None:
        with self._lock:
            self.written += n
        self.inner.squash_advance(n)

    def done(self) -> None:
        self.inner.done()


def describe(fields: dict[str, object], rate: float | None) -> str:
    """'pulls REF: X of Y, R/s' while bytes are still to come (the squash of the layers
    already there runs meanwhile), then 'squashes REF: X written', from a count's fields."""
    ref = fields.get("ref") or "this image"
    pulled, total, written = (fields.get(k) for k in ("pulled", "total", "written"))
    pulled = pulled if isinstance(pulled, int) else 0
    total = total if isinstance(total, int) else 0
    if total and pulled >= total:
        return f"squashes {ref}: {human(written if isinstance(written, int) else 0)} written"
    text = f"pulls {ref}: {human(pulled)} of {human(total)}"
    text += f", {human(rate)}/s" if rate is not None else ""
    waiting = fields.get("waiting")
    return text + (f"; waits for {waiting}" if isinstance(waiting, str) and waiting else "")


class ProgressLines(PullCount):
    """A count that also says itself: one line every ``every`` seconds on stderr, whatever
    else the reporter it wraps shows, while this build pulls or squashes (a thread), and
    while it waits for another's (the lock's wait loop calls :meth:`waiting_progress`)."""

    def __init__(self, inner: Reporter, every: float, ref: str) -> None:
        super().__init__(inner, ref)
        self.progress_every = every
        self.host = socket.gethostname()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._seen: tuple[float, int] | None = None   # a waited-for pull: when, how far

    @staticmethod
    def say(text: str) -> None:
        sys.stderr.write(f"sqshbuild: progress: {text}\n")
        sys.stderr.flush()

    def _tick(self) -> None:
        last = (time.monotonic(), 0)
        while not self._stop.wait(self.progress_every):
            now, pulled = time.monotonic(), self.pulled
            rate = (pulled - last[1]) / (now - last[0]) if now > last[0] else None
            for line in self.lines(rate, moved=pulled != last[1]):
                self.say(line)
            last = (now, pulled)

    def lines(self, rate: float | None, moved: bool = True) -> list[str]:
        """This tick's lines: what this build pulls, and whose pull of a layer it waits
        for and how fast that one goes. While it only waits (its own count did not move),
        the wait alone: a line that said it pulls at 0 B/s hid whom it waited for."""
        fields = self.fields()
        fields.pop("waiting", None)
        waits = [f"{self.host} waits for {w}" for w in self.waits()]
        if waits and not moved:
            return waits
        return [f"{self.host} {describe(fields, rate)}", *waits]

    def waiting_progress(self, owner: dict[str, object] | None) -> None:
        who = (f"{owner.get('host')} (pid {owner.get('pid')})" if owner
               else "another build")
        if owner and owner.get("by"):
            # the job's node that holds the pin waits for this pull (build.py relay)
            who = f"{owner.get('by')} (pid {owner.get('by_pid')})"
        if not owner or "pulled" not in owner:
            self.say(f"waiting for {who}, which builds this image")
            return
        now, pulled = time.monotonic(), owner.get("pulled")
        pulled = pulled if isinstance(pulled, int) else 0
        rate = None
        if self._seen is not None and now > self._seen[0]:
            rate = max(0.0, (pulled - self._seen[1]) / (now - self._seen[0]))
        self._seen = (now, pulled)
        self.say(f"waiting for {who}, which {describe(owner, rate)}")

    def download_start(self, total: int) -> None:
        super().download_start(total)
        if self._thread is None:
            self._thread = threading.Thread(target=self._tick, daemon=True)
            self._thread.start()

    def done(self) -> None:
        self.close()
        super().done()

    def close(self) -> None:
        self._stop.set()
