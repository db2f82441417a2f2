"""Dataset specs: `synthetic[:k=v,...]`, `package.module:callable`, `path/to/file.py:callable`.

Loading happens in runner processes (it imports the user's code and torch). Every way a spec can be
wrong raises SpecError with one line that names the problem.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# DataLoader arguments a factory may fix; the swept ones are loadertop's to choose.
SWEPT_KEYS = {"batch_size", "num_workers", "prefetch_factor", "pin_memory", "persistent_workers"}
SWEPT_KEYS |= {"multiprocessing_context"}


class SpecError(ValueError):
    """The dataset spec cannot give a usable dataset (exit code 2)."""


def load_dataset(spec: str, kwargs: Mapping[str, str] | None = None) -> tuple[Any, dict[str, Any]]:
    """Return (dataset, extra DataLoader kwargs) for a spec."""
    from torch.utils.data import Dataset, IterableDataset

    name, _, rest = spec.partition(":")
    if name == "synthetic":
        from loadertop.core.workload import SyntheticDataset, parse_synthetic

        try:
            return SyntheticDataset(parse_synthetic(rest)), {}
        except ValueError as exc:
            raise SpecError(str(exc)) from None
    if name == "pickle":
        return _unpickle(rest), {}
    if not rest:
        raise SpecError(f"dataset spec {spec!r}: expected synthetic[:k=v,...], module:callable or file.py:callable")

    factory = _resolve(name, rest)
    try:
        made = factory(**dict(kwargs or {}))
    except Exception as exc:
        raise SpecError(f"dataset factory {spec} raised {type(exc).__name__}: {exc}") from exc

    extra: dict[str, Any] = {}
    if isinstance(made, Mapping):
        if "dataset" not in made:
            raise SpecError(f"dataset factory {spec} returned a mapping without a 'dataset' key")
        extra = {k: v for k, v in made.items() if k != "dataset"}
        swept = sorted(SWEPT_KEYS & extra.keys())
        if swept:
            raise SpecError(f"dataset factory {spec} fixes {', '.join(swept)}, which loadertop sweeps: drop them")
        made = made["dataset"]
    if not isinstance(made, Dataset | IterableDataset) and not hasattr(made, "__getitem__"):
        raise SpecError(f"dataset factory {spec} returned {type(made).__name__}, not a Dataset")
    if not isinstance(made, IterableDataset):
        try:
            size = len(made)
        except TypeError:
            size = None
        if size == 0:
            raise SpecError(f"dataset factory {spec} returned an empty dataset")
    return made, extra


def _resolve(target: str, attr: str) -> Any:
    if target.endswith(".py"):
        module = _import_file(Path(target))
    else:
        try:
            module = importlib.import_module(target)
        except ModuleNotFoundError as exc:
            raise SpecError(f"cannot import {target!r}: {exc}") from None
        except Exception as exc:
            raise SpecError(f"importing {target!r} raised {type(exc).__name__}: {exc}") from exc
    factory = getattr(module, attr, None)
    if factory is None:
        raise SpecError(f"{target} has no attribute {attr!r}")
    if not callable(factory):
        raise SpecError(f"{target}:{attr} is not callable")
    return factory


def _import_file(path: Path) -> Any:
    if not path.is_file():
        raise SpecError(f"dataset file {str(path)!r} not found")
    path = path.resolve()
    # Its folder goes on sys.path and the module is registered under its own name, so spawn and
    # forkserver workers (which re-import by name) can unpickle what it defines.
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    name = path.stem
    try:
        if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(path):
            return sys.modules[name]
        return importlib.import_module(name)
    except Exception as exc:
        raise SpecError(f"importing {path.name} raised {type(exc).__name__}: {exc}") from exc


def _unpickle(target: str) -> Any:
    """`pickle:PATH[@MAIN]`: a Dataset handed over by the Python API. Classes the caller defined in its
    script are found by loading that script as `__mp_main__`, as multiprocessing's spawn does."""
    import pickle
    import runpy
    import types

    path, _, main_file = target.partition("@")
    if main_file and Path(main_file).is_file() and "__mp_main__" not in sys.modules:
        namespace = runpy.run_path(main_file, run_name="__mp_main__")
        module = types.ModuleType("__mp_main__")
        module.__dict__.update(namespace)
        sys.modules["__mp_main__"] = sys.modules["__main__"] = module
    try:
        with open(path, "rb") as handle:
            return pickle.load(handle)
    except Exception as exc:
        raise SpecError(f"cannot unpickle the dataset: {type(exc).__name__}: {exc}") from exc
