"""What `loadertop run`'s hook adds to each step of a DataLoader, measured in one process (steadier than whole
jobs on a shared machine): CPU time per batch of an epoch with no step, DataLoader.__iter__ plain and hooked.

    python benchmarks/run_hook_cost.py [--repeats 15] [--batches 20000]

A DataLoader over an in-memory TensorDataset (batch_size=1, 0 workers: what a real loader costs per batch, without
worker noise), one epoch per run, plain and hooked interleaved; the hooked epoch is watch()'s own (published, no
viewer). Reported: the best and median CPU µs per batch of each and their difference, the hook's cost per step.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import torch
import torch.utils.data.dataloader as dataloader_module
from torch.utils.data import DataLoader, TensorDataset


def epoch_cpu_us(loader: DataLoader[object], batches: int) -> float:
    start = time.process_time()
    for _ in loader:
        pass
    return (time.process_time() - start) / batches * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--batches", type=int, default=20000)
    args = p.parse_args()
    os.environ["LOADERTOP_JOBS_DIR"] = tempfile.mkdtemp(prefix="lt-hook-")
    from loadertop.core.job import run_hook

    loader = DataLoader(TensorDataset(torch.zeros(args.batches, 4)), batch_size=1)
    plain_iter = DataLoader.__iter__
    run_hook.patch(dataloader_module)
    hooked_iter = DataLoader.__iter__
    plain, hooked = [], []
    for _ in range(args.repeats):
        DataLoader.__iter__ = plain_iter  # type: ignore[method-assign]
        plain.append(epoch_cpu_us(loader, args.batches))
        DataLoader.__iter__ = hooked_iter  # type: ignore[method-assign]
        hooked.append(epoch_cpu_us(loader, args.batches))
    for name, pick in (("best", min), ("median", statistics.median)):
        a, b = pick(plain), pick(hooked)
        print(f"{name}: plain {a:.2f} µs/batch, hooked {b:.2f} µs/batch: the hook adds {b - a:+.2f} µs a step "
              f"({(b - a) / 1000 * 100:+.3f}% of a 1 ms step)")  # fmt: skip


if __name__ == "__main__":
    main()
