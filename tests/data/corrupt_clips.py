"""Short WAV clips read with soundfile, one of them corrupt: a dataset every configuration fails on past its first
batch, with the file in soundfile's own error.

The test writes the clips (`write_clips`), then sweeps `tests/data/corrupt_clips.py:build --dataset-arg root=DIR`.
No torch here: the test process imports this module to write the clips (default_collate batches the numpy arrays).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile

RATE = 8000


def write_clips(root: Path, count: int = 300, corrupt: int = 150) -> Path:
    """`count` clips of 0.1 s; clip `corrupt` is bytes no audio format has. Returns the corrupt file's path."""
    root.mkdir(parents=True, exist_ok=True)
    noise = np.random.default_rng(0).uniform(-0.5, 0.5, (count, RATE // 10)).astype(np.float32)
    for index in range(count):
        soundfile.write(root / f"clip_{index:04d}.wav", noise[index], RATE)
    bad = root / f"clip_{corrupt:04d}.wav"
    bad.write_bytes(b"not a wave file " * 64)
    return bad


class Clips:
    def __init__(self, root: str) -> None:
        self.files = sorted(Path(root).glob("*.wav"))

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> np.ndarray:
        samples, _ = soundfile.read(self.files[index], dtype="float32")
        return samples


def build(root: str) -> Clips:
    return Clips(root)
