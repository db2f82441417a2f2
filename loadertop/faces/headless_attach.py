"""The headless face of `loadertop attach`: one line per interval on stdout, one JSON object per interval appended
to `--json FILE`; with no target, the list of watchable jobs."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from loadertop.core.engine import (
    AttachError,
    JobRun,
    LiveSession,
    RankSessions,
    find_jobs,
    hold_signals,
    num,
    open_session,
    pct,
    percent,
    rate,
    slope,
    start_job,
)
from loadertop.core.model.live import JobRanks, LiveSnapshot
from loadertop.core.model.stages import LIVE_STAGES

if TYPE_CHECKING:
    from loadertop.faces.openmetrics import MetricsServer

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
    if snap.ranks is not None:
        lines += rank_lines(snap.ranks)
    lines += [f"  note: {note}" for note in snap.notes]
    lines += [f"  warning: {warning}" for warning in snap.warnings]
    if snap.ended is not None:
        lines.append(f"ended: {snap.ended}")
    return "\n".join(lines)


def rank_lines(view: JobRanks) -> list[str]:
    """Every rank of a launcher's job, one line each, then the job's samples/s and the slowest rank (the engine's)."""
    lines = []
    for row in view.ranks:
        mark = "  <- slowest (data wait)" if row.slowest else ""
        state = f"  ended: {row.ended}" if row.ended else ""
        lines.append(
            f"  rank {row.rank:>2}  pid {row.pid}  {rate(row.samples_per_s)} samples/s  stall {pct(row.stall_fraction)}"
            f"  wait mean {num(row.wait_ms_mean, 1)} p95 {num(row.wait_ms_p95, 1)} p99 {num(row.wait_ms_p99, 1)} ms"
            f"  {row.workers} workers{state}{mark}"
        )
    lines.append(f"  job: {rate(view.samples_per_s)} samples/s over {len(view.ranks)} ranks; {view.pacing}")
    return lines


def list_jobs_text() -> str:
    jobs = find_jobs()
    if not jobs:
        return "no watchable jobs on this machine (none runs loadertop.watch); `loadertop attach PID` still works"
    rows = [f"{'PID':>8}  {'STARTED':<19}  COMMAND"]
    for job in jobs:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(job.hello.started))
        rows.append(f"{job.pid:>8}  {started:<19}  {job.command}")
    return "\n".join(rows)


def _opening(session: LiveSession | RankSessions) -> str:
    if isinstance(session, RankSessions):
        return f"attached to launcher pid {session.pid}: {' '.join(session.command.split())[:100]} (its ranks, watched)"
    how = "watched (loadertop.watch)" if session.watched else "psutil only (no loadertop.watch)"
    return f"attached to pid {session.pid}: {' '.join(session.command.split())[:100]} ({how})"


def run_attach_headless(
    target: int | str | None,
    *,
    interval: float,
    json_path: Path | None,
    out: TextIO | None = None,
    metrics: MetricsServer | None = None,
) -> int:
    """List the jobs (no target), or follow one until it ends (0) or Ctrl-C (130). AttachError propagates.
    `metrics`: each snapshot is served on /metrics too."""
    out = out or sys.stdout
    if target is None:
        print(list_jobs_text(), file=out)
        return 0
    session = open_session(target, interval=interval)
    if metrics is not None:
        metrics.set_job(pid=session.pid, command=session.command, hostname=session.hostname, rank=session.rank)
    sink = None
    try:
        sink = None if json_path is None else json_path.open("a", encoding="utf-8")
        print(_opening(session), file=out, flush=True)
        print(LIVE_STAGES, file=out, flush=True)
        missing: tuple[str, ...] = ()
        for snap in session.snapshots():
            if metrics is not None:
                metrics.update(snap)
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


def run_job_headless(
    command: Sequence[str],
    *,
    interval: float,
    json_path: Path | None,
    tune_s: float | None,
    metrics: MetricsServer | None = None,
    out: TextIO | None = None,
) -> int:
    """`loadertop run --headless -- CMD...`: start the job, show its publishing process as `attach --headless` does
    until it ends, and return the job's exit code. A command that cannot start is a UsageError (exit 2)."""
    out = out or sys.stdout
    job = start_job(command, tune_s=tune_s)
    with hold_signals(job):
        print(f"loadertop run: started pid {job.pid}: {' '.join(command)[:100]}", file=sys.stderr, flush=True)
        follow_job(job, interval=interval, json_path=json_path, metrics=metrics, out=out)
        code = job.wait()
    print(run_summary(job, code, tune_s), file=sys.stderr, flush=True)
    return code


def follow_job(
    job: JobRun, *, interval: float, json_path: Path | None, metrics: MetricsServer | None, out: TextIO
) -> None:
    """Wait for the job's first process that iterates a DataLoader, then follow it to its end."""
    found = job.publisher()
    if found is None:
        print(NOTHING_WATCHED, file=sys.stderr, flush=True)
        return
    try:
        run_attach_headless(job.view_target(found), interval=interval, json_path=json_path, out=out, metrics=metrics)
    except AttachError as error:  # it exited between publishing and attaching
        print(f"loadertop run: {error}", file=sys.stderr, flush=True)


NOTHING_WATCHED = (
    "loadertop run: the job ended without iterating a torch DataLoader (or LOADERTOP_WATCH=0): nothing to show"
)


def run_summary(job: JobRun, code: int, tune_s: float | None) -> str:
    """The last line(s) of `loadertop run`: the job's exit code, and what --tune chose."""
    lines = [f"loadertop run: the job exited with code {code}"]
    chose = job.tune_choice() if tune_s is not None else None
    if chose is not None:  # the job's line, and why: a switch's win, or why the job's own loader stayed
        lines += [f"loadertop run: tuned: {chose.snippet}", f"loadertop run: why: {chose.reason}"]
    elif tune_s is not None:
        lines.append(
            "loadertop run: --tune chose nothing (the job ended before tuning settled, or its loader could not be "
            "tuned)"
        )
    return "\n".join(lines)
