"""Carrying an epoch's position across a loader switch: the epoch's index batches materialised once, and loaders
that start at the first batch not yet handed out.

`loadertop.tune` switches configurations inside an epoch. The user's batch sampler is asked for its batches once, at
the start of the epoch (this honours shuffling with the loader's generator, and a DistributedSampler after the
user's `set_epoch`); each configuration then gets `batches[k:]`, so no sample is skipped or repeated.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from loadertop.core.datasets.loaders import loader_kwargs
from loadertop.core.engine.tune_entry import UserArgs
from loadertop.core.job.stateful import is_stateful
from loadertop.core.model.arg_text import arg_text
from loadertop.core.model.config import TrialConfig

Batches = list[list[int]]


def why_not_tunable(loader: Any) -> str | None:
    """Why tuning cannot carry this loader's position across a switch; None when it can."""
    if not isinstance(loader, DataLoader):
        return f"not a torch DataLoader ({type(loader).__name__})"
    if isinstance(loader.dataset, IterableDataset):
        return "an IterableDataset has no sampler position to carry across a switch"
    if loader.batch_sampler is None:
        return "batch_size=None (no batch sampler): batches are not index lists"
    return None


def epoch_batches(loader: DataLoader[Any], epoch: int) -> Batches:
    """The epoch's index batches, in order, from the user's own batch sampler (asked once). First the seed that the
    loader's own iterator would draw for this epoch (its workers' base seed, from its generator or torch's): a
    shuffle without a generator of its own then draws where the loader's would, and the epoch keeps its order."""
    sampler = loader.batch_sampler
    if sampler is None:  # why_not_tunable() refuses these before any epoch
        raise TypeError("batch_size=None (no batch sampler): batches are not index lists")
    if epoch == 0 or not (loader.persistent_workers and loader.num_workers > 0):  # a fresh iterator draws it
        torch.empty((), dtype=torch.int64).random_(generator=loader.generator)
    return [list(batch) for batch in sampler]


def current_config(loader: DataLoader[Any]) -> TrialConfig:
    """The knobs the user's loader was built with, as a TrialConfig."""
    nw = loader.num_workers
    context = loader.multiprocessing_context
    method = context.get_start_method() if context is not None and nw > 0 else None
    return TrialConfig(
        num_workers=nw,
        batch_size=_batch_size(loader),
        prefetch_factor=loader.prefetch_factor if nw > 0 else None,
        pin_memory=bool(loader.pin_memory),
        persistent_workers=bool(loader.persistent_workers) if nw > 0 else False,
        start_method=method,
        in_order=bool(getattr(loader, "in_order", True)),
    )


def user_args(loader: DataLoader[Any]) -> UserArgs:
    """What the user passed to build `loader` (recovered from the loader: datasets/loaders.py), for the snippet: the
    arguments loadertop does not sweep, then multiprocessing_context and in_order where not the defaults (the
    snippet puts the measured values in their places), and a StatefulDataLoader's snapshot_every_n_steps."""
    kept = loader_kwargs(loader)
    every = kept.pop("snapshot_every_n_steps", None)
    args = [(name, arg_text(value)) for name, value in kept.items()]
    context = loader.multiprocessing_context
    if context is not None:
        args.append(("multiprocessing_context", arg_text(context.get_start_method())))
    if not getattr(loader, "in_order", True):
        args.append(("in_order", "False"))
    if every is not None:
        args.append(("snapshot_every_n_steps", arg_text(every)))
    if is_stateful(loader):
        return UserArgs(tuple(args), current_config(loader), loader=type(loader).__name__)
    return UserArgs(tuple(args), current_config(loader))


def _batch_size(loader: DataLoader[Any]) -> int:
    if loader.batch_size is not None:
        return int(loader.batch_size)
    size = getattr(loader.batch_sampler, "batch_size", None)
    return int(size) if isinstance(size, int) else 1


def loader_from(
    loader: DataLoader[Any], batches: Sequence[list[int]], config: TrialConfig, every: int | None = None
) -> DataLoader[Any]:
    """A loader over `batches` (the rest of the epoch) with `config`'s knobs and everything else the user's.
    Workers never persist (it lives for one measured span); batches come in order (the position is a count).
    `every`: a StatefulDataLoader's snapshot_every_n_steps in place of the user's (0: no snapshots)."""
    knobs = _knobs(loader, config, persistent=False)
    if every is not None:
        knobs["snapshot_every_n_steps"] = every
    built: DataLoader[Any] = _cls(loader)(loader.dataset, batch_sampler=list(batches), **knobs)
    return built


def final_loader(loader: DataLoader[Any], config: TrialConfig) -> DataLoader[Any]:
    """The loader kept after tuning: the user's own batch sampler (their sampler object, so `set_epoch` still
    reaches it) with the chosen knobs; persistent_workers and in_order as the user had them. The user's loader
    itself when the choice is what it already was."""
    if _same_knobs(current_config(loader), config):
        return loader
    knobs = _knobs(loader, config, persistent=bool(loader.persistent_workers))
    if config.num_workers > 0 and "in_order" in _PARAMS:
        knobs["in_order"] = bool(getattr(loader, "in_order", True))
    built: DataLoader[Any] = _cls(loader)(loader.dataset, batch_sampler=loader.batch_sampler, **knobs)
    return built


def _cls(loader: DataLoader[Any]) -> Any:
    """The class to build: the user's own StatefulDataLoader stays one (its state_dict, its snippet)."""
    return type(loader) if is_stateful(loader) else DataLoader


def _same_knobs(a: TrialConfig, b: TrialConfig) -> bool:
    keys = ("num_workers", "prefetch_factor", "pin_memory")
    return all(getattr(a, k) == getattr(b, k) for k in keys)


def _knobs(loader: DataLoader[Any], config: TrialConfig, persistent: bool) -> dict[str, Any]:
    nw = config.num_workers
    knobs: dict[str, Any] = {
        "num_workers": nw,
        "collate_fn": loader.collate_fn,
        "pin_memory": config.pin_memory,
        "worker_init_fn": loader.worker_init_fn,
        "generator": loader.generator,
    }
    device = getattr(loader, "pin_memory_device", "")  # apart from the `and`: mypy types its default as bool there
    if config.pin_memory and device:
        knobs["pin_memory_device"] = loader.pin_memory_device
    if is_stateful(loader):
        knobs["snapshot_every_n_steps"] = getattr(loader, "snapshot_every_n_steps", 1)
    if nw > 0:  # the DataLoader rejects these at 0 workers (a timeout too: the 0-worker iterator asserts it is 0)
        knobs["timeout"] = loader.timeout
        knobs["prefetch_factor"] = config.prefetch_factor
        knobs["persistent_workers"] = persistent
        knobs["multiprocessing_context"] = loader.multiprocessing_context
    return knobs


_PARAMS = DataLoader.__init__.__code__.co_varnames


def start_up_buffer(config: TrialConfig) -> int:
    """Batches a fresh iterator has ready before the training step can ask for more: each worker's prefetch plus
    the one each is working on. Measuring them would count start-up as steady throughput."""
    nw = config.num_workers
    return (config.prefetch_factor or 2) * nw + nw if nw > 0 else 0


def shutdown(iterator: Iterator[Any] | None) -> None:
    """Stop a DataLoader iterator's workers now (not when the garbage collector gets to it)."""
    stop = getattr(iterator, "_shutdown_workers", None)
    if callable(stop):
        stop()
