"""The training step each batch goes to: the user's own (`--consumer SPEC`) or an emulated one (`--step-ms`).

Runs in trial processes. Its time is the "step" side of the stall fraction: blocked ÷ (blocked + step).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from loadertop.core.datasets.spec import load_callable
from loadertop.core.model.config import Settings, TrialConfig

Step = Callable[[Any], None]


class Consumer:
    """The training step's stand-in: on CUDA copy the batch and run a fixed-length kernel; else sleep."""

    def __init__(self, step_ms: float, pin_memory: bool) -> None:
        self.step_s = step_ms / 1000
        self.device = None
        self.non_blocking = pin_memory
        import torch

        if torch.cuda.is_available():
            self.device = torch.device("cuda")
            self._cycles_per_s = _calibrate_cuda_sleep() if self.step_s > 0 else 0.0

    def __call__(self, batch: Any) -> None:
        if self.device is None:
            if self.step_s > 0:
                time.sleep(self.step_s)
            return
        import torch

        _to_device(batch, self.device, self.non_blocking)
        if self.step_s > 0:
            _cuda_sleep(int(self._cycles_per_s * self.step_s))
        torch.cuda.synchronize()


class UserConsumer:
    """The user's `(batch) -> None` step. If it used CUDA, wait for its kernels: otherwise their time would
    hide in the next step instead of counting as this one's."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.step: Step = load_callable(spec, "consumer")

    def __call__(self, batch: Any) -> None:
        self.step(batch)
        import torch

        initialized: Callable[[], bool] = torch.cuda.is_initialized  # typed here: torch leaves it unannotated
        if initialized():
            torch.cuda.synchronize()


def make_consumer(settings: Settings, config: TrialConfig) -> Step:
    if settings.consumer:
        return UserConsumer(settings.consumer)
    return Consumer(settings.step_ms, config.pin_memory)


def _to_device(batch: Any, device: Any, non_blocking: bool) -> Any:
    if hasattr(batch, "to"):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, dict):
        return {k: _to_device(v, device, non_blocking) for k, v in batch.items()}
    if isinstance(batch, list | tuple):
        return [_to_device(v, device, non_blocking) for v in batch]
    return batch


def _calibrate_cuda_sleep() -> float:
    import torch

    cycles = 10_000_000
    _cuda_sleep(1000)
    torch.cuda.synchronize()
    start = time.perf_counter()
    _cuda_sleep(cycles)
    torch.cuda.synchronize()
    return cycles / max(time.perf_counter() - start, 1e-6)


def _cuda_sleep(cycles: int) -> None:
    """A kernel that spins for `cycles` GPU clocks (torch.cuda._sleep, typed here: torch leaves it unannotated)."""
    import torch

    spin: Callable[[int], None] = torch.cuda._sleep
    spin(cycles)
