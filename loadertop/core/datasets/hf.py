"""`hf:PATH[:k=v,...]`: a Hugging Face dataset saved with `save_to_disk`.

Map-style by default: `datasets.load_from_disk(PATH).with_format("torch")`, sharded over ranks by loadertop's
DistributedSampler like any map-style dataset. With `streaming=1` it is read as training at scale reads it: an
IterableDataset of `shards` shards (`to_iterable_dataset(num_shards=...)`), split over ranks with
`datasets.distributed.split_dataset_by_node` when torch.distributed is initialised, and over each rank's workers
by datasets itself (a worker beyond the shard count gets nothing: the shard check counts it).

Options: `streaming=1`, `shards=N` (default: the number of Arrow files), `split=NAME` (for a saved DatasetDict;
default `train`, or its only split), `columns=a+b` (keep these columns). Needs `pip install datasets`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loadertop.core.datasets.errors import SpecError
from loadertop.core.datasets.options import split_options, whole

OPTIONS = ("streaming", "shards", "split", "columns")


def open_hf(rest: str, kwargs: Mapping[str, str]) -> Any:
    try:
        import datasets
    except ImportError:
        raise SpecError("hf datasets need the datasets package: pip install datasets") from None
    path, options = split_options("hf", rest, kwargs, OPTIONS)
    if not Path(path).is_dir():
        raise SpecError(f"hf {path!r}: folder not found (expects a folder written by save_to_disk)")
    try:
        loaded = datasets.load_from_disk(path)
    except Exception as exc:
        raise SpecError(f"hf {path!r}: load_from_disk raised {type(exc).__name__}: {_line(exc)}") from exc
    data = _split(loaded, options.get("split"), path)
    columns = [c for c in options.get("columns", "").split("+") if c]
    if columns:
        missing = sorted(set(columns) - set(data.column_names))
        if missing:
            raise SpecError(f"hf {path!r} has no column {missing[0]!r} (it has {', '.join(data.column_names)})")
        data = data.select_columns(columns)
    if options.get("streaming", "0") in ("0", "false", "no", "off"):
        return data.with_format("torch")
    shards = whole("hf", "shards", options.get("shards") or str(max(1, len(data.cache_files))), 1)
    if shards > len(data):
        raise SpecError(f"hf option shards={shards}: more shards than the {len(data)} rows")
    stream = data.to_iterable_dataset(num_shards=shards)
    return _split_by_node(stream).with_format("torch")


def _split(loaded: Any, name: str | None, path: str) -> Any:
    """The Dataset in what load_from_disk returned: itself, or one split of a DatasetDict."""
    if not hasattr(loaded, "keys"):
        if name:
            raise SpecError(f"hf {path!r} is a single Dataset, not a DatasetDict: drop split={name}")
        return loaded
    names = list(loaded.keys())
    if name is None:
        name = "train" if "train" in names or len(names) != 1 else names[0]
    if name not in names:
        raise SpecError(f"hf {path!r} has no split {name!r} (it has {', '.join(names)}); pass split=NAME")
    return loaded[name]


def _split_by_node(stream: Any) -> Any:
    """Each rank its part of the shards, as a DDP job does (every rank reads all of them otherwise). The job's rank
    and world come from the environment a trial's ranks set (trial/world.py: across nodes too); else from a process
    group the factory's caller made."""
    import torch.distributed as dist

    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    elif dist.is_available() and dist.is_initialized():
        rank, world = dist.get_rank(), dist.get_world_size()
    else:
        return stream
    if world < 2:
        return stream
    from datasets.distributed import split_dataset_by_node

    return split_dataset_by_node(stream, rank=rank, world_size=world)


def _line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]
