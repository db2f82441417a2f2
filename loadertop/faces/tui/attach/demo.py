"""A deterministic fake of a live job, for the attach view's tests and screenshots (no job, no socket).

`demo_stream()` is a CPU job watched with loadertop.watch: 4 workers, one of them growing 38 MB/min (the engine's leak
warning names it), an epoch every 20 s with the stall that follows each boundary, a GPU 70-90% busy.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator, Sequence

from loadertop.core.engine import leak_warning
from loadertop.core.model.live import LiveSnapshot, LiveWorker

DEMO_PID = 48213
DEMO_COMMAND = "python train.py --epochs 20 --batch-size 64 --data /data/imagenet-mini"
GROWTH_MB_PER_MIN = 38.0  # the leaking worker's
AVAILABLE_MB = 22.0 * 1024  # memory available to the job when the view attached
LEAK = leak_warning([GROWTH_MB_PER_MIN], AVAILABLE_MB)  # the engine's sentence, as a live session words it


def demo_snapshot(i: int, *, interval: float = 2.0, epoch_s: float = 20.0, ended: str | None = None) -> LiveSnapshot:
    """Interval `i` (t = (i + 1) × interval)."""
    t = (i + 1) * interval
    since = t % epoch_s
    after_boundary = since < interval  # the interval that crossed an epoch end: workers restart, the GPU waits
    stall = 0.55 if after_boundary else 0.06 + 0.03 * math.sin(i)
    rate = 1280.0 * (1 - stall) / 0.94 + 25 * math.sin(i * 0.7)
    workers = tuple(
        LiveWorker(
            pid=DEMO_PID + 1 + w,
            uss_mb=212.0 + 3 * w + (GROWTH_MB_PER_MIN * t / 60 if w == 2 else 0.4 * math.sin(i + w)),
            pss_mb=118.0 + 2 * w + (19.0 * t / 60 if w == 2 else 0.0),
            cpu_percent=82.0 + 4 * w - 30 * after_boundary,
            uss_slope_mb_per_min=(GROWTH_MB_PER_MIN if w == 2 else 0.1 * (w - 1.5)) if i >= 5 else None,
            uss_slope_err_mb_per_min=(2.0 if w == 2 else 0.3) if i >= 5 else None,
            leaking=w == 2 and i >= 10,
        )
        for w in range(4)
    )
    epoch = int(t // epoch_s) + 1
    return LiveSnapshot(
        t=t,
        pid=DEMO_PID,
        watched=True,
        samples_per_s=rate,
        batches_per_s=rate / 64,
        stall_fraction=stall,
        wait_ms_p95=48.0 if after_boundary else 3.1,
        step_ms=46.5,
        epoch=epoch,
        epoch_ends=(t - since,) if after_boundary and t > interval else (),
        workers=workers,
        main_cpu_percent=97.0,
        main_rss_mb=2480.0,
        total_pss_mb=2210.0 + 19.0 * t / 60,
        gpu_util=45.0 if after_boundary else 78.0 + 8 * math.sin(i * 0.5),
        gpu_unavailable=None,
        mem_available_mb=AVAILABLE_MB - GROWTH_MB_PER_MIN * t / 60,
        warnings=(LEAK,) if i >= 10 else (),
        missing=(),
        notes=(f"epoch {epoch - 1}: 400 batches in {epoch_s - 0.4:.1f} s",) if after_boundary and t > interval else (),
        ended=ended,
        leak=LEAK if i >= 10 else None,
    )


def demo_stream(n: int = 40, *, ended: str | None = None) -> list[LiveSnapshot]:
    """`n` intervals; with `ended`, the last one says the job ended."""
    snaps = [demo_snapshot(i) for i in range(n)]
    if ended is not None and snaps:
        last = snaps[-1]
        snaps[-1] = LiveSnapshot(**{**last.__dict__, "ended": ended})
    return snaps


class FakeSession:
    """A LiveSession's surface: yields the given snapshots, then (with `hold`) blocks until close() as a live job
    would; `close()` is idempotent and counted."""

    def __init__(
        self,
        snapshots: Sequence[LiveSnapshot],
        *,
        pid: int = DEMO_PID,
        command: str = DEMO_COMMAND,
        watched: bool = True,
        hold: bool = True,
    ) -> None:
        self.pid, self.command, self.watched = pid, command, watched
        self.items = list(snapshots)
        self.hold = hold
        self.closed = threading.Event()
        self.close_calls = 0

    def snapshots(self) -> Iterator[LiveSnapshot]:
        for snapshot in self.items:
            if self.closed.is_set():
                return
            yield snapshot
        if self.hold:
            self.closed.wait(60)

    def close(self) -> None:
        self.close_calls += 1
        self.closed.set()
