"""Dataset and consumer specs.

Datasets: `synthetic[:k=v,...]`, `imagefolder:PATH[:k=v,...]`, `webdataset:PATTERN[:k=v,...]` (tar shards),
`hf:PATH[:k=v,...]` (a Hugging Face dataset saved with save_to_disk), `package.module:callable`,
`path/to/file.py:callable` (and `pickle:PATH[@MAIN]` from the Python API). A factory returns a Dataset, a mapping
with `dataset` and DataLoader arguments, a DataLoader or torchdata StatefulDataLoader (its dataset, its non-swept
arguments and its class: every trial builds that class), or a torchdata.nodes graph (its root node or a Loader).
Consumers: `package.module:callable` or `path/to/file.py:callable`, a `(batch) -> None` training step.

Loading happens in runner processes (it imports the user's code and torch). Every way a spec can be wrong raises
SpecError with one line that names the problem.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadertop.core.datasets.errors import SpecError

# DataLoader arguments a factory may fix; the swept ones are loadertop's to choose.
SWEPT_KEYS = {"batch_size", "num_workers", "prefetch_factor", "pin_memory", "persistent_workers", "in_order"}
SWEPT_KEYS |= {"multiprocessing_context"}
# What a factory's mapping may hold besides `dataset`: the DataLoader's other keyword arguments.
EXTRA_KEYS = {"collate_fn", "sampler", "batch_sampler", "shuffle", "drop_last", "worker_init_fn", "generator"}
EXTRA_KEYS |= {"timeout", "pin_memory_device"}


@dataclass(frozen=True)
class Loaded:
    """What a spec built: the dataset, the extra loader kwargs, and the loader class every trial builds (None:
    torch's DataLoader; a factory's StatefulDataLoader, or a subclass of either, stays its own class)."""

    dataset: Any
    extra: dict[str, Any]
    loader_cls: type | None = None

    @property
    def loader_name(self) -> str:
        return self.loader_cls.__name__ if self.loader_cls is not None else "DataLoader"


def load_dataset(spec: str, kwargs: Mapping[str, str] | None = None) -> tuple[Any, dict[str, Any]]:
    """Return (dataset, extra DataLoader kwargs) for a spec."""
    loaded = load_spec(spec, kwargs)
    return loaded.dataset, loaded.extra


def load_spec(spec: str, kwargs: Mapping[str, str] | None = None) -> Loaded:
    """What a spec builds: the dataset, the extra DataLoader kwargs and the loader class."""
    name, _, rest = spec.partition(":")
    if name == "synthetic":
        from loadertop.core.datasets.synthetic import SyntheticDataset, parse_synthetic

        try:
            return Loaded(SyntheticDataset(parse_synthetic(rest)), {})
        except ValueError as exc:
            raise SpecError(str(exc)) from None
    if name == "imagefolder":
        from loadertop.core.datasets.imagefolder import open_image_folder

        return Loaded(open_image_folder(rest, dict(kwargs or {})), {})
    if name == "webdataset":
        from loadertop.core.datasets.wds import open_webdataset

        return Loaded(open_webdataset(rest, dict(kwargs or {})), {})
    if name == "hf":
        from loadertop.core.datasets.hf import open_hf

        return Loaded(open_hf(rest, dict(kwargs or {})), {})
    if name == "pickle":  # a Dataset instance, or a (Stateful)DataLoader, from the Python API
        from loadertop.core.datasets.loaders import is_loader

        made = _unpickle(rest)
        return from_loader(made, "the loader given as dataset=") if is_loader(made) else Loaded(made, {})
    target, attr = split_callable(spec, "dataset")
    factory = resolve_callable(target, attr)
    try:
        made = factory(**dict(kwargs or {}))
    except Exception as exc:
        raise SpecError(f"dataset factory {spec} raised {type(exc).__name__}: {exc}") from exc
    return check_loaded(made, f"dataset factory {spec}")


def check_dataset(made: Any, spec: str) -> tuple[Any, dict[str, Any]]:
    """What a factory returned, as (dataset, extra DataLoader kwargs); SpecError when it is not usable."""
    loaded = check_loaded(made, f"dataset factory {spec}")
    return loaded.dataset, loaded.extra


def check_loaded(made: Any, what: str) -> Loaded:
    """What a factory (`what` names it) returned, as a Loaded; SpecError when it is not usable."""
    from loadertop.core.datasets.loaders import is_loader

    if is_loader(made):
        return from_loader(made, what)
    extra: dict[str, Any] = {}
    if isinstance(made, Mapping):
        if "dataset" not in made:
            raise SpecError(f"{what} returned a mapping without a 'dataset' key")
        extra = {k: v for k, v in made.items() if k != "dataset"}
        swept = sorted(SWEPT_KEYS & extra.keys())
        if swept:
            raise SpecError(f"{what} fixes {', '.join(swept)}, which loadertop sweeps: drop them")
        unknown = sorted(extra.keys() - EXTRA_KEYS)
        if unknown:
            raise SpecError(f"{what} returned {', '.join(unknown)}, which DataLoader does not take")
        made = made["dataset"]
    if _is_graph(made):  # a torchdata.nodes pipeline: its own nodes batch and collate (trial/graph.py)
        if extra:
            raise SpecError(f"{what} returned a torchdata.nodes graph with {', '.join(sorted(extra))}: "
                            "a graph takes no DataLoader arguments; return the graph alone")  # fmt: skip
        return Loaded(made, extra)
    _check_sized(made, what)
    return Loaded(made, extra)


def from_loader(loader: Any, what: str) -> Loaded:
    """A DataLoader or StatefulDataLoader: its dataset, its own non-swept arguments (datasets/loaders.py) and its
    class. The knobs loadertop sweeps (num_workers, batch_size, ...) are the sweep's: the loader's are not kept."""
    from loadertop.core.datasets.loaders import loader_kwargs

    try:
        extra = loader_kwargs(loader)
    except Exception as exc:  # a subclass that hides an attribute DataLoader has: one line, not a traceback
        raise SpecError(f"{what} returned a {type(loader).__name__} whose arguments cannot be read: {exc}") from exc
    if _is_graph(loader.dataset):
        raise SpecError(f"{what} returned a {type(loader).__name__} over a torchdata.nodes graph: return the graph")
    _check_sized(loader.dataset, what)
    return Loaded(loader.dataset, extra, type(loader))


def _check_sized(made: Any, what: str) -> None:
    """A Dataset (or a sequence of samples) that is not empty."""
    from torch.utils.data import Dataset, IterableDataset

    is_sequence = hasattr(made, "__getitem__") and hasattr(made, "__len__") and not isinstance(made, str | bytes)
    if not isinstance(made, Dataset | IterableDataset) and not is_sequence:
        raise SpecError(f"{what} returned {type(made).__name__}, not a Dataset")
    if not isinstance(made, IterableDataset):
        try:
            size = len(made)
        except TypeError:
            size = None
        if size == 0:
            raise SpecError(f"{what} returned an empty dataset (len 0)")


def _is_graph(made: Any) -> bool:
    """A torchdata.nodes BaseNode or Loader. Such an object means its module is loaded: nothing else imports it."""
    if "torchdata.nodes" not in sys.modules:
        return False
    try:
        from torchdata.nodes import BaseNode, Loader
    except ImportError:
        return False
    return isinstance(made, BaseNode | Loader)


def split_callable(spec: str, what: str) -> tuple[str, str]:
    """`pkg.mod:name` or `path/file.py:name` into (target, name)."""
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        forms = "synthetic[:k=v,...], imagefolder:PATH, webdataset:PATTERN, hf:PATH, " if what == "dataset" else ""
        raise SpecError(f"{what} spec {spec!r}: expected {forms}package.module:callable or path/to/file.py:callable")
    return target, attr


def load_callable(spec: str, what: str) -> Any:
    """A consumer or other hook: the callable a `module:name` or `file.py:name` spec names."""
    return resolve_callable(*split_callable(spec, what))


def resolve_callable(target: str, attr: str) -> Any:
    if target.endswith(".py"):
        module = _import_file(Path(target))
    else:
        try:
            module = importlib.import_module(target)
        except ModuleNotFoundError as exc:
            raise SpecError(f"cannot import {target!r}: {exc}") from None
        except Exception as exc:
            raise SpecError(f"importing {target!r} raised {type(exc).__name__}: {exc}") from exc
    factory = module
    for part in attr.split("."):  # `module:Class.method` and the like
        factory = getattr(factory, part, None)
        if factory is None:
            raise SpecError(f"{target} has no attribute {attr!r}")
    if not callable(factory):
        raise SpecError(f"{target}:{attr} is not callable")
    return factory


def _import_file(path: Path) -> Any:
    if not path.is_file():
        raise SpecError(f"file {str(path)!r} not found")
    path = path.resolve()
    # Its folder goes on sys.path and the module is registered under its own name, so spawn and
    # forkserver workers (which re-import by name, with the parent's sys.path) can unpickle what it defines.
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    name = path.stem
    known = sys.modules.get(name)
    if known is not None:
        if getattr(known, "__file__", None) == str(path):
            return known
        raise SpecError(f"{path.name}: a module named {name!r} is already imported from elsewhere; rename the file")
    try:
        module = importlib.import_module(name)
    except Exception as exc:
        raise SpecError(f"importing {path.name} raised {type(exc).__name__}: {exc}") from exc
    if getattr(module, "__file__", None) != str(path):
        raise SpecError(f"{path.name}: the name {name!r} imports {module.__file__ or 'a built-in'}; rename the file")
    return module


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
