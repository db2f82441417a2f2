"""Accelerate: `loadertop.integrations.accelerate.watch(accelerator.prepare(loader))`.

`prepare` (and `prepare_data_loader`) returns a wrapper (`DataLoaderShard`, `DataLoaderDispatcher`) that iterates
the DataLoader inside it one batch ahead and moves each batch to the device. `watch` puts `loadertop.watch` inside
the wrapper, on the DataLoader itself, so that `loadertop attach` sees the batches and the DataLoader's workers;
the wrapper is changed in place and returned, and the training loop iterates it as before. This module imports
nothing of Accelerate: it reads the wrapper's `base_dataloader`.
"""

from __future__ import annotations

from typing import Any

from loadertop.integrations.loaders import install, tuned_of


def watch(prepared: Any) -> Any:
    """The prepared loader, its DataLoader watched (`loadertop.watch`); a plain loader comes back as a watched
    stand-in. Each `for batch in prepared:` is one epoch, as before."""
    return install(prepared)


def tune(prepared: Any, budget_s: float = 120.0) -> Any:
    """The prepared loader, its DataLoader tuned in place (`loadertop.tune`): read the choice with `tuned(...)`."""
    return install(prepared, budget_s)


def tuned(prepared: Any) -> Any:
    """The Tuned behind a loader `tune` was given (its `choice`, `snippet`, `trace`), else None."""
    return tuned_of(prepared)
