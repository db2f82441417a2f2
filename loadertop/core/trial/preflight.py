"""The pre-flight measurements the check takes in the runner (imports torch): the bytes of one real batch (what each
batch in flight puts in /dev/shm) and the dataset pickled as spawn and forkserver workers receive it (its size, the
time to pickle and unpickle it, or the attribute that cannot be pickled). The engine words them
(engine/verdict/preflight.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

MAX_DEPTH = 6  # attribute paths deeper than this are not walked: the first failing level is named instead
MAX_ITEMS = 64  # items of a list, tuple or dict looked into when naming what cannot be pickled
START_TIMEOUT_S = 120.0  # one worker's start (an interpreter, the imports, the dataset unpickled) that takes longer


@dataclass(frozen=True)
class Pickled:
    """The dataset as a spawn or forkserver worker receives it."""

    nbytes: int
    dumps_s: float
    loads_s: float


def tensor_bytes(batch: Any) -> int:
    """The bytes of every tensor in a collated batch (tensors, and lists, tuples and dicts of them): what a worker
    puts in shared memory for the batch. Anything else (strings, ints) travels pickled, not through /dev/shm."""
    import torch

    if isinstance(batch, torch.Tensor):
        return int(batch.element_size() * batch.nelement())
    if isinstance(batch, dict):
        return sum(tensor_bytes(v) for v in batch.values())
    if isinstance(batch, list | tuple):
        return sum(tensor_bytes(v) for v in batch)
    return 0


def measure_pickle(dataset: Any) -> Pickled:
    """Pickle the dataset with the pickler multiprocessing uses for spawn and forkserver, and unpickle it: the
    size and the times each worker's start-up pays. Raises what pickling raises."""
    import pickle
    from multiprocessing.reduction import ForkingPickler

    start = time.perf_counter()
    data = bytes(ForkingPickler.dumps(dataset))
    dumped = time.perf_counter()
    pickle.loads(data)
    return Pickled(len(data), dumped - start, time.perf_counter() - dumped)


def measure_start(dataset: Any, method: str) -> float | None:
    """One worker of `method` started as a DataLoader starts it (a new interpreter that imports what the dataset
    needs and unpickles it), timed to its exit; None when it failed or hung (the trials will say why)."""
    import multiprocessing

    context: Any = multiprocessing.get_context(method)  # typeshed's BaseContext lacks Process
    process = context.Process(target=received, args=(dataset,), daemon=True)
    start = time.perf_counter()
    process.start()
    process.join(START_TIMEOUT_S)
    elapsed = time.perf_counter() - start
    if process.is_alive():  # never left behind
        process.kill()
        process.join()
        return None
    return elapsed if process.exitcode == 0 else None


def received(dataset: Any) -> None:
    """The started worker's whole job: it has the dataset (unpickled before this runs)."""
    del dataset


def unpicklable_path(value: Any, root: str = "dataset") -> tuple[str, str]:
    """The deepest attribute (or item) that fails to pickle, as `dataset.handle (a _io.BufferedReader)`, and how to
    fix it; the root itself when no part of it is to blame (a lambda, a local class)."""
    path, culprit = root, value
    for _ in range(MAX_DEPTH):
        found = next(((name, part) for name, part in _parts(culprit) if not _pickles(part)), None)
        if found is None:
            break
        path, culprit = path + found[0], found[1]
    kind = type(culprit)
    code = callable(culprit) and hasattr(culprit, "__qualname__")  # a function or class: where it is defined
    fix = ("define it at module level" if code else
           "open it in worker_init_fn or on first use in __getitem__, or leave it out in __getstate__")  # fmt: skip
    return f"{path} (a {kind.__module__}.{kind.__qualname__})", fix


def _parts(value: Any) -> Iterator[tuple[str, Any]]:
    """The attributes or items of a value, named as they are reached (.name, [0], ['key'])."""
    if isinstance(value, dict):
        for key in list(value)[:MAX_ITEMS]:
            yield f"[{key!r}]", value[key]
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value[:MAX_ITEMS]):
            yield f"[{i}]", item
    else:
        attributes = getattr(value, "__dict__", None)
        if isinstance(attributes, dict):
            for name, attribute in attributes.items():
                yield f".{name}", attribute


def _pickles(value: Any) -> bool:
    from multiprocessing.reduction import ForkingPickler

    try:
        ForkingPickler.dumps(value)
    except Exception:
        return False
    return True
