"""What a fresh worker pays before its first sample, measured before this process touches a sample.

- A fresh 1-worker DataLoader's first batch (the platform's start method: fork on Linux), against a 0-worker first
  batch once this process is warm: the difference is the worker's start, its imports and its first batch's trip.
- The first sample in this fresh process, with the packages it imports (sys.modules before and after): a package
  imported inside __getitem__ is imported again by every fresh worker, every epoch without persistent_workers.
  Each import statement's time comes from a wrapper of builtins.__import__ (outermost statements only); a package
  loaded another way (importlib) is listed with its module count and no time.
"""

from __future__ import annotations

import builtins
import sys
import time
from collections.abc import Callable
from typing import Any

from loadertop.core.model.stages import LazyImport


class ImportTimer:
    """builtins.__import__, timed per outermost import statement that adds modules, by top-level package."""

    def __init__(self) -> None:
        self.original = builtins.__import__
        self.depth = 0
        self.timed: dict[str, list[float]] = {}  # package -> [seconds, modules added]
        self.covered: set[str] = set()  # the modules those statements added

    def __call__(self, name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        if self.depth:
            return self.original(name, globals, locals, fromlist, level)
        self.depth += 1
        known, start = set(sys.modules), time.perf_counter()
        try:
            return self.original(name, globals, locals, fromlist, level)
        finally:
            elapsed = time.perf_counter() - start
            self.depth -= 1
            added = set(sys.modules) - known
            if added:
                package = name if level == 0 else str((globals or {}).get("__package__") or name)
                entry = self.timed.setdefault(package.split(".")[0], [0.0, 0])
                entry[0] += elapsed
                entry[1] += len(added)
                self.covered |= added

    def __enter__(self) -> ImportTimer:
        builtins.__import__ = self
        return self

    def __exit__(self, *exc: object) -> None:
        builtins.__import__ = self.original


def first_sample(fetch: Callable[[], Any]) -> tuple[Any, float, tuple[LazyImport, ...]]:
    """(the first sample, its time, the packages it imported: timed ones first, largest first)."""
    before = set(sys.modules)
    with ImportTimer() as timer:
        start = time.perf_counter()
        sample = fetch()
        elapsed = time.perf_counter() - start
    untimed: dict[str, int] = {}  # loaded outside an import statement (importlib): listed by package, untimed
    for name in set(sys.modules) - before - timer.covered:
        top = name.split(".")[0]
        untimed[top] = untimed.get(top, 0) + 1
    timed = [LazyImport(pkg, int(entry[1]), entry[0]) for pkg, entry in timer.timed.items()]
    timed.sort(key=lambda lazy: -(lazy.seconds or 0.0))
    return sample, elapsed, (*timed, *(LazyImport(pkg, n, None) for pkg, n in sorted(untimed.items())))


def first_batch_s(make_loader: Callable[[], Any]) -> float:
    """A new loader's first batch, timed from its iterator's creation (its workers shut down afterwards)."""
    start = time.perf_counter()
    batches = iter(make_loader())
    try:
        next(batches)
    except StopIteration:
        raise ValueError("the loader yields no batch (fewer samples than the batch size, and drop_last?)") from None
    elapsed = time.perf_counter() - start
    del batches
    return elapsed
