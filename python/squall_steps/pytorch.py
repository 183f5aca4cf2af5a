"""PyTorch helpers for squall_steps, importable without torch (it is imported when used).

    from squall_steps import pytorch as steps
    loader = steps.loader(DataLoader(...))   # each batch's wait counts as "data"
    steps.time_allreduce(ddp_model)          # DDP's all-reduce counts as "allreduce"
    for batch in loader:
        ...
        squall_steps.step()

``time_allreduce`` registers a DDP communication hook that runs DDP's own all-reduce
(``allreduce_hook``) and counts, per step, the time from the first bucket's launch to the
last bucket's completion. A model that already has a communication hook keeps it: pass
that hook as ``hook`` to have it timed instead.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import squall_steps

T = TypeVar("T")


class _TimedLoader(Iterable[T]):
    def __init__(self, inner: Iterable[T], name: str) -> None:
        self.inner, self.name = inner, name

    def __len__(self) -> int:
        return len(self.inner)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[T]:
        rec = squall_steps.recorder()
        it = iter(self.inner)
        while True:
            rec.start(self.name)
            try:
                batch = next(it)
            except StopIteration:
                rec.stop(self.name)
                return
            rec.stop(self.name)
            yield batch

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.inner, attr)


def loader(inner: Iterable[T], name: str = "data") -> Iterable[T]:
    """``inner`` (a DataLoader, any iterable) with each wait for a batch counted as
    section ``name``."""
    return _TimedLoader(inner, name)


class _AllreduceTimer:
    """The span of one step's buckets: from the first launch to the last completion."""

    def __init__(self, name: str, hook: Callable[..., Any] | None) -> None:
        self.name, self.hook = name, hook
        self.began: float | None = None
        self.pending = 0

    def __call__(self, state: Any, bucket: Any) -> Any:
        hook = self.hook
        if hook is None:
            hooks = importlib.import_module(
                "torch.distributed.algorithms.ddp_comm_hooks.default_hooks")
            hook = self.hook = hooks.allreduce_hook
        if self.pending == 0:
            self.began = time.perf_counter()
        self.pending += 1
        future = hook(state, bucket)
        return future.then(self._done)

    def _done(self, future: Any) -> Any:
        self.pending -= 1
        if self.pending == 0 and self.began is not None:
            squall_steps.recorder().add(self.name, time.perf_counter() - self.began)
            self.began = None
        return future.value()


def time_allreduce(model: Any, name: str = "allreduce", state: Any = None,
                   hook: Callable[..., Any] | None = None) -> None:
    """Register a communication hook on DDP ``model`` that times its all-reduce as
    section ``name`` (DDP's ``allreduce_hook`` unless ``hook`` is given, with ``state``)."""
    model.register_comm_hook(state, _AllreduceTimer(name, hook))
