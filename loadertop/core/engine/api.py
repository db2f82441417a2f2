"""The Python API: `loadertop.sweep(...)` runs a sweep and returns the result the JSON export writes."""

from __future__ import annotations

import dataclasses
import pickle
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from loadertop.core.engine.driver import Sweep
from loadertop.core.machine.facts import usable_cpus
from loadertop.core.model.config import Settings, UsageError, default_start_method, parse_workers
from loadertop.core.model.events import Event
from loadertop.core.model.results import SweepResult


def sweep(
    dataset: str | Callable[..., Any] | Any = "synthetic",
    *,
    workers: str | Sequence[int] = "auto",
    batch_size: int | Sequence[int] = 32,
    prefetch_factor: int | Sequence[int] = 2,
    pin_memory: bool | Sequence[bool] = False,
    persistent_workers: bool | Sequence[bool] = False,
    start_method: str | Sequence[str] | None = None,
    step_ms: float = 0.0,
    trial_seconds: float = 8.0,
    out_dir: str | Path | None = None,
    on_event: Callable[[Event], None] | None = None,
    **settings: Any,
) -> SweepResult:
    """Measure DataLoader configurations for `dataset` on this machine.

    `dataset` is a spec string (`"synthetic:io_ms=5"`, `"pkg.mod:make"`, `"train.py:make"`), a module-level
    factory function, or a picklable Dataset instance. Each trial runs in its own process group; the
    call blocks until the sweep ends and returns its SweepResult (`.to_dict()` is the JSON export).
    """
    spec, kept = dataset_spec(dataset)
    config = Settings(
        dataset=spec,
        workers=parse_workers(workers, usable_cpus()) if isinstance(workers, str) else tuple(sorted(set(workers))),
        batch_sizes=_tuple(batch_size),
        prefetch_factors=_tuple(prefetch_factor),
        pin_memory=_tuple(pin_memory),
        persistent_workers=_tuple(persistent_workers),
        start_methods=_tuple(start_method) if start_method else (default_start_method(),),
        step_ms=step_ms,
        trial_seconds=trial_seconds,
    )
    config = dataclasses.replace(config, **settings)
    try:
        runner = Sweep(config, out_dir=Path(out_dir) if out_dir else None)
        for event in runner.events():
            if on_event is not None:
                on_event(event)
        assert runner.result is not None
        return runner.result
    finally:
        if kept is not None:
            kept.unlink(missing_ok=True)


def dataset_spec(dataset: Any) -> tuple[str, Path | None]:
    """A spec string for what the runner must build, and a temporary file to delete afterwards (if any)."""
    if isinstance(dataset, str):
        return dataset, None
    if callable(dataset) and hasattr(dataset, "__qualname__") and not hasattr(dataset, "__getitem__"):
        module = dataset.__module__
        if module == "__main__":
            main_file = getattr(sys.modules["__main__"], "__file__", None)
            if not main_file:
                raise UsageError("a factory defined in an interactive session cannot be imported by the runner")
            return f"{main_file}:{dataset.__qualname__}", None
        return f"{module}:{dataset.__qualname__}", None
    # A Dataset instance: hand it over pickled (its class must be importable, as for spawn workers).
    main_file = getattr(sys.modules["__main__"], "__file__", None) or ""
    with tempfile.NamedTemporaryFile("wb", suffix=".pkl", prefix="loadertop-dataset-", delete=False) as handle:
        try:
            pickle.dump(dataset, handle)
        except Exception as exc:
            raise UsageError(f"the dataset cannot be pickled for the runner: {type(exc).__name__}: {exc}") from exc
    return f"pickle:{handle.name}" + (f"@{main_file}" if main_file else ""), Path(handle.name)


def _tuple(value: Any) -> tuple[Any, ...]:
    if isinstance(value, list | tuple):
        return tuple(value)
    return (value,)
