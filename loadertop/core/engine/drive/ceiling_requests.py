"""The ceiling: the consumer alone on a cached batch, the most the loader could ever be asked for.

No DataLoader can make training go faster than the training step itself. Before the sweep the runner forks a
process that takes one batch (0 workers), then feeds that same batch to the consumer (copy to the GPU plus the
fixed-length step, or a sleep of --step-ms on machines without CUDA) again and again. Every trial is then shown as
a fraction of it, and the adaptive search stops climbing once a trial is within noise of it.

With no CUDA and --step-ms 0 the consumer does nothing: there is no ceiling, only the loader bounds throughput,
and that is what the result says (samples_per_s None) rather than a meaningless huge number.

The transport ceiling (trial/transport.py) is measured in the same process, after the consumer's: a null dataset
with the first batch's structure through the same DataLoader settings, at 0, 1, 2, 4, 8 workers (capped by the
range); engine/verdict/transport_bound.py turns it into the "transport-bound" reasons and the search's stop.

`measure_ceilings` runs in the driver (no torch); the forked half is trial/ceiling.py (imports torch).
"""

from __future__ import annotations

from collections.abc import Callable

from loadertop.core.model.config import Settings
from loadertop.core.model.protocol import (
    CeilingMeasured,
    CeilingRequest,
    Exited,
    Failed,
    Reply,
    Request,
    TransportMeasured,
)
from loadertop.core.model.results import Ceiling

CEILING_INDEX = -1  # the ceiling's request index: never a trial's

Send = Callable[[Request], None]
NextMessage = Callable[[float, str], Reply]  # (timeout, what the runner is doing) -> its next message


def measure_ceilings(send: Send, next_message: NextMessage, settings: Settings) -> tuple[Ceiling, ...]:
    """Ask the runner for the ceilings of each batch size: one consumer Ceiling per batch size, whatever happens,
    then the transport ceilings measured (one per batch size, worker count and pin_memory value)."""
    send(CeilingRequest(CEILING_INDEX, settings))
    found: dict[int, Ceiling] = {}
    transport: list[Ceiling] = []
    error: str | None = None
    while True:
        message = next_message(settings.trial_timeout, "measure the consumer's ceiling")
        if isinstance(message, CeilingMeasured):
            found[message.batch_size] = Ceiling(message.batch_size, message.samples_per_s, message.note, message.spread)
        elif isinstance(message, TransportMeasured):
            transport.append(transport_ceiling(message))
        elif isinstance(message, Failed):
            error = message.error
        elif isinstance(message, Exited):
            break
    missing = f"not measured ({error})" if error else "not measured"
    return (*(found.get(bs, Ceiling(bs, None, missing)) for bs in settings.batch_sizes), *transport)


def transport_ceiling(m: TransportMeasured) -> Ceiling:
    gib = m.batches_per_s * m.batch_mb / 1024 if m.batches_per_s is not None else None
    return Ceiling(m.batch_size, m.samples_per_s, m.note, m.spread, "transport", m.num_workers, m.pin_memory,
                   m.batches_per_s, gib, m.batch_mb, m.tensors, m.float_images)  # fmt: skip


def describe(ceilings: tuple[Ceiling, ...]) -> str:
    parts = []
    for c in ceilings:
        if c.kind == "transport":
            continue
        if c.samples_per_s is None:
            parts.append(f"batch {c.batch_size}: no ceiling ({c.note})")
        else:
            parts.append(f"batch {c.batch_size}: {c.samples_per_s:.0f} samples/s ({c.note})")
    return "ceiling: " + "; ".join(parts) + describe_transport(ceilings)


def describe_transport(ceilings: tuple[Ceiling, ...]) -> str:
    """'; transport (batch 32): 0 workers 410 batches/s 2.3 GiB/s, 1 worker ...', or '' when none was measured."""
    rows: dict[tuple[int, bool | None], list[str]] = {}
    for c in ceilings:
        if c.kind != "transport":
            continue
        figure = f"{c.batches_per_s:.0f} batches/s {c.gib_per_s:.2f} GiB/s" if c.gib_per_s is not None else c.note
        rows.setdefault((c.batch_size, c.pin_memory), []).append(f"{c.num_workers}w {figure}")
    return "".join(
        f"; transport (batch {bs}{', pinned' if pin else ''}): {', '.join(parts)}" for (bs, pin), parts in rows.items()
    )
