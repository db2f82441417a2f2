"""The ceiling: the consumer alone on a cached batch, the most the loader could ever be asked for.

No DataLoader can make training go faster than the training step itself. Before the sweep the runner forks a
process that takes one batch (0 workers), then feeds that same batch to the consumer (copy to the GPU plus the
fixed-length step, or a sleep of --step-ms on machines without CUDA) again and again. Every trial is then shown as
a fraction of it, and the adaptive search stops climbing once a trial is within noise of it.

With no CUDA and --step-ms 0 the consumer does nothing: there is no ceiling, only the loader bounds throughput,
and that is what the result says (samples_per_s None) rather than a meaningless huge number.

`measure_ceilings` runs in the driver (no torch); the forked half is trial/ceiling.py (imports torch).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loadertop.core.model.config import Settings
from loadertop.core.model.results import Ceiling

CEILING_INDEX = -1  # the ceiling's request index: never a trial's
MAX_SECONDS = 2.0  # per batch size; a sleep-based step of 100 ms still gives 20 steps
MIN_BLOCK_S = 0.1
MAX_BLOCKS = 10

Emit = Callable[[dict[str, Any]], None]
NextLine = Callable[[float, str], dict[str, Any]]


def measure_ceilings(send: Emit, next_line: NextLine, settings: Settings) -> tuple[Ceiling, ...]:
    """Ask the runner for the ceiling of each batch size; one Ceiling per batch size, whatever happens."""
    send({"type": "ceiling", "index": CEILING_INDEX, "settings": settings.to_dict()})
    found: dict[int, Ceiling] = {}
    error: str | None = None
    while True:
        message = next_line(settings.trial_timeout, "measure the consumer's ceiling")
        kind = message.get("type")
        if kind == "ceiling":
            bs = int(message["batch_size"])
            found[bs] = Ceiling(bs, message.get("samples_per_s"), message.get("note", ""), message.get("spread"))
        elif kind == "failed":
            error = message.get("error")
        elif kind == "exited":
            break
    missing = f"not measured ({error})" if error else "not measured"
    return tuple(found.get(bs, Ceiling(bs, None, missing)) for bs in settings.batch_sizes)


def describe(ceilings: tuple[Ceiling, ...]) -> str:
    parts = []
    for c in ceilings:
        if c.samples_per_s is None:
            parts.append(f"batch {c.batch_size}: no ceiling ({c.note})")
        else:
            parts.append(f"batch {c.batch_size}: {c.samples_per_s:.0f} samples/s ({c.note})")
    return "ceiling: " + "; ".join(parts)
