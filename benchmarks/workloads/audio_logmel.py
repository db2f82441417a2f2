"""A benchmark workload: an audio classifier's input pipeline, soundfile + log-mel + SpecAugment-style masking.

    --dataset benchmarks/workloads/audio_logmel.py:audio [--dataset-arg clips=400] [--dataset-arg seconds=2]
                                                         [--dataset-arg cache=DIR] [--dataset-arg lazy=1]

Each sample: `soundfile.read` of a 16 kHz mono WAV clip (tones, chirps and noise, generated once into the bench
cache), a log-mel spectrogram (STFT of 512 points, hop 160, 64 mel bands from librosa's filter bank), then one
time mask and one frequency mask: a float32 tensor of 64 × frames with its label. Needs the `bench` extra
(soundfile, librosa).

`lazy=1`: each sample is pre-emphasised by `librosa.effects.preemphasis`, with `librosa.effects` imported inside
`__getitem__` (about 2 s of imports here): the factory never imports it, so every fresh worker pays that import on
its first sample, and without persistent_workers every epoch starts fresh workers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import bench_cache

RATE = 16_000
N_FFT, HOP, MELS = 512, 160, 64


def make_clips(folder: Path, count: int, seconds: float, seed: int = 0) -> None:
    """`count` WAV clips of `seconds`: a chirp and a tone over noise, each clip its own pitch."""
    import numpy as np
    import soundfile

    rng = np.random.default_rng(seed)
    t = np.arange(int(RATE * seconds)) / RATE
    for i in range(count):
        f0, f1 = rng.uniform(100, 2000), rng.uniform(200, 6000)
        chirp = np.sin(2 * np.pi * (f0 + (f1 - f0) * t / (2 * seconds)) * t)
        tone = 0.5 * np.sin(2 * np.pi * rng.uniform(50, 4000) * t)
        wave = 0.3 * (chirp + tone) + 0.05 * rng.standard_normal(t.size)
        soundfile.write(folder / f"{i:05d}.wav", wave.astype("float32"), RATE, subtype="PCM_16")


class LogMel:
    """WAV → log-mel → one time mask and one frequency mask (SpecAugment's two masks, widths drawn per sample)."""

    def __init__(self, files: list[Path], mel_basis: Any, lazy: bool = False) -> None:
        self.files = files
        self.mel_basis = mel_basis  # (MELS, N_FFT // 2 + 1) float32, made once by librosa
        self.lazy = lazy  # import librosa.effects per process, on its first sample

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        import numpy as np
        import soundfile
        import torch

        wave, _ = soundfile.read(self.files[index], dtype="float32")
        if self.lazy:
            import librosa.effects  # a heavy import the parent never made: each fresh worker pays it

            wave = librosa.effects.preemphasis(wave)
        window = torch.hann_window(N_FFT)
        spec = torch.stft(torch.from_numpy(wave), N_FFT, HOP, window=window, return_complex=True).abs().pow_(2)
        mel = torch.log(torch.from_numpy(self.mel_basis) @ spec + 1e-6)
        rng = np.random.default_rng()
        frames = mel.shape[1]
        t0, tw = int(rng.integers(0, frames)), int(rng.integers(0, frames // 8 + 1))
        f0, fw = int(rng.integers(0, MELS)), int(rng.integers(0, MELS // 8 + 1))
        mel[:, t0 : t0 + tw] = 0.0
        mel[f0 : f0 + fw, :] = 0.0
        return mel, index % 10


def audio(
    clips: str | int = 400, seconds: str | float = 2, cache: str = "", lazy: str | bool = False
) -> dict[str, Any]:
    import librosa
    import numpy as np

    count = bench_cache.positive("clips", clips)
    length = float(seconds)
    folder = bench_cache.ensure(
        bench_cache.cache_root(cache) / f"audio-clips-{count}-{length:g}s", lambda tmp: make_clips(tmp, count, length)
    )
    basis = librosa.filters.mel(sr=RATE, n_fft=N_FFT, n_mels=MELS).astype(np.float32)
    eager = str(lazy).lower() in ("", "0", "false", "no", "off")
    return {"dataset": LogMel(sorted(folder.glob("*.wav")), basis, not eager), "shuffle": True, "drop_last": True}
