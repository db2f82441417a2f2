"""A benchmark workload: a user's own JPEG pipeline with large float batches on saturated CPUs.

    --dataset benchmarks/workloads/decode_float.py:decode [--dataset-arg images=2000] [--dataset-arg size=160]
                                                          [--dataset-arg cache=DIR]

Each sample: Pillow decodes a 500×375 JPEG, takes a random crop of 60-100% of the shorter side, resizes it to
`size`×`size` (bilinear) and returns a 3×size×size float32 tensor in [0, 1] with its label. At batch 32 and size
160 a batch is 9.8 MB of floats: what crosses from each worker to the main process is large, so the main process's
share of the CPUs (unpickling, the shared-memory pages of every batch) matters as much as the workers' decode. The
JPEGs are generated once into the bench cache (bench_cache.py); nothing beyond Pillow, NumPy and torch is needed.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import bench_cache

WIDTH, HEIGHT = 500, 375


def make_jpegs(folder: Path, count: int, seed: int = 0) -> None:
    """`count` photo-like 500×375 JPEGs (gradients and grain, quality 90)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:HEIGHT, 0:WIDTH]
    for i in range(count):
        base = np.stack([(xx * (1 + i % 3) + yy) % 256, (yy * 2 + i) % 256, (xx + yy * (1 + i % 5)) % 256], -1)
        pixels = np.clip(base + rng.normal(0, 18, size=base.shape), 0, 255).astype("uint8")
        Image.fromarray(pixels).save(folder / f"{i:05d}.jpg", quality=90)


class DecodeFloat:
    """JPEG → random crop → resize → float tensor in [0, 1]; the label is the file's index modulo 10."""

    def __init__(self, files: list[Path], size: int) -> None:
        self.files = files
        self.size = size

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        import numpy as np
        import torch
        from PIL import Image

        with Image.open(self.files[index]) as img:
            img = img.convert("RGB")
            side = int(min(img.size) * random.uniform(0.6, 1.0))
            left = random.randint(0, img.size[0] - side)
            top = random.randint(0, img.size[1] - side)
            img = img.resize((self.size, self.size), Image.BILINEAR, box=(left, top, left + side, top + side))
            pixels = torch.from_numpy(np.asarray(img, dtype=np.uint8).copy())
        return pixels.permute(2, 0, 1).float().div_(255.0), index % 10


def decode(images: str | int = 2000, size: str | int = 160, cache: str = "") -> dict[str, Any]:
    count = bench_cache.positive("images", images)
    folder = bench_cache.ensure(
        bench_cache.cache_root(cache) / f"decode-float-jpegs-{count}", lambda tmp: make_jpegs(tmp, count)
    )
    files = sorted(folder.glob("*.jpg"))
    return {"dataset": DecodeFloat(files, bench_cache.positive("size", size)), "shuffle": True, "drop_last": True}
