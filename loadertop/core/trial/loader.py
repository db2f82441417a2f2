"""Build one trial's DataLoader from the spec and the configuration, with an epoch loadertop can end early.

Runs in trial (and rank) processes: it imports torch and the user's code.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from loadertop.core.datasets.errors import SpecError
from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.trial.shared import loaded_for


class EpochControl:
    """Wraps the sampler (or batch sampler) so an epoch can be ended early without touching the data.

    The DataLoader draws indices lazily in the main process, one batch at a time; after `end()` the wrapped
    sampler stops, the loader hands out the batches already in flight and raises StopIteration: a true epoch end,
    as in training, so the wait for the next epoch's first batch is measured where persistent workers pay.
    """

    def __init__(self, base: Any) -> None:
        self.base = base
        self._ending = False

    def __iter__(self) -> Iterator[Any]:
        self._ending = False  # a new epoch starts in full
        for item in self.base:
            if self._ending:
                return
            yield item

    def __len__(self) -> int:
        return len(self.base)

    def end(self) -> None:
        self._ending = True

    def set_epoch(self, epoch: int) -> None:
        if hasattr(self.base, "set_epoch"):
            self.base.set_epoch(epoch)


@dataclass
class Built:
    loader: Any
    control: EpochControl | None  # None for an IterableDataset: its epoch ends when its workers run dry
    iterable: bool
    extra_keys: tuple[str, ...]  # DataLoader arguments the factory fixed (collate_fn, sampler, ...)
    loader_name: str = "DataLoader"  # the class built: a factory's StatefulDataLoader stays one


def supports_in_order() -> bool:
    import inspect

    from torch.utils.data import DataLoader

    return "in_order" in inspect.signature(DataLoader).parameters


def build_loader(settings: Settings, config: TrialConfig, rank: int = 0, world: int = 1) -> Built:
    """The DataLoader of one trial (of one rank): the factory's extra arguments, the swept knobs, and an
    EpochControl around the sampler; with several ranks a DistributedSampler shards a map-style dataset. The class
    is the factory's loader's (a StatefulDataLoader: its snapshots cost what they cost in training), else DataLoader."""
    from torch.utils.data import DataLoader, IterableDataset

    from loadertop.core.trial.crashes import note_indices

    loaded = loaded_for(settings)  # the runner's build, inherited, unless each trial builds its own
    dataset, extra = loaded.dataset, loaded.extra
    from loadertop.core.trial.graph import is_graph

    if is_graph(dataset):  # a torchdata.nodes pipeline: rebuilt with this trial's knobs; its epoch ends by itself
        return _graph_loader(dataset, config, bool(settings.worker_methods))
    # Failures then name the sample index; not for spawn/forkserver workers, which re-pickle the dataset.
    dataset = note_indices(dataset, pickled=config.num_workers > 0 and config.start_method != "fork")
    kwargs: dict[str, Any] = dict(extra)
    iterable = isinstance(dataset, IterableDataset)
    control: EpochControl | None = None
    batch_size: int | None = config.batch_size
    if config.worker_method == "thread":
        return _threads(dataset, kwargs, settings, config, (rank, world), extra)
    if not iterable:
        control, batch_size = _sampling(dataset, kwargs, settings, config, rank, world)
    if config.num_workers > 0:
        from loadertop.core.trial.procs import DieWithParent

        user_init = kwargs.get("worker_init_fn")
        if config.worker_threads is not None:
            from loadertop.core.trial.threads import WorkerThreads

            user_init = WorkerThreads(config.worker_threads, user_init)
        # Workers die with their trial even when nobody is left to kill its process group.
        kwargs["worker_init_fn"] = DieWithParent(user_init, config.start_method != "forkserver")
        kwargs["prefetch_factor"] = config.prefetch_factor
        kwargs["persistent_workers"] = config.persistent_workers
        kwargs["multiprocessing_context"] = multiprocessing.get_context(config.start_method)
        if not config.in_order:
            kwargs["in_order"] = False  # only passed when asked: older torch has no such argument
        if iterable:  # per-worker sample counts: a worker that yields nothing is idle (shard_counts.py)
            from loadertop.core.trial.shard_counts import counting_collate

            counting_collate(kwargs, config)
    cls = loaded.loader_cls or DataLoader
    loader = cls(dataset, batch_size=batch_size, num_workers=config.num_workers, pin_memory=config.pin_memory, **kwargs)
    return Built(loader, control, iterable, tuple(sorted(extra)), loaded.loader_name)


def _threads(
    dataset: Any,
    kwargs: dict[str, Any],
    settings: Settings,
    config: TrialConfig,
    where: tuple[int, int],
    extra: dict[str, Any],
) -> Built:
    """Thread workers (trial/graph_loader.py): map-style datasets only, the same sampler and EpochControl."""
    from torch.utils.data import IterableDataset

    from loadertop.core.trial.graph_loader import build_thread_loader

    if isinstance(dataset, IterableDataset):
        raise SpecError("thread workers take map-style datasets only; use --worker-method process here")
    control, _ = _sampling(dataset, kwargs, settings, config, *where)
    return Built(build_thread_loader(dataset, kwargs, config), control, False, tuple(sorted(extra)))


def _sampling(
    dataset: Any, kwargs: dict[str, Any], settings: Settings, config: TrialConfig, rank: int, world: int
) -> tuple[EpochControl, int | None]:
    """Wrap the factory's sampler (or batch_sampler) in an EpochControl, in `kwargs`; with several ranks a
    DistributedSampler shards the dataset. Returns the control and the batch size to pass to the DataLoader."""
    from torch.utils.data import DistributedSampler, RandomSampler, SequentialSampler

    if "batch_sampler" in kwargs:
        if len(settings.batch_sizes) > 1:
            raise SpecError("the dataset factory fixes batch_sampler, so --batch-size cannot be swept")
        control = EpochControl(kwargs.pop("batch_sampler"))
        kwargs["batch_sampler"] = control
        return control, 1  # the DataLoader's default: batch_sampler excludes batch_size
    shuffle = bool(kwargs.pop("shuffle", False))
    base = kwargs.pop("sampler", None)
    if base is None and world > 1:
        base = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=shuffle)
    elif base is None and shuffle:
        base = RandomSampler(dataset, generator=kwargs.get("generator"))
    elif base is None:
        base = SequentialSampler(dataset)
    control = EpochControl(base)
    kwargs["sampler"] = control
    return control, config.batch_size


def _graph_loader(graph: Any, config: TrialConfig, method: bool) -> Built:
    """A torchdata.nodes Loader over the graph rebuilt for `config` (each iter() starts a new epoch); `method`:
    --worker-method was given, so the mappers take the config's."""
    from torchdata.nodes import Loader

    from loadertop.core.trial.graph import rebuild

    root = rebuild(graph, config, method)
    loader = root if isinstance(root, Loader) else Loader(root)
    return Built(loader, None, True, ())
