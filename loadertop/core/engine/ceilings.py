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

from loadertop.core.model.config import Settings
from loadertop.core.model.protocol import CeilingMeasured, CeilingRequest, Exited, Failed, Reply, Request
from loadertop.core.model.results import Ceiling

CEILING_INDEX = -1  # the ceiling's request index: never a trial's

Send = Callable[[Request], None]
NextMessage = Callable[[float, str], Reply]  # (timeout, what the runner is doing) -> its next message


def measure_ceilings(send: Send, next_message: NextMessage, settings: Settings) -> tuple[Ceiling, ...]:
    """Ask the runner for the ceiling of each batch size; one Ceiling per batch size, whatever happens."""
    send(CeilingRequest(CEILING_INDEX, settings))
    found: dict[int, Ceiling] = {}
    error: str | None = None
    while True:
        message = next_message(settings.trial_timeout, "measure the consumer's ceiling")
        if isinstance(message, CeilingMeasured):
            found[message.batch_size] = Ceiling(message.batch_size, message.samples_per_s, message.note, message.spread)
        elif isinstance(message, Failed):
            error = message.error
        elif isinstance(message, Exited):
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
