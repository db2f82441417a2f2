"""`webdataset:PATTERN[:k=v,...]`: WebDataset tar shards, as read at scale.

PATTERN is a file, a brace pattern (`/data/shard-{000000..000009}.tar`) or a glob (`/data/*.tar`). Each sample
is the files of one key in a shard; its fields are decoded minimally and returned as a tuple (the other fields
in name order, then the label fields `.cls`, `.txt`, `.json`, `.index`, `.id`):
`.npy` → tensor (numpy.load), `.cls`/`.txt`/`.json` holding a number → int, an image (`.jpg`, `.png`, ...) →
uint8 CHW tensor (Pillow, shorter side resized and centre-cropped to `size` when given), any other field → its
raw bytes as a uint8 tensor. Shards are split over ranks (webdataset's split_by_node) and over each rank's
workers (split_by_worker), so fewer shards than ranks × workers leaves workers idle: `n_shards` is the count the
shard check reads.

Options: `size=N` (crop images to N×N), `fields=jpg+cls` (keep these fields, in this order), `shuffle=N`
(shuffle buffer). Needs `pip install webdataset`.
"""

from __future__ import annotations

import glob
import io
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from torch.utils.data import IterableDataset

from loadertop.core.datasets.errors import SpecError
from loadertop.core.datasets.options import split_options, whole

OPTIONS = ("size", "fields", "shuffle")
LABELS = ("cls", "txt", "json", "index", "id")
IMAGES = ("jpg", "jpeg", "png", "ppm", "bmp", "webp", "tif", "tiff")


def _remote(url: str) -> bool:
    """A shard webdataset fetches itself (http://, s3://, pipe:...): no local file to check."""
    return "://" in url or url.startswith("pipe:")


def expand(pattern: str) -> list[str]:
    """The shard files a pattern names, in order; SpecError when it names none or a file is missing."""
    try:
        from braceexpand import braceexpand
    except ImportError:
        raise SpecError("webdataset datasets need the webdataset package: pip install webdataset") from None
    urls: list[str] = []
    for part in braceexpand(pattern):
        local = not _remote(part)
        urls.extend(sorted(glob.glob(part)) if local and any(c in part for c in "*?[") else [part])
    if not urls:
        raise SpecError(f"webdataset {pattern!r}: no file matches")
    missing = [u for u in urls if not _remote(u) and not Path(u).is_file()]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise SpecError(f"webdataset {pattern!r}: shard {missing[0]!r} not found{more}")
    return urls


def open_webdataset(rest: str, kwargs: Mapping[str, str]) -> WebDatasetShards:
    try:
        import webdataset  # noqa: F401
    except ImportError:
        raise SpecError("webdataset datasets need the webdataset package: pip install webdataset") from None
    pattern, options = split_options("webdataset", rest, kwargs, OPTIONS)
    size = whole("webdataset", "size", options.get("size", "0"), 0)
    shuffle = whole("webdataset", "shuffle", options.get("shuffle", "0"), 0)
    fields = tuple(f.strip().lstrip(".") for f in options.get("fields", "").split("+") if f.strip())
    return WebDatasetShards(expand(pattern), size=size, fields=fields, shuffle=shuffle)


class WebDatasetShards(IterableDataset[tuple[Any, ...]]):
    """An IterableDataset over tar shards. Plain and module-level, so spawn workers unpickle it; the webdataset
    pipeline is built in each worker, in `__iter__`."""

    def __init__(self, urls: list[str], size: int = 0, fields: tuple[str, ...] = (), shuffle: int = 0) -> None:
        self.urls = list(urls)
        self.n_shards = len(self.urls)
        self.size = size
        self.fields = fields
        self.shuffle = shuffle

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        import webdataset as wds

        stages: list[Any] = [wds.SimpleShardList(self.urls), wds.split_by_node, wds.split_by_worker]
        stages.append(wds.tarfile_to_samples())
        if self.shuffle:
            stages.append(wds.shuffle(self.shuffle))
        for sample in wds.DataPipeline(*stages):
            yield self.decode(sample)

    def decode(self, sample: Mapping[str, Any]) -> tuple[Any, ...]:
        # Inputs first, labels last, as (image, label) datasets return them.
        keys = self.fields or tuple(sorted((k for k in sample if not k.startswith("__")), key=_label_last))
        return tuple(self._field(k, sample[k]) for k in keys)

    def _field(self, key: str, data: bytes) -> Any:
        import numpy as np
        import torch

        ext = key.rsplit(".", 1)[-1].lower()
        if ext == "npy":
            return torch.from_numpy(np.load(io.BytesIO(data), allow_pickle=False))
        if ext in LABELS:
            text = data.decode().strip()
            if text.lstrip("-").isdigit():
                return int(text)
        if ext in IMAGES:
            return self._image(data)
        return torch.frombuffer(bytearray(data), dtype=torch.uint8)

    def _image(self, data: bytes) -> Any:
        import numpy as np
        import torch
        from PIL import Image

        from loadertop.core.datasets.imagefolder import _center_crop, _resize_shorter

        with Image.open(io.BytesIO(data)) as image:
            rgb = image.convert("RGB")
        if self.size:
            rgb = _center_crop(_resize_shorter(rgb, self.size), self.size)
        return torch.from_numpy(np.ascontiguousarray(np.asarray(rgb).transpose(2, 0, 1)))


def _label_last(key: str) -> tuple[bool, str]:
    return key.rsplit(".", 1)[-1].lower() in LABELS, key
