"""Datasets for tests/test_stages.py, built by `loadertop stages` in its child process (file specs:
tests/stage_datasets.py:NAME). Their costs are real: a transform that spins the CPU, a package whose import takes
time (stage_heavy.py), imported inside __getitem__ or before the workers start."""

from __future__ import annotations

import importlib
import time
from typing import Any

import torch
from torch.utils.data import Dataset

SPIN_S = 0.002  # the slow step's CPU time per sample


def spin_cpu(seconds: float) -> None:
    """Burn `seconds` of this thread's CPU time (the same cost however busy the machine is)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


class Scale:
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2.0


class SlowStep:
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        spin_cpu(SPIN_S)
        return x


class Shift:
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1.0


class Compose:
    """What torchvision's Compose is to loadertop: a `.transforms` list applied in turn."""

    def __init__(self, transforms: list[Any]) -> None:
        self.transforms = transforms

    def __call__(self, x: Any) -> Any:
        for step in self.transforms:
            x = step(x)
        return x


class Tensors(Dataset[tuple[torch.Tensor, int]]):
    def __init__(self, transform: Any = None, length: int = 512) -> None:
        self.transform = transform
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        x = torch.full((3, 16, 16), float(index % 7))
        return (self.transform(x) if self.transform is not None else x), index % 10


class LazyImport(Tensors):
    """Imports stage_heavy (a slow import) inside __getitem__, as code that imports librosa there does."""

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        import stage_heavy

        stage_heavy.touch()
        return super().__getitem__(index)


def slow_step() -> Tensors:
    return Tensors(Compose([Scale(), SlowStep(), Shift()]))


def lazy(eager: str = "0") -> LazyImport:
    """eager=1: the import done here, before the workers fork (as at the top of the dataset's module)."""
    if eager == "1":
        importlib.import_module("stage_heavy")
    return LazyImport()


class Broken(Tensors):
    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        raise ValueError(f"corrupt sample {index}")


def broken() -> Broken:
    return Broken()


def slow_samples() -> Tensors:
    return Tensors(SlowStep())


class Decode:
    """A graph's map function that spins the CPU in Python code (holding the GIL), as decoding a sample does."""

    def __call__(self, index: int) -> torch.Tensor:
        spin_cpu(SPIN_S / 2)
        return torch.full((3, 16, 16), float(index % 7))


class DecodeInTorch:
    """A graph's map function whose work is torch's C code (a matrix product, which releases the GIL)."""

    def __init__(self) -> None:
        self.matrix = torch.rand(192, 192)

    def __call__(self, index: int) -> torch.Tensor:
        for _ in range(4):
            torch.mm(self.matrix, self.matrix)
        return torch.full((3, 16, 16), float(index % 7))


def graph(work: str = "python") -> Any:
    """A torchdata.nodes graph: sampler → thread mapper (Decode; work=torch: DecodeInTorch) → Batcher →
    Mapper(collate) → Prefetcher."""
    from torch.utils.data import RandomSampler, default_collate
    from torchdata.nodes import Batcher, Mapper, ParallelMapper, Prefetcher, SamplerWrapper

    node: Any = SamplerWrapper(RandomSampler(range(512)))
    node = ParallelMapper(node, DecodeInTorch() if work == "torch" else Decode(), num_workers=2, method="thread")
    node = Mapper(Batcher(node, batch_size=16), default_collate)
    return Prefetcher(node, prefetch_factor=2)


def write_wds(folder: Any, shards: int = 2, per_shard: int = 24) -> str:
    """Real WebDataset shards, written with tarfile: per sample a 32×32 JPEG (`KEY.jpg`) and its label (`KEY.cls`);
    returns the `webdataset:` pattern."""
    import io
    import tarfile

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for s in range(shards):
        with tarfile.open(f"{folder}/shard-{s:06d}.tar", "w") as tar:
            for i in range(per_shard):
                image = io.BytesIO()
                Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(image, "JPEG")
                for name, data in ((f"{s:03d}{i:05d}.jpg", image.getvalue()), (f"{s:03d}{i:05d}.cls", b"3")):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    return f"{folder}/shard-{{000000..{shards - 1:06d}}}.tar"


def write_hf(folder: Any, rows: int = 256) -> str:
    """A Hugging Face dataset saved with save_to_disk in 2 Arrow files (a vector and a label per row)."""
    import datasets
    import pyarrow as pa
    from datasets.table import InMemoryTable

    columns = {"x": [[float(i)] * 32 for i in range(rows)], "label": [i % 10 for i in range(rows)]}
    table = InMemoryTable(pa.table(columns))
    # A fingerprint given: datasets cannot hash a pyarrow table to make one.
    datasets.Dataset(table, fingerprint="loadertop-stages").save_to_disk(str(folder), num_shards=2)
    return str(folder)


def _corrupt(index: int) -> Any:
    raise ValueError(f"corrupt sample {index}")


def broken_graph() -> Any:
    """A graph whose map function fails on every sample."""
    from torchdata.nodes import IterableWrapper, ParallelMapper

    return ParallelMapper(IterableWrapper(range(64)), _corrupt, num_workers=1, method="thread")
