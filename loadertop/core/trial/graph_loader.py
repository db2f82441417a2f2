"""Thread workers: one trial's loader as a torchdata.nodes pipeline (`--worker-method thread`, the `nodes` extra).

The chain is torchdata's own DataLoader migration recipe, so a thread worker does what a DataLoader worker does:
SamplerWrapper(sampler) -> Batcher(batch_size, drop_last) -> ParallelMapper(fetch and collate one batch,
num_workers, method="thread", in_order) -> PinMemory (CUDA only, as the DataLoader's pin is a no-op without it) ->
Prefetcher(prefetch_factor × num_workers batches, the DataLoader's total in flight) -> Loader. Each thread builds
a whole batch, collate included, so the two methods differ in the kind of worker only.

Runs in trial processes: it imports torch, torchdata and the user's code. The threads live in the trial process
and end with it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

from loadertop.core.datasets.errors import SpecError
from loadertop.core.model.config import TrialConfig

# The factory's DataLoader arguments the thread chain honours; any other has no thread equivalent.
HONOURED = ("collate_fn", "drop_last", "sampler", "batch_sampler")


class FetchBatch:
    """map_fn of the ParallelMapper: a batch of indices into one collated batch, as a DataLoader worker makes it."""

    def __init__(self, dataset: Any, collate: Callable[[list[Any]], Any]) -> None:
        self.dataset = dataset
        self.collate = collate

    def __call__(self, indices: list[int]) -> Any:
        return self.collate([self.dataset[i] for i in indices])


class ThreadLoader:
    """A DataLoader stand-in the measured loop can drive: each iter() is an epoch, len() its batches."""

    def __init__(self, dataset: Any, root: Any, batches: int | None) -> None:
        from torchdata.nodes import Loader

        self.dataset = dataset
        self._loader = Loader(root)
        self._batches = batches

    def __iter__(self) -> Iterator[Any]:
        return iter(self._loader)

    def __len__(self) -> int:
        if self._batches is None:
            raise TypeError("no length")
        return self._batches


def build_thread_loader(dataset: Any, kwargs: dict[str, Any], config: TrialConfig) -> ThreadLoader:
    """The thread-worker loader over a map-style `dataset`; `kwargs` hold the factory's arguments and the sampler
    (or batch_sampler) the trial wraps in its EpochControl."""
    import torch
    from torch.utils.data import default_collate
    from torchdata import nodes

    unknown = sorted(set(kwargs) - set(HONOURED) - {"generator"})
    if unknown:
        raise SpecError(f"thread workers: the dataset factory's {unknown[0]} has no torchdata.nodes equivalent; "
                        "use --worker-method process")  # fmt: skip
    collate = kwargs.get("collate_fn") or default_collate
    if "batch_sampler" in kwargs:  # the factory's own batches of indices
        node: Any = nodes.SamplerWrapper(kwargs["batch_sampler"])
        batches: int | None = len(kwargs["batch_sampler"])
    else:
        drop_last = bool(kwargs.get("drop_last", False))
        node = nodes.Batcher(nodes.SamplerWrapper(kwargs["sampler"]), config.batch_size, drop_last=drop_last)
        n = len(kwargs["sampler"])
        batches = n // config.batch_size if drop_last else math.ceil(n / config.batch_size)
    node = nodes.ParallelMapper(
        node, FetchBatch(dataset, collate), config.num_workers, in_order=config.in_order, method="thread"
    )
    if config.pin_memory and torch.cuda.is_available():
        node = nodes.PinMemory(node)
    node = nodes.Prefetcher(node, (config.prefetch_factor or 2) * config.num_workers)
    return ThreadLoader(dataset, node, batches)
