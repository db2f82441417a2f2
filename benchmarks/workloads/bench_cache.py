"""Where the benchmark workloads keep the data they generate, and how they make it once.

A workload's data is a property of its parameters (count, seed, ...), so it lives in a folder named after them
under LOADERTOP_BENCH_CACHE (default ~/.cache/loadertop-bench) and is made on first use. It is written into a
temporary sibling and renamed into place, so a run cut short, or two processes making it at once, never leave a
half-made folder that a later run would take for a whole one.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


def cache_root(override: str = "") -> Path:
    """The folder that holds every workload's generated data: `override`, else the env variable, else ~/.cache."""
    chosen = override or os.environ.get("LOADERTOP_BENCH_CACHE") or str(Path.home() / ".cache" / "loadertop-bench")
    return Path(chosen).expanduser()


def ensure(folder: Path, make: Callable[[Path], None]) -> Path:
    """`folder`, made by `make(tmp)` into a temporary sibling first if it does not exist yet."""
    if folder.is_dir():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        make(tmp)
        try:
            tmp.rename(folder)
        except OSError:  # another process finished first: keep its copy
            if not folder.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def positive(name: str, value: str | int) -> int:
    """A factory's count argument (a string from --dataset-arg) as a positive int; ValueError names it."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}={value!r}: expected a whole number") from None
    if number < 1:
        raise ValueError(f"{name}={number}: expected at least 1")
    return number
