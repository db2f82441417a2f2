"""Is an IterableDataset sharded across workers? Told by sample identity.

Each DataLoader worker gets its own copy of an IterableDataset. Unless `__iter__` splits the stream with
`torch.utils.data.get_worker_info()`, every worker yields the same items: N workers load every sample N times, and
the throughput counts duplicates. Here every sample of the first batches is fingerprinted (a hash of its bytes);
when a large share of them repeats samples from earlier batches while the first batch itself is varied, the
workers are not sharding.
"""

from __future__ import annotations

import hashlib
from typing import Any

MIN_SAMPLES = 8  # fewer than this proves nothing either way


def _is_tensor(value: Any) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype")


def _leaves(batch: Any, size: int, depth: int = 0) -> list[Any]:
    """The parts of a batch that hold one entry per sample: tensors with `size` rows, or lists of `size` items."""
    if _is_tensor(batch):
        return [batch] if batch.shape and batch.shape[0] == size else []
    if depth > 4:
        return []
    if isinstance(batch, dict):
        return [leaf for value in batch.values() for leaf in _leaves(value, size, depth + 1)]
    if isinstance(batch, list | tuple):
        if len(batch) == size and batch and not any(_is_tensor(v) or isinstance(v, dict | list | tuple) for v in batch):
            return [batch]  # a collated list of strings, paths, ids
        return [leaf for value in batch for leaf in _leaves(value, size, depth + 1)]
    return []


def _row_bytes(leaf: Any, i: int) -> bytes:
    if _is_tensor(leaf):
        row = leaf[i]
        if hasattr(row, "detach"):  # a torch tensor; numpy arrays have tobytes already
            row = row.detach().cpu().contiguous().numpy()
        data: bytes = row.tobytes()  # a numpy array's (the leaf is untyped: a tensor or an array)
        return data
    return repr(leaf[i]).encode()


def batch_rows(batch: Any, default: int = 1) -> int:
    """Samples in a batch: the leading dimension of its first tensor, else `default` (1: a whole item; a custom
    collate may build something without a leading dimension)."""
    first = batch
    while isinstance(first, list | tuple) and first:
        first = first[0]
    if isinstance(first, dict) and first:
        first = next(iter(first.values()))
    shape = getattr(first, "shape", None)
    return int(shape[0]) if shape else default


def sample_fingerprints(batch: Any) -> list[bytes]:
    """One short hash per sample of a collated batch (all its parts: input, label, ...)."""
    size = batch_rows(batch)
    leaves = _leaves(batch, size) if size > 1 else []
    if not leaves:
        return [hashlib.blake2b(repr(batch).encode(), digest_size=8).digest()]
    out = []
    for i in range(size):
        h = hashlib.blake2b(digest_size=8)
        for leaf in leaves:
            h.update(_row_bytes(leaf, i))
        out.append(h.digest())
    return out


class ShardCheck:
    """Collects fingerprints batch by batch; `verdict()` is a warning when the workers repeat each other."""

    def __init__(self, num_workers: int) -> None:
        self.num_workers = num_workers
        self.seen: set[bytes] = set()
        self.samples = 0
        self.repeats = 0  # samples equal to one in an earlier batch
        self.batches = 0
        self.first_distinct: int | None = None

    def add(self, batch: Any) -> None:
        prints = sample_fingerprints(batch)
        if self.first_distinct is None:
            self.first_distinct = len(set(prints))
        self.repeats += sum(1 for p in set(prints) if p in self.seen)
        self.seen.update(prints)
        self.samples += len(set(prints))
        self.batches += 1

    def verdict(self) -> str | None:
        n = self.num_workers
        if n < 2 or self.samples < MIN_SAMPLES or self.batches < n:
            return None
        if self.first_distinct is not None and self.first_distinct < 2 and self.samples > self.batches:
            return None  # every sample alike: identity says nothing
        # Unsharded, each sample comes from every worker: about (n-1)/n of them are repeats.
        if self.repeats / self.samples < max(0.25, 0.5 * (n - 1) / n):
            return None
        return (
            f"IterableDataset not sharded across workers: the {n} workers yield the same samples "
            f"({self.repeats} of {self.samples} samples in the first {self.batches} batches were repeats), so each "
            f"sample is loaded {n} times; split the stream in __iter__ with torch.utils.data.get_worker_info()"
        )
