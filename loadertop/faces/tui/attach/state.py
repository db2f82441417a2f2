"""The attach view's model: LiveSnapshots in, bounded history out.

No Textual here: the panes read this model, and tests fold snapshots into it directly. The engine owns every
judgement (rates, slopes, warnings); this only keeps the last HISTORY intervals so the panes can draw them over time.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from loadertop.core.model.live import LiveSnapshot, LiveWorker

HISTORY = 600  # intervals kept per series: 20 minutes at the default 2 s, a few tens of KB
NOTES = 50  # tune notes and epoch summaries kept for the messages pane


@dataclass
class WorkerTrace:
    """One worker's USS over the intervals it was seen, and its latest reading."""

    label: str  # w0, w1, ... in the order the workers were first seen
    uss: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY))
    last: LiveWorker | None = None
    seen_at: float = 0.0  # t of the last snapshot that listed it: workers of a past epoch drop off


@dataclass
class SessionInfo:
    """What the header says of the job, from the session (before any snapshot arrives)."""

    pid: int
    command: str
    watched: bool
    interval: float


class LiveState:
    """Accumulates the snapshots of one session; `begin()` starts over for another job (after `p`)."""

    def __init__(self) -> None:
        self.begin(None)

    def begin(self, session: SessionInfo | None) -> None:
        self.session = session
        self.last: LiveSnapshot | None = None
        self.count = 0
        self.t: deque[float] = deque(maxlen=HISTORY)
        self.samples_per_s: deque[float | None] = deque(maxlen=HISTORY)
        self.stall_fraction: deque[float | None] = deque(maxlen=HISTORY)
        self.gpu_util: deque[float | None] = deque(maxlen=HISTORY)
        self.total_pss_mb: deque[float | None] = deque(maxlen=HISTORY)  # the chart of a job without watch()
        self.epoch_ends: deque[float] = deque(maxlen=HISTORY)
        self.notes: deque[str] = deque(maxlen=NOTES)
        self.workers: dict[int, WorkerTrace] = {}
        self.ended: str | None = None
        self.error: str | None = None  # the session could not be opened, or its stream raised

    def apply(self, snap: LiveSnapshot) -> None:
        """Fold one interval in (the UI thread, once per interval)."""
        self.last = snap
        self.count += 1
        self.t.append(snap.t)
        self.samples_per_s.append(snap.samples_per_s)
        self.stall_fraction.append(snap.stall_fraction)
        self.gpu_util.append(snap.gpu_util)
        self.total_pss_mb.append(snap.total_pss_mb)
        self.epoch_ends.extend(snap.epoch_ends)
        self.notes.extend(snap.notes)
        for worker in snap.workers:
            trace = self.workers.get(worker.pid)
            if trace is None:
                trace = self.workers[worker.pid] = WorkerTrace(f"w{len(self.workers)}")
            if worker.uss_mb is not None:
                trace.uss.append(worker.uss_mb)
            trace.last = worker
            trace.seen_at = snap.t
        if snap.ended is not None:
            self.ended = snap.ended

    def current_workers(self) -> list[WorkerTrace]:
        """The workers the last snapshot listed, in the order they were first seen."""
        if self.last is None:
            return []
        return [w for w in self.workers.values() if w.seen_at == self.last.t]

    def elapsed(self) -> float | None:
        return self.last.t if self.last is not None else None

    def points(self, series: deque[float | None], scale: float = 1.0) -> tuple[list[float], list[float]]:
        """(t, value) of the intervals that have a value, for a chart."""
        pairs = [(t, v * scale) for t, v in zip(self.t, series, strict=True) if v is not None]
        return [t for t, _ in pairs], [v for _, v in pairs]

    def leak_warnings(self) -> list[str]:
        return [self.last.leak] if self.last and self.last.leak else []

    def other_warnings(self) -> list[str]:
        return [w for w in self.last.warnings if w != self.last.leak] if self.last else []
