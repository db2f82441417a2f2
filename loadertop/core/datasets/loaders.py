"""A live DataLoader's (or torchdata StatefulDataLoader's) own arguments, recovered from the loader: it keeps no
record of what it was built with. A dataset factory may return a loader (the sweep rebuilds its class with each
trial's knobs and these arguments), and `loadertop.tune` pastes them into its snippet (job/resume.py).

Only the arguments loadertop does not sweep come back: shuffle (from the sampler's type), the user's own sampler or
batch_sampler, drop_last, collate_fn, worker_init_fn, generator, timeout, pin_memory_device, and a
StatefulDataLoader's snapshot_every_n_steps, each only where it is not the default, in that order.
"""

from __future__ import annotations

from typing import Any


def is_stateful(loader: Any) -> bool:
    """A torchdata StatefulDataLoader (or a subclass), told by its class: torchdata need not be installed."""
    return any(
        c.__name__ == "StatefulDataLoader" and c.__module__.startswith("torchdata") for c in type(loader).__mro__
    )


def is_loader(made: Any) -> bool:
    """A torch DataLoader or a StatefulDataLoader (a subclass of it)."""
    from torch.utils.data import DataLoader

    return isinstance(made, DataLoader)


def loader_kwargs(loader: Any) -> dict[str, Any]:
    """The non-swept keyword arguments `loader` was built with (their values, not defaults), in the order above."""
    from torch.utils.data import IterableDataset, default_collate, default_convert

    args: dict[str, Any] = {}
    own_batches = loader.batch_size is None and loader.batch_sampler is not None  # their batch_sampler
    if own_batches:
        args["batch_sampler"] = loader.batch_sampler
    elif not isinstance(loader.dataset, IterableDataset):  # an iterable's sampler is the loader's own placeholder
        args.update(_sampling(loader))
    elif loader.drop_last:
        args["drop_last"] = True
    default = default_collate if loader.batch_size is not None or own_batches else default_convert
    if loader.collate_fn is not default:
        args["collate_fn"] = loader.collate_fn
    for name in ("worker_init_fn", "generator"):
        if getattr(loader, name) is not None:
            args[name] = getattr(loader, name)
    if loader.timeout:
        args["timeout"] = loader.timeout
    if getattr(loader, "pin_memory_device", ""):
        args["pin_memory_device"] = loader.pin_memory_device
    if is_stateful(loader) and getattr(loader, "snapshot_every_n_steps", 1) != 1:
        args["snapshot_every_n_steps"] = loader.snapshot_every_n_steps
    return args


def _sampling(loader: Any) -> dict[str, Any]:
    """shuffle=True for the RandomSampler the loader builds itself, else their own sampler; drop_last."""
    from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler

    sampler: Any = loader.sampler
    args: dict[str, Any] = {}
    # torchdata's own RandomSampler (a StatefulDataLoader's shuffle=True) makes a generator when the loader has none
    stateful_random = is_stateful(loader) and type(sampler).__name__ == "RandomSampler"
    shuffled_by_loader = (  # the RandomSampler that shuffle=True builds: the loader's generator, as many as len()
        (isinstance(sampler, RandomSampler) or stateful_random)
        and (sampler.generator is loader.generator or (stateful_random and loader.generator is None))
        and not sampler.replacement
        and getattr(sampler, "_num_samples", None) is None
    )
    if shuffled_by_loader:
        args["shuffle"] = True
    elif not isinstance(sampler, SequentialSampler):
        args["sampler"] = sampler
    if isinstance(loader.batch_sampler, BatchSampler) and loader.drop_last:
        args["drop_last"] = True
    return args
