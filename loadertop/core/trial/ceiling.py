"""The ceilings' forked half: the consumer alone on a cached batch, then the transport (trial/transport.py);
engine/drive/ceiling_requests.py asks for them.

Runs in a process the runner forks, like a trial; imports torch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from loadertop.core.datasets.spec import Loaded
from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.protocol import CeilingMeasured, Emit, Failed

IDLE_NOTE = "the consumer does no work (no CUDA and --step-ms 0): only the loader bounds throughput"

MAX_SECONDS = 2.0  # per batch size; a sleep-based step of 100 ms still gives 20 steps
MIN_BLOCK_S = 0.1
MAX_BLOCKS = 10


def ceiling_main(settings: Settings, emit: Emit) -> int:
    """Measure the consumer alone, then the transport (transport.py), for each batch size and report; returns the
    process exit code."""
    try:
        from loadertop.core.trial.consumer import Consumer, make_consumer
        from loadertop.core.trial.sharding import batch_rows
        from loadertop.core.trial.shared import loaded_for
        from loadertop.core.trial.transport import measure_transport

        pin = settings.pin_memory[0]
        consumer = make_consumer(settings, TrialConfig(0, settings.batch_sizes[0], pin_memory=pin))
        idle = isinstance(consumer, Consumer) and consumer.device is None and consumer.step_s <= 0
        what = _what(consumer, settings)
        if idle and not settings.transport:  # nothing to time: no need to build the dataset here
            for bs in settings.batch_sizes:
                emit(CeilingMeasured(bs, None, IDLE_NOTE))
            return 0
        loaded = loaded_for(settings)
        for bs in settings.batch_sizes:
            batch = _cached_batch(loaded, bs, pin)
            if idle:
                emit(CeilingMeasured(bs, None, IDLE_NOTE))
            else:
                rate, spread = _steps_per_s(consumer, batch, min(MAX_SECONDS, settings.trial_seconds / 2))
                note = f"consumer alone on a cached batch: {what} per batch"
                emit(CeilingMeasured(bs, rate * batch_rows(batch, bs), note, spread))
            if settings.transport:
                measure_transport(settings, batch, bs, batch_rows(batch, bs), emit)
        return 0
    except BaseException as exc:
        import traceback

        from loadertop.core.trial.crashes import describe

        traceback.print_exc()
        emit(Failed(describe(exc)))  # one line, as a trial says it: the sweep stops when a trial repeats it
        return 1


def _cached_batch(loaded: Loaded, batch_size: int, pin: bool) -> Any:
    """One batch to step on: a 0-worker loader's (the factory's class), or a torchdata.nodes graph's own first item."""
    from torch.utils.data import DataLoader

    from loadertop.core.trial.graph import first_item, is_graph

    if is_graph(loaded.dataset):
        return first_item(loaded.dataset)
    cls = loaded.loader_cls or DataLoader
    return next(iter(cls(loaded.dataset, batch_size=batch_size, num_workers=0, pin_memory=pin, **loaded.extra)))


def _what(consumer: Any, settings: Settings) -> str:
    device = getattr(consumer, "device", None)
    if not hasattr(consumer, "step_s"):
        return f"your step {settings.consumer}"
    if device is None:
        return f"no CUDA: sleep {settings.step_ms:g} ms"
    return "copy to the GPU" + (f" + {settings.step_ms:g} ms kernel" if settings.step_ms > 0 else "")


def _steps_per_s(consumer: Callable[[Any], None], batch: Any, budget_s: float) -> tuple[float, float]:
    """Median steps/s over blocks of at least MIN_BLOCK_S, and their spread (IQR/median)."""
    from loadertop.core.model.figures import median_of, spread

    consumer(batch)  # the first step pays for allocations and CUDA warm-up
    rates: list[float] = []
    deadline = time.perf_counter() + budget_s
    while len(rates) < MAX_BLOCKS and (len(rates) < 3 or time.perf_counter() < deadline):
        start = time.perf_counter()
        steps = 0
        while True:
            consumer(batch)
            steps += 1
            elapsed = time.perf_counter() - start
            if elapsed >= MIN_BLOCK_S and steps >= 2:
                break
        rates.append(steps / elapsed)
    return median_of(rates) or 0.0, spread(rates) or 0.0
