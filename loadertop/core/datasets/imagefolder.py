"""`imagefolder:PATH`: a real image pipeline, as torchvision's ImageFolder + Resize + CenterCrop would run it.

Files in class folders (PATH/<class>/<image>), decoded with Pillow, the shorter side resized, centre-cropped to a
square, turned into a CHW tensor (uint8, or float normalised with the ImageNet mean and std), labelled by folder.
torchvision is not needed (it often fails to import beside a given torch build).

Options, as `imagefolder:PATH:size=160,dtype=float` or `--dataset-arg size=160`:
  size=224      side of the centre crop
  resize=256    shorter side after resizing (default: size × 256/224, as in the usual ImageNet recipe)
  dtype=uint8   uint8 (decode cost only) or float (adds the normalisation)

Make a folder to try it: `python -m loadertop.core.datasets.imagefolder /tmp/images --count 2000`.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loadertop.core.datasets.errors import SpecError
from loadertop.core.datasets.options import split_options, whole

EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
OPTIONS = ("size", "resize", "dtype")


def open_image_folder(rest: str, kwargs: Mapping[str, str]) -> Any:
    """The dataset for `imagefolder:` + `rest` (PATH or PATH:k=v,...) and --dataset-arg options."""
    path, options = split_options("imagefolder", rest, kwargs, OPTIONS, what="folder")
    size = whole("imagefolder", "size", options.get("size", "224"), 1)
    resize = whole("imagefolder", "resize", options.get("resize", str(round(size * 256 / 224))), 1)
    if resize < size:
        raise SpecError(f"imagefolder options: resize={resize} is smaller than the crop size={size}")
    dtype = options.get("dtype", "uint8")
    if dtype not in ("uint8", "float"):
        raise SpecError(f"imagefolder option dtype={dtype!r}: expected uint8 or float")
    return ImageFolderDataset(path, size=size, resize=resize, dtype=dtype)


def scan(root: Path) -> tuple[list[str], list[tuple[str, int]]]:
    """Class names (sorted sub-folders) and (file, class index) pairs, sorted: the same order on every run."""
    if not root.is_dir():
        raise SpecError(f"imagefolder {str(root)!r}: folder not found")
    classes = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    samples = []
    for label, name in enumerate(classes):
        for file in sorted((root / name).rglob("*")):
            if file.suffix.lower() in EXTENSIONS and file.is_file():
                samples.append((str(file), label))
    if not samples:
        raise SpecError(f"imagefolder {str(root)!r}: no images found (expects {root}/<class>/<image>.jpg)")
    return classes, samples


class ImageFolderDataset:
    """Map-style dataset of (image tensor, class index). Module-level and plain, so spawn workers unpickle it."""

    def __init__(self, root: str | Path, size: int = 224, resize: int = 256, dtype: str = "uint8") -> None:
        self.root = str(root)
        self.size = size
        self.resize = resize
        self.dtype = dtype
        self.classes, self.samples = scan(Path(root))

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        # numpy for the per-sample array work: torch's intra-op threads cost more than they save on one image
        # (in the main process, at 0 workers, they tripled the CPU time per sample here).
        import numpy as np
        import torch
        from PIL import Image

        path, label = self.samples[index]
        with Image.open(path) as image:
            rgb = image.convert("RGB")
        rgb = _center_crop(_resize_shorter(rgb, self.resize), self.size)
        chw = np.ascontiguousarray(np.asarray(rgb).transpose(2, 0, 1))
        if self.dtype == "float":
            mean = np.asarray(MEAN, dtype=np.float32).reshape(3, 1, 1)
            std = np.asarray(STD, dtype=np.float32).reshape(3, 1, 1)
            chw = (chw.astype(np.float32) / 255 - mean) / std
        return torch.from_numpy(chw), label


def _resize_shorter(image: Any, side: int) -> Any:
    from PIL import Image

    w, h = image.size
    if min(w, h) == side:
        return image
    size = (side, max(1, round(h * side / w))) if w <= h else (max(1, round(w * side / h)), side)
    return image.resize(size, Image.Resampling.BILINEAR)


def _center_crop(image: Any, side: int) -> Any:
    w, h = image.size
    left = max(0, (w - side) // 2)
    top = max(0, (h - side) // 2)
    return image.crop((left, top, left + side, top + side))


def make_image_folder(
    root: str | Path, count: int, classes: int = 10, seed: int = 0, min_side: int = 300, max_side: int = 500
) -> Path:
    """Write `count` JPEGs (smooth gradients plus noise, sizes varying like photos) into `classes` folders."""
    import numpy as np
    from PIL import Image

    root = Path(root)
    rng = np.random.default_rng(seed)
    for c in range(classes):
        (root / f"class_{c:03d}").mkdir(parents=True, exist_ok=True)
    for i in range(count):
        w, h = (int(v) for v in rng.integers(min_side, max_side + 1, size=2))
        x = np.linspace(0, 1, w, dtype=np.float32)[None, :, None]
        y = np.linspace(0, 1, h, dtype=np.float32)[:, None, None]
        colour = rng.random((1, 1, 3), dtype=np.float32)
        pixels = (231 * (colour * x + (1 - colour) * y)).astype(np.uint8)
        pixels += rng.integers(0, 24, size=(h, w, 3), dtype=np.uint8)  # texture, so JPEGs decode like photos
        image = Image.fromarray(pixels, "RGB")
        image.save(root / f"class_{i % classes:03d}" / f"img_{i:06d}.jpg", quality=90)
    return root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadertop.core.datasets.imagefolder", description=make_image_folder.__doc__
    )
    parser.add_argument("root", type=Path, help="folder to create (class sub-folders go in it)")
    parser.add_argument("--count", type=int, default=2000, help="number of JPEGs (default 2000)")
    parser.add_argument("--classes", type=int, default=10, help="number of class folders (default 10)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.count < 1 or args.classes < 1:
        parser.error("--count and --classes must be at least 1")
    make_image_folder(args.root, args.count, args.classes, args.seed)
    print(f"wrote {args.count} JPEGs in {args.classes} class folders under {args.root}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
