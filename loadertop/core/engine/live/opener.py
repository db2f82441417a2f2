"""`open_session(target)`: what `loadertop attach` and `loadertop run` watch: one job's LiveSession, or a launcher's
RankSessions (one LiveSession per publishing rank, folded). Beside both, so that neither imports the other."""

from __future__ import annotations

import psutil

from loadertop.core.engine.live.ranks import RankSessions
from loadertop.core.engine.live.session import LiveSession
from loadertop.core.engine.live.target import WORKER_SCAN_S, AttachError, launcher_ranks, resolve
from loadertop.core.engine.verdict.leak import LeakConfig


def open_session(
    target: int | str | None, *, interval: float = 2.0, leak: LeakConfig | None = None, scan_s: float | None = None
) -> LiveSession | RankSessions:
    """Check the target and start watching it: one job, or every rank under a launcher's pid (RankSessions, whose
    snapshots carry `ranks`). AttachError (one line) when it cannot be watched."""
    if not interval > 0:
        raise AttachError(f"--interval {interval}: must be more than 0 seconds")
    scan = WORKER_SCAN_S if scan_s is None else scan_s
    ranks = launcher_ranks(target, scan)
    if ranks is not None:
        return RankSessions(int(str(target)), ranks, interval=interval, leak=leak)
    checked = resolve(target, 0.0 if isinstance(target, int) or str(target).strip().isdigit() else scan)
    try:
        return LiveSession(checked, interval=interval, leak=leak)
    except psutil.NoSuchProcess:
        raise AttachError(f"no such process: pid {checked.pid} (it exited)") from None
    except psutil.AccessDenied:
        raise AttachError(f"pid {checked.pid}: loadertop may not read this process (another user's?)") from None
