"""A small CPU training job watched by loadertop: attach to it with `loadertop attach` from another terminal.

    python examples/train_watch.py --epochs 20 --workers 4 --batch-size 64
    python examples/train_watch.py --workers 4 --leak        # workers' memory grows by copy-on-read

The dataset is synthetic: each sample is a 1x28x28 image built with some CPU work (a few numpy ops) and a
label. By default the samples live in one numpy array; with --leak they are a Python list of dicts, and every
worker that reads them touches their reference counts, so the pages they live on are copied into the worker one
by one and each worker's USS grows through the epoch (pytorch issue 13246).

The loop is `for x, y in loadertop.watch(loader):`, one line changed from `for x, y in loader:`.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import loadertop


class Synthetic(Dataset):
    """`size` samples of a 28x28 image and a label out of 10, with `work` rounds of CPU work per sample."""

    def __init__(self, size: int, work: int, leak: bool) -> None:
        rng = np.random.default_rng(0)
        images = rng.standard_normal((size, 28, 28), dtype=np.float32)
        labels = rng.integers(0, 10, size)
        self.work = work
        self.leak = leak
        if leak:  # Python objects: each read writes a refcount, so the worker copies the page (copy-on-read)
            self.samples = [{"image": images[i].tolist(), "label": int(labels[i])} for i in range(size)]
        else:  # one array: reads touch no Python object per sample, the pages stay shared with the parent
            self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.samples) if self.leak else len(self.images)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if self.leak:
            sample = self.samples[i]
            image, label = np.asarray(sample["image"], dtype=np.float32), sample["label"]
        else:
            image, label = self.images[i], int(self.labels[i])
        for _ in range(self.work):  # the CPU work of decoding and augmenting, emulated
            image = np.tanh(image * 1.01 + 0.01)
        return torch.from_numpy(np.ascontiguousarray(image)).unsqueeze(0), label


def model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(8 * 14 * 14, 64),
        nn.ReLU(),
        nn.Linear(64, 10),
    )


def busy_wait(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description="A small CPU training job to watch with `loadertop attach`.")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--samples", type=int, default=20_000, help="dataset size (default 20000)")
    parser.add_argument("--work", type=int, default=20, help="rounds of CPU work per sample (default 20)")
    parser.add_argument("--step-ms", type=float, default=0.0, help="extra busy wait per step, in ms")
    parser.add_argument("--leak", action="store_true", help="store samples as a list of dicts (copy-on-read)")
    parser.add_argument("--persistent-workers", action="store_true")
    args = parser.parse_args()
    if args.epochs < 1 or args.workers < 0 or args.batch_size < 1 or args.samples < 1:
        parser.error("--epochs, --batch-size and --samples must be at least 1, --workers at least 0")

    torch.manual_seed(0)
    data = Synthetic(args.samples, args.work, args.leak)
    loader = DataLoader(
        data,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.workers,
        persistent_workers=args.persistent_workers and args.workers > 0,
    )
    net = model()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    print(f"pid {os.getpid()}: attach with `loadertop attach` from another terminal", flush=True)
    for epoch in range(args.epochs):
        start, total, seen = time.perf_counter(), 0.0, 0
        for x, y in loadertop.watch(loader):
            optimizer.zero_grad()
            loss = loss_fn(net(x), y)
            loss.backward()
            optimizer.step()
            busy_wait(args.step_ms / 1000)
            total += loss.item() * len(y)
            seen += len(y)
        seconds = time.perf_counter() - start
        print(f"epoch {epoch}: loss {total / seen:.4f}, {seen / seconds:,.0f} samples/s, {seconds:.1f} s", flush=True)


if __name__ == "__main__":
    main()
