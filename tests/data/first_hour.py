"""A user's own image pipeline, as a first hour with loadertop has it: an ImageFolder-like dataset of JPEGs (PIL decode,
random resized crop, flip, ToTensor + Normalize, done with PIL and numpy: torchvision is an extra), the loader
keywords the user's factory sets, a small conv-net training step, and the mistake every new user makes once (a
dataset that returns PIL images with no ToTensor)."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)
SIDE = 96  # the crop: small, so a test's trials see many batches on 2 cores


def make_images(root: Path, classes: int = 3, per_class: int = 20) -> Path:
    rng = np.random.default_rng(0)
    for c in range(classes):
        (root / f"class{c}").mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            pixels = (rng.random((160, 200, 3)) * 80 + rng.integers(0, 170, 3)).astype(np.uint8)
            Image.fromarray(pixels).save(root / f"class{c}" / f"{i}.jpg", quality=85)
    return root


class Folder(Dataset):
    """PATH/<class>/<image>.jpg, labelled by folder; `tensors=False` is the forgotten ToTensor()."""

    def __init__(self, root: str, tensors: bool = True) -> None:
        folders = sorted(p for p in Path(root).iterdir() if p.is_dir())
        self.items = [(p, c) for c, d in enumerate(folders) for p in sorted(d.glob("*.jpg"))]
        self.tensors = tensors

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> tuple[Any, int]:
        path, label = self.items[i]
        img = Image.open(path).convert("RGB")
        w, h = img.size
        side = int(min(w, h) * math.sqrt(random.uniform(0.3, 1.0)))  # RandomResizedCrop, square
        x0, y0 = random.randint(0, w - side), random.randint(0, h - side)
        img = img.resize((SIDE, SIDE), Image.BILINEAR, box=(x0, y0, x0 + side, y0 + side))
        if random.random() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        if not self.tensors:
            return img, label
        a = (np.asarray(img, np.float32) / 255.0 - MEAN) / STD
        return torch.from_numpy(a.transpose(2, 0, 1).copy()), label


def build(root: str) -> dict[str, Any]:
    """The user's factory: the dataset and the loader keywords they chose (kept by every snippet)."""
    return {"dataset": Folder(root), "shuffle": True, "drop_last": True}


def pil_only(root: str) -> Folder:
    return Folder(root, tensors=False)


torch.manual_seed(0)
_net = torch.nn.Sequential(
    torch.nn.Conv2d(3, 8, 5, stride=4, padding=2), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
    torch.nn.Flatten(), torch.nn.Linear(8, 3),
)  # fmt: skip
_opt = torch.optim.SGD(_net.parameters(), lr=0.01)


def convnet_step(batch: Any) -> None:
    """The training step, for --consumer: forward, backward, update."""
    x, y = batch
    _opt.zero_grad()
    torch.nn.functional.cross_entropy(_net(x), y).backward()
    _opt.step()
