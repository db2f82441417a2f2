"""The headless face of `loadertop attach`: one line per interval on stdout, one JSON object per interval appended
to `--json FILE`; with no target, the list of watchable jobs."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TextIO

from loadertop.core.engine import LiveSession, find_jobs, num, open_session, pct, percent, rate, slope
from loadertop.core.model.live import LiveSnapshot

EXIT_INTERRUPTED = 130


def _slope(value: float | None) -> str:
    return "" if value is None else f" ({slope(value)})"


def snapshot_line(snap: LiveSnapshot) -> str:
    """t, samples/s, stall, each worker's USS and slope; then warnings and notes, each on a line of its own."""
    parts = [f"t={snap.t:7.1f}s"]
    if snap.samples_per_s is not None:
        parts.append(f"{rate(snap.samples_per_s)} samples/s  stall {pct(snap.stall_fraction)}")
    elif snap.watched:
        parts.append("no steps")
    if snap.epoch is not None:
        parts.append(f"epoch {snap.epoch}")
    workers = " ".join(f"{num(w.uss_mb)}{_slope(w.uss_slope_mb_per_min)}" for w in snap.workers)
    parts.append(f"workers USS MB: {workers}" if snap.workers else "no workers")
    if snap.gpu_util is not None:
        parts.append(f"GPU {percent(snap.gpu_util)}")
    lines = ["  ".join(parts)]
    lines += [f"  note: {note}" for note in snap.notes]
    lines += [f"  warning: {warning}" for warning in snap.warnings]
    if snap.ended is not None:
        lines.append(f"ended: {snap.ended}")
    return "\n".join(lines)


def list_jobs_text() -> str:
    jobs = find_jobs()
    if not jobs:
        return "no watchable jobs on this machine (none runs loadertop.watch); `loadertop attach PID` still works"
    rows = [f"{'PID':>8}  {'STARTED':<19}  COMMAND"]
    for job in jobs:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(job.hello.started))
        rows.append(f"{job.pid:>8}  {started:<19}  {job.command}")
    return "\n".join(rows)


def _opening(session: LiveSession) -> str:
    how = "watched (loadertop.watch)" if session.watched else "psutil only (no loadertop.watch)"
    return f"attached to pid {session.pid}: {' '.join(session.command.split())[:100]} ({how})"


def run_attach_headless(
    target: int | str | None, *, interval: float, json_path: Path | None, out: TextIO | None = None
) -> int:
    """List the jobs (no target), or follow one until it ends (0) or Ctrl-C (130). AttachError propagates."""
    out = out or sys.stdout
    if target is None:
        print(list_jobs_text(), file=out)
        return 0
    session = open_session(target, interval=interval)
    sink = None
    try:
        sink = None if json_path is None else json_path.open("a", encoding="utf-8")
        print(_opening(session), file=out, flush=True)
        missing: tuple[str, ...] = ()
        for snap in session.snapshots():
            print(snapshot_line(snap), file=out, flush=True)
            if snap.missing != missing:  # said once, and again when it changes
                missing = snap.missing
                for line in missing:
                    print(f"  missing: {line}", file=out, flush=True)
            if sink is not None:
                sink.write(json.dumps(snap.to_dict()) + "\n")
                sink.flush()
        return 0
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    finally:
        session.close()
        if sink is not None:
            sink.close()
