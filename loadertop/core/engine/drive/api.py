"""The Python API: `loadertop.sweep(...)` runs a sweep and returns the result the JSON export writes."""

from __future__ import annotations

import copy
import pickle
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from loadertop.core.engine.drive.driver import Sweep
from loadertop.core.engine.drive.settings import build_settings
from loadertop.core.model.config import UsageError
from loadertop.core.model.events import Event
from loadertop.core.model.results import SweepResult

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack is 3.11+

Ints = str | int | Iterable[int]  # "32,64", 32 or [32, 64]
Bools = str | bool | Iterable[bool]  # "on,off", True or [True, False]


class SweepOptions(TypedDict, total=False):
    """`loadertop.sweep`'s keywords: the command line's flags with underscores (`loadertop --help`; one for each
    Settings field with an Option, the dataset aside), with the values the command line takes or Python's own."""

    dataset_args: Mapping[str, str] | Iterable[str | tuple[str, str]]  # {"root": "/data"}, ["root=/data"]
    workers: Ints  # also "0-8" and "auto"
    batch_size: Ints
    prefetch_factor: Ints
    pin_memory: Bools
    persistent_workers: Bools
    start_method: str | Iterable[str]  # "fork,spawn" or ["fork", "spawn"]
    in_order: Bools
    worker_threads: Ints
    worker_method: str | Iterable[str]  # "process,thread" or ["process", "thread"]
    step_ms: float
    consumer: str
    ranks: int
    trial_seconds: float
    trial_timeout: float
    mem_floor: str | Literal[0]  # "4GiB", "512MiB", "10%"; 0 is off
    files_per_sample: int
    interval: float
    tolerance: float
    target_spread: float
    min_blocks: int
    block_seconds: float
    skip_warmup: bool
    transport: bool
    join_timeout: float
    nodes: int
    node_rank: int
    rebuild_dataset: bool
    strict: bool
    stages: Literal["auto", "on", "off"]
    search: Literal["adaptive", "grid"]


def sweep(
    dataset: object = None,  # a spec string, a factory function, a Dataset or a (Stateful)DataLoader (see below)
    *,
    out_dir: str | Path | None = None,
    on_event: Callable[[Event], None] | None = None,
    **options: Unpack[SweepOptions],
) -> SweepResult:
    """Measure DataLoader configurations for `dataset` on this machine.

    `dataset` is a spec string (`"synthetic:io_ms=5"`, `"pkg.mod:make"`, `"train.py:make"`), a module-level
    factory function, a picklable Dataset instance, or a DataLoader or torchdata StatefulDataLoader not yet iterated
    (its dataset and its own arguments, shuffle, collate_fn, ...; each trial builds its class with the swept knobs)
    (default: the synthetic dataset). `options` are the command
    line's flags as keywords (SweepOptions types them), with the same defaults and checks (`loadertop --help`):
    `workers="0-8"` or `[0, 2, 4]`, `batch_size=[32, 64]`, `pin_memory=True`, `search="grid"`, `ranks=2`,
    `tolerance=0.1`, `dataset_args={"root": "/data"}`, `skip_warmup=False`, ...; bad values raise UsageError. Each
    trial runs in its own process group; the call blocks until the sweep ends and returns its SweepResult
    (`.to_dict()` is the JSON export).
    """
    spec, temporary = dataset_spec(dataset)
    try:
        settings = build_settings({**options, "dataset": spec})
        runner = Sweep(settings, out_dir=Path(out_dir) if out_dir else None)
        for event in runner.events():
            if on_event is not None:
                on_event(event)
        assert runner.result is not None
        return runner.result
    finally:
        if temporary is not None:
            temporary.unlink(missing_ok=True)


def dataset_spec(dataset: Any) -> tuple[str | None, Path | None]:
    """A spec string for what the runner must build (None: the default), and a temporary file to delete
    afterwards (if any)."""
    if dataset is None or isinstance(dataset, str):
        return dataset, None
    if callable(dataset) and hasattr(dataset, "__qualname__") and not hasattr(dataset, "__getitem__"):
        module = dataset.__module__
        if module == "__main__":
            main_file = getattr(sys.modules["__main__"], "__file__", None)
            if not main_file:
                raise UsageError("a factory defined in an interactive session cannot be imported by the runner")
            return f"{main_file}:{dataset.__qualname__}", None
        return f"{module}:{dataset.__qualname__}", None
    # A Dataset instance, or a loader (the runner reads its dataset and arguments: datasets/spec.py from_loader), is
    # handed over pickled: its classes must be importable, as for spawn workers; torch is not imported here.
    main_file = getattr(sys.modules["__main__"], "__file__", None) or ""
    path = pickled(_without_iterator(dataset) if _is_loader(dataset) else dataset)
    return f"pickle:{path}" + (f"@{main_file}" if main_file else ""), path


def _is_loader(obj: Any) -> bool:
    """A torch DataLoader or torchdata StatefulDataLoader, told by class (neither library imported for it)."""
    names = {(c.__module__.split(".")[0], c.__name__) for c in type(obj).__mro__}
    return ("torch", "DataLoader") in names or ("torchdata", "StatefulDataLoader") in names


def _without_iterator(loader: Any) -> Any:
    """A shallow copy of the loader without the iterator it keeps (persistent workers, a StatefulDataLoader's own):
    only its arguments are read, and live workers do not pickle. The user's loader is left as it was."""
    if getattr(loader, "_iterator", None) is None:
        return loader
    clone = copy.copy(loader)
    vars(clone)["_iterator"] = None  # past the loader's __setattr__, as unpickling sets it
    return clone


def pickled(dataset: Any) -> Path:
    """`dataset` pickled into a temporary file for the runner; when it cannot be, no file is left behind. A loader
    pickles with its dataset, sampler, generator and functions (one that was iterated holds its workers: refused)."""
    fd, name = tempfile.mkstemp(suffix=".pkl", prefix="loadertop-dataset-")
    path, written = Path(name), False
    try:
        with open(fd, "wb") as handle:
            pickle.dump(dataset, handle)
        written = True
    except Exception as exc:
        raise UsageError(f"the dataset cannot be pickled for the runner: {type(exc).__name__}: {exc}") from exc
    finally:
        if not written:  # a pickling error, or Ctrl-C halfway through a large dataset
            path.unlink(missing_ok=True)
    return path
