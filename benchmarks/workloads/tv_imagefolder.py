"""A benchmark workload: torchvision's ImageFolder with its standard ImageNet training transforms.

    --dataset benchmarks/workloads/tv_imagefolder.py:imagefolder [--dataset-arg images=2500] [--dataset-arg cache=DIR]

RandomResizedCrop(224), RandomHorizontalFlip, ToTensor, Normalize (ImageNet mean and std) over `images` JPEGs
generated once with Pillow (photo-like: sizes 256-500 px per side, smooth colour gradients, blobs and grain, so
decoding and resampling cost what they cost on photos), in 10 class folders under the bench cache (bench_cache.py).
Needs the `bench` extra (torchvision); loadertop itself never imports torchvision.

torchvision's Linux wheels on PyPI are CUDA builds. Beside a CPU build of torch (2.13.0+cpu here) their C++
extension cannot load, and torchvision 0.28's import then fails on its own unconditional fake-kernel registrations
for two detection ops ("operator torchvision::nms does not exist"; pytorch/vision issues 9085 and 9337, the guard
proposed in PR 9649). Only in that case, this module declares those two operator schemas first, so the import
goes through; it uses only the pure-Python parts (datasets, transforms on PIL images), and calling nms would still
raise torchvision's own "Couldn't load custom C++ ops".
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import bench_cache

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
CLASSES = 10
_SHIM: Any = None  # the torch.library fragment must stay alive for its schemas to stay registered


def import_torchvision() -> Any:
    """torchvision, importable beside a CPU torch (see the module docstring)."""
    global _SHIM
    import torch

    try:
        import torchvision

        return torchvision
    except RuntimeError as exc:
        if "torchvision::nms" not in str(exc) or _SHIM is not None:
            raise
    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]  # the failed import left half-initialised modules behind
    _SHIM = torch.library.Library("torchvision", "FRAGMENT")
    for op in ("nms", "qnms"):
        _SHIM.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    import torchvision

    return torchvision


def make_jpegs(root: Path, count: int, seed: int = 0) -> None:
    """`count` photo-like JPEGs (256-500 px per side, quality 90) into CLASSES class folders under `root`."""
    import numpy as np
    from PIL import Image, ImageDraw, ImageFilter

    rng = np.random.default_rng(seed)
    for c in range(CLASSES):
        (root / f"class_{c:02d}").mkdir(parents=True, exist_ok=True)
    for i in range(count):
        w, h = (int(v) for v in rng.integers(256, 501, size=2))
        x = np.linspace(0, 1, w, dtype=np.float32)[None, :, None]
        y = np.linspace(0, 1, h, dtype=np.float32)[:, None, None]
        a, b = rng.random((2, 1, 1, 3), dtype=np.float32)
        pixels = 255 * (a * x + b * y) / np.maximum(a + b, 1e-3)
        image = Image.fromarray(pixels.astype(np.uint8), "RGB")
        draw = ImageDraw.Draw(image)
        for _ in range(6):  # a few soft blobs: edges for the encoder, like objects in a photo
            cx, cy, r = int(rng.integers(0, w)), int(rng.integers(0, h)), int(rng.integers(20, 120))
            draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=tuple(int(v) for v in rng.integers(0, 256, 3)))
        image = image.filter(ImageFilter.GaussianBlur(2))
        grain = rng.integers(-12, 13, size=(h, w, 3), dtype=np.int16)
        pixels = np.clip(np.asarray(image, dtype=np.int16) + grain, 0, 255).astype(np.uint8)
        Image.fromarray(pixels, "RGB").save(root / f"class_{i % CLASSES:02d}" / f"img_{i:05d}.jpg", quality=90)


def training_transforms(torchvision: Any) -> Any:
    t = torchvision.transforms
    return t.Compose([t.RandomResizedCrop(224), t.RandomHorizontalFlip(), t.ToTensor(), t.Normalize(MEAN, STD)])


def imagefolder(images: str = "2500", cache: str = "", seed: str = "0") -> Any:
    """The dataset factory: torchvision.datasets.ImageFolder over the generated JPEGs, training transforms."""
    count, seed_ = bench_cache.positive("images", images), int(seed)
    folder = bench_cache.cache_root(cache) / f"tv-imagefolder-{count}-s{seed_}"
    bench_cache.ensure(folder, lambda tmp: make_jpegs(tmp, count, seed_))
    torchvision = import_torchvision()
    return torchvision.datasets.ImageFolder(str(folder), transform=training_transforms(torchvision))
