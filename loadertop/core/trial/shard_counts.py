"""The shard arithmetic of sharded streaming datasets, and the persistent_workers + set_epoch trap.

Sharded IterableDatasets (WebDataset, a Hugging Face IterableDataset, most streaming formats) give each reader
(a DataLoader worker of a rank) whole shards: with fewer shards than ranks × workers, the extra workers get none
and sit idle, or a whole rank gets nothing and DDP hangs waiting for it (webdataset issue 188, datasets issues
6594 and 8669). Before a trial the shard count a dataset exposes is compared with its readers; after it, the
per-worker sample counts (counted in the workers by CountingCollate) name the workers that produced nothing.

With persistent_workers=True each worker keeps the copy of the dataset it was started with, so `set_epoch` called
in the main process never reaches it and every epoch repeats the first one's order (datasets issue 6673), unless
the epoch lives in shared memory (a tensor after `share_memory_()`, as datasets keeps it since 2.18).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loadertop.core.model.config import TrialConfig


def shard_count(dataset: Any) -> tuple[int, bool] | None:
    """(shards, per rank) a dataset says it has: `n_shards` or `num_shards` (WebDatasetShards, a Hugging Face
    IterableDataset, a user's class), or the URL list of a webdataset pipeline; per rank when it was already split
    by node (datasets' split_dataset_by_node: its count is the rank's own). None when it does not say."""
    per_rank = getattr(dataset, "_distributed", None) is not None
    for name in ("n_shards", "num_shards"):
        try:
            value = getattr(dataset, name, None)
        except Exception:  # a property that fails says nothing
            value = None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value, per_rank
    pipeline = getattr(dataset, "pipeline", None)  # webdataset.WebDataset / DataPipeline: its first stage lists them
    urls = getattr(pipeline[0], "urls", None) if isinstance(pipeline, list) and pipeline else None
    return (len(urls), False) if isinstance(urls, list) and urls else None


def shard_warning(shards: int, workers: int, ranks: int, nodes: int = 1, per_rank: bool = False) -> str | None:
    """A warning when `shards` (in all, or each rank's own when `per_rank`) cannot keep every reader
    (ranks × nodes × workers) busy; None when they can."""
    world = ranks * nodes
    readers = world * max(1, workers)
    total = shards * world if per_rank else shards
    if total >= readers:
        return None
    who = _n(ranks, "rank") if nodes == 1 else f"{_n(nodes, 'node')} × {_n(ranks, 'rank')}"
    count = f"{_n(shards, 'shard')} per rank" if per_rank else _n(shards, "shard")
    if workers > 0:
        head = f"{count} for {who} × {_n(workers, 'worker')} = {readers} readers: {_n(readers - total, 'worker')} idle"
    else:
        head = f"{count} for {who} (0 workers: each rank reads): {_n(readers - total, 'rank')} idle"
    if total < world:
        starved = f"{world - total} of {world} ranks {'gets' if world - total == 1 else 'get'} no shard at all"
        starved += " (DDP waits for them forever)"
        return f"{head}; {starved}; split the data into ≥ {readers} shards"
    fewer = _n(total // world, "worker")
    return f"{head}; use ≤ {fewer} per rank or split the data into ≥ {readers} shards"


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def set_epoch_warning(dataset: Any, config: TrialConfig) -> str | None:
    """The persistent_workers + set_epoch trap, for an IterableDataset whose epoch is not in shared memory."""
    from torch.utils.data import IterableDataset

    if not (config.persistent_workers and config.num_workers > 0 and isinstance(dataset, IterableDataset)):
        return None
    if not callable(getattr(dataset, "set_epoch", None)):
        return None
    for name in ("_epoch", "epoch"):
        is_shared = getattr(getattr(dataset, name, None), "is_shared", None)
        if callable(is_shared) and is_shared():
            return None  # the workers read the epoch the main process writes
    return (
        f"{type(dataset).__name__} has set_epoch, but with persistent_workers=True each worker keeps the copy it "
        "started with: set_epoch in the main process does not reach it and every epoch repeats the same order "
        "(datasets issue 6673); keep the epoch in a shared tensor (torch.tensor(0).share_memory_(), updated in "
        "place) or use persistent_workers=False"
    )


class CountingCollate:
    """The loader's collate_fn, counting in a shared tensor the samples each worker collates (its batches pass
    through unchanged). One add per batch, in the worker."""

    def __init__(self, inner: Any, workers: int) -> None:
        import torch

        self.inner = inner
        self.counts = torch.zeros(workers, dtype=torch.int64)
        share: Callable[[], torch.Tensor] = self.counts.share_memory_  # typed here: torch leaves it unannotated
        share()  # in place: the workers' adds reach the main process

    def __call__(self, samples: Any) -> Any:
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        if info is not None and info.id < len(self.counts):
            self.counts[info.id] += len(samples) if isinstance(samples, list) else 1
        return self.inner(samples)


def counting_collate(kwargs: dict[str, Any], config: TrialConfig) -> None:
    """Put a CountingCollate around the collate_fn in `kwargs` (the DataLoader's default when none)."""
    from torch.utils.data import default_collate

    kwargs["collate_fn"] = CountingCollate(kwargs.get("collate_fn") or default_collate, config.num_workers)


def idle_warning(loader: Any, batches: int) -> str | None:
    """Workers that produced no sample during the trial, from the CountingCollate's counts; None when every
    worker produced or there is nothing to tell (no counter, too few batches for every worker to have had a turn)."""
    collate = getattr(loader, "collate_fn", None)
    if not isinstance(collate, CountingCollate):
        return None
    counts = collate.counts.tolist()
    if batches < 2 * len(counts):
        return None
    idle = [i for i, n in enumerate(counts) if n == 0]
    if not idle:
        return None
    ids = ", ".join(str(i) for i in idle)
    # Not the counts themselves: every rank says this, and the same words from each are told once.
    return (
        f"{len(idle)} of {len(counts)} workers produced no samples (worker {ids}): the dataset gives them no "
        "shard (fewer shards than workers) or its __iter__ skips them"
    )
