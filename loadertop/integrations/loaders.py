"""What every integration does to a framework's train loader: iterate it through `loadertop.watch` (or
`loadertop.tune`) without the framework noticing.

`LoaderProxy` takes the loader's place: each `iter()` is one epoch of `loadertop.watch(loader)` (the same code path
as a hand-written loop) or of `loadertop.tune(loader, budget_s)`; every attribute, `len()` and `isinstance(proxy,
DataLoader)` are the loader's, so the framework's own checks, `set_epoch` and samplers see the loader.

Accelerate's prepared loaders (`DataLoaderShard`, `DataLoaderDispatcher`) wrap a plain DataLoader in
`base_dataloader` and iterate it with one batch of look-ahead. Watching the wrapper would see the batches but not
the workers (its iterator is a generator, not the DataLoader's); so the proxy goes *inside* it, in place of
`base_dataloader`: the watched iteration is the DataLoader's own, with its workers' pids.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import loadertop

log = logging.getLogger("loadertop")


class LoaderProxy:
    """A loader's stand-in: iterates `watch(loader)` or `tune(loader, budget_s)`, and is the loader otherwise."""

    def __init__(self, loader: Any, tune_budget_s: float | None = None) -> None:
        self.loader = loader
        self.tuned: Any = None  # the Tuned (loadertop.tune) when tuning, else None
        if tune_budget_s is not None:
            self.tuned = loadertop.tune(loader, budget_s=tune_budget_s)
            self._iterable: Any = self.tuned
        else:
            self._iterable = loadertop.watch(loader)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._iterable)

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:
        if name in ("loader", "tuned", "_iterable"):  # not set yet (copy, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.loader, name)

    @property  # type: ignore[misc]  # mypy refuses a property over __class__; the proxy must pass isinstance
    def __class__(self) -> type:  # isinstance(proxy, DataLoader), as Accelerate's own wrappers do
        return type(self.loader)


def proxied(loader: Any) -> LoaderProxy | None:
    """The proxy already in a loader's place (the loader itself, or an Accelerate wrapper's base), or None."""
    inner = getattr(loader, "__dict__", {}).get("base_dataloader", loader)
    return inner if type(inner) is LoaderProxy else None


def install(loader: Any, tune_budget_s: float | None = None) -> Any:
    """What to iterate instead of `loader`, watched (or tuned). An Accelerate wrapper is changed in place (its
    `base_dataloader` becomes the proxy) and returned; any other loader comes back as a proxy. Installing twice
    keeps the first proxy."""
    if proxied(loader) is not None:
        return loader
    base = getattr(loader, "__dict__", {}).get("base_dataloader")
    if base is not None:  # Accelerate: watch the DataLoader inside, not the wrapper's generator
        loader.base_dataloader = LoaderProxy(base, tune_budget_s)
        return loader
    return LoaderProxy(loader, tune_budget_s)


def innermost(loader: Any) -> Any:
    """The DataLoader under a proxy and an Accelerate wrapper."""
    for _ in range(8):
        if type(loader) is LoaderProxy:
            loader = loader.loader
            continue
        base = getattr(loader, "__dict__", {}).get("base_dataloader")
        if base is None:
            return loader
        loader = base
    return loader


def tuned_of(loader: Any) -> Any:
    """The Tuned (loadertop.tune) behind a loader that `install` tuned, else None."""
    proxy = proxied(loader)
    return proxy.tuned if proxy is not None else None
