"""The built-in workload: a map-style dataset whose samples cost known CPU work, I/O wait and size.

With `contention` (σ) or `coherency` (κ) set, workers contend the way the Universal Scalability Law says: each
sample's I/O wait grows with the number of workers N running, io_ms × (1 + σ(N−1) + κN(N−1)), so throughput is
N / that, which peaks at N* = sqrt((1−σ)/κ) and falls after it. The wait is a sleep, so the curve of a big
machine's shared disk or lock (peak at 15-30 workers) shows on 2 cores. Each worker reads N from
torch.utils.data.get_worker_info(); the main process (0 workers) counts as one.

Imported only in runner processes (it needs torch).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, TypedDict

import torch
from torch.utils.data import Dataset, get_worker_info

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack is 3.11+


@dataclass(frozen=True)
class SyntheticSpec:
    """Cost model of one sample. The defaults make a visible knee on a 2-core machine in well under a minute:
    each worker delivers ~250 samples/s, and 2 CPUs cap the total near 650 samples/s, from 3 workers on."""

    length: int = 100_000
    cpu_ms: float = 3.0  # CPU time burnt per sample (thread CPU time, so contention slows it honestly)
    io_ms: float = 1.0  # blocked wait per sample, like a read from disk or network
    kb: int = 64  # size of the sample tensor
    fail_at: int = -1  # raise in __getitem__ at this index (fault injection for tests)
    contention: float = 0.0  # USL σ: share of each sample's wait serialised across workers
    coherency: float = 0.0  # USL κ: wait added per pair of workers

    def wait_s(self, workers: int) -> float:
        """One sample's blocked wait with `workers` workers running (the main process counts as one)."""
        n = max(1, workers)
        return self.io_ms / 1000 * (1.0 + self.contention * (n - 1) + self.coherency * n * (n - 1))


class SyntheticOptions(TypedDict, total=False):
    """SyntheticSpec's fields as keywords (`SyntheticDataset(cpu_ms=1.5, kb=8)`)."""

    length: int
    cpu_ms: float
    io_ms: float
    kb: int
    fail_at: int
    contention: float
    coherency: float


class SyntheticDataset(Dataset[tuple[torch.Tensor, int]]):
    def __init__(self, spec: SyntheticSpec | None = None, **overrides: Unpack[SyntheticOptions]) -> None:
        self.spec = spec or SyntheticSpec(**overrides)
        self._elements = max(1, self.spec.kb * 1024 // 4)

    def __len__(self) -> int:
        return self.spec.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if index == self.spec.fail_at:
            raise RuntimeError(f"synthetic failure at index {index}")
        info = get_worker_info()  # per sample, not cached: a process forked from a main that loaded sees its own
        wait = self.spec.wait_s(info.num_workers if info is not None else 1)
        if wait > 0:
            time.sleep(wait)
        burn_cpu(self.spec.cpu_ms / 1000)
        return torch.full((self._elements,), float(index)), index % 10


def burn_cpu(seconds: float) -> None:
    """Spin until this thread has used `seconds` of CPU time: under contention it takes longer in wall time,
    as real decoding would. A wall-clock spin would hide CPU saturation."""
    if seconds <= 0:
        return
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        for _ in range(200):
            x += 1


def parse_synthetic(options: str) -> SyntheticSpec:
    """`length=1000,cpu_ms=1.5` into a SyntheticSpec; raises ValueError naming the bad key or value."""
    kinds = {f.name: f.type for f in fields(SyntheticSpec)}
    values: dict[str, float | int] = {}
    for item in filter(None, (part.strip() for part in options.split(","))):
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or key not in kinds:
            known = ", ".join(kinds)
            raise ValueError(f"synthetic option {item!r} is not one of {known} (as key=value)")
        try:
            values[key] = int(text) if kinds[key] == "int" else float(text)
        except ValueError:
            raise ValueError(f"synthetic option {key}={text!r} is not a number") from None
    spec = SyntheticSpec(**values)  # type: ignore[arg-type]  # an int for each int field (kinds), a float for the rest
    if spec.length < 1:
        raise ValueError("synthetic option length must be at least 1")
    if min(spec.cpu_ms, spec.io_ms, spec.kb, spec.contention, spec.coherency) < 0:
        raise ValueError("synthetic options cpu_ms, io_ms, kb, contention and coherency cannot be negative")
    if spec.contention > 1:
        raise ValueError("synthetic option contention is a share of the wait: at most 1")
    return spec
