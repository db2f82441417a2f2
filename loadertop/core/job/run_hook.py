"""`loadertop run`'s hook inside the job: every `torch.utils.data.DataLoader` iteration goes through watch()'s own
path (the same recorder, the same hot loop), with the job's script unchanged.

`site/sitecustomize.py` (first on the job's PYTHONPATH) calls install() in every Python process of the job: the
launcher (torchrun), its ranks, spawned processes, DataLoader workers. install() imports nothing but the standard
library: it waits for `torch.utils.data.dataloader` to be imported (a meta path finder) and then wraps
`DataLoader.__iter__`. Nothing publishes until a process iterates a loader, so a launcher and the workers (a forked
worker never publishes; a spawned one iterates no loader) stay out of it. With LOADERTOP_RUN_TUNE=BUDGET_S the first
loader the job iterates is tuned in place (as `loadertop.tune(loader, BUDGET_S)`, its advice in run's words), every
epoch of it.

Nothing here may hurt the job: any failure of loadertop's own is plain iteration.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import os
import sys
import weakref
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any, ClassVar

TARGET = "torch.utils.data.dataloader"
TUNE_ENV = "LOADERTOP_RUN_TUNE"


class _Tuning:
    budget_s: float | None = None
    claimed = False  # the first loader iterated is the one tuned
    tuned: ClassVar[weakref.WeakKeyDictionary[Any, Any]] = weakref.WeakKeyDictionary()


def _hooked_iter(original: Any) -> Any:
    """DataLoader.__iter__ wrapped: watched (or tuned) unless watch()/tune() opened it themselves."""

    def __iter__(self: Any) -> Iterator[Any]:
        try:
            it = _watched_iter(self)
        except Exception:
            it = None
        return original(self) if it is None else it

    __iter__.__wrapped__ = original  # type: ignore[attr-defined]  # a function attribute, as functools.wraps sets it
    __iter__.__doc__ = original.__doc__
    return __iter__


def _watched_iter(loader: Any) -> Iterator[Any] | None:
    from loadertop.core.job.watch import owned

    if owned():
        return None
    tuned = _Tuning.tuned.get(loader)
    if tuned is None and _Tuning.budget_s is not None and not _Tuning.claimed:
        from loadertop.core.job.publisher import publisher
        from loadertop.core.job.tune import tune_in_run

        if publisher() is None:  # a forked worker, or watching is off: no tuning here either
            return None
        _Tuning.claimed = True
        tuned = _Tuning.tuned[loader] = tune_in_run(loader, _Tuning.budget_s)
    if tuned is not None:
        it: Iterator[Any] = iter(tuned)
        return it
    return _watch(loader)


def _watch(loader: Any) -> Iterator[Any] | None:
    from loadertop.core.job.publisher import publisher
    from loadertop.core.job.watch import recorder_for, state_of, watched_epoch

    pub = publisher()
    if pub is None:
        return None
    return watched_epoch(loader, recorder_for(loader, pub), state_of(loader))


def patch(module: ModuleType) -> None:
    """Wrap the module's DataLoader.__iter__ (once)."""
    cls = getattr(module, "DataLoader", None)
    current = getattr(cls, "__iter__", None)
    if cls is None or current is None or getattr(current, "__wrapped__", None) is not None:
        return
    cls.__iter__ = _hooked_iter(current)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when torch's dataloader module is about to load, wraps its loader so that the module
    is patched right after it runs."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != TARGET:
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        spec: importlib.machinery.ModuleSpec | None = None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            found = find(fullname, path, target) if find is not None else None
            spec = found if isinstance(found, importlib.machinery.ModuleSpec) else None
            if spec is not None:
                break
        else:
            return None
        loader: Any = spec.loader
        run = getattr(loader, "exec_module", None)
        if run is None:
            return spec

        def exec_module(module: ModuleType) -> None:
            run(module)
            with contextlib.suppress(Exception):
                patch(module)

        with contextlib.suppress(Exception):
            loader.exec_module = exec_module
        return spec


def install() -> None:
    """Patch DataLoader now if torch's dataloader is loaded, else when it is. Idempotent."""
    budget = os.environ.get(TUNE_ENV, "").strip()
    with contextlib.suppress(ValueError):
        _Tuning.budget_s = float(budget) if budget else None
    module = sys.modules.get(TARGET)
    if module is not None:
        patch(module)
    elif not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
