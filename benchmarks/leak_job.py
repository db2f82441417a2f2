"""A training job whose DataLoader workers grow by copy-on-read, or do not: the leak detector's test subject.

    python benchmarks/leak_job.py --store dicts   # samples in a Python list of dicts: each read touches refcounts
    python benchmarks/leak_job.py --store numpy   # the same numbers in one numpy array: nothing to copy

Four persistent workers read consecutive batches (no shuffle), so each touches new pages at a steady rate set by
the step time, for as long as the epoch lasts (sized to outlast --minutes). The loop runs `loadertop.watch(loader)`.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

import loadertop


class Records(Dataset):
    def __init__(self, n: int, store: str) -> None:
        values = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
        if store == "dicts":
            self.rows = [{"id": i, "x": float(r[0]), "y": float(r[1]), "label": i % 10} for i, r in enumerate(values)]
        else:
            self.rows = values
        self.store = store

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> torch.Tensor:
        row = self.rows[i]
        if self.store == "dicts":
            return torch.tensor([row["x"], row["y"], float(row["label"])])
        return torch.from_numpy(row[:3].copy())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--store", choices=("dicts", "numpy"), required=True)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--step-ms", type=float, default=20.0)
    p.add_argument("--minutes", type=float, default=10.0)
    args = p.parse_args()
    # One epoch outlasts the run: each step takes at least step_ms, so this many batches cannot finish in time.
    n = int(args.minutes * 60 / (args.step_ms / 1000) * args.batch_size * 1.2)
    loader = DataLoader(Records(n, args.store), batch_size=args.batch_size, num_workers=args.workers,
                        persistent_workers=True)  # fmt: skip
    print(f"{args.store}: {n} samples, {args.workers} workers", flush=True)
    end = time.monotonic() + args.minutes * 60
    while time.monotonic() < end:
        for batch in loadertop.watch(loader):
            time.sleep(args.step_ms / 1000)
            batch.sum()
            if time.monotonic() >= end:
                break


if __name__ == "__main__":
    main()
