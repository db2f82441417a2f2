"""A trial's memory, judged once for every face: each of its own workers' USS, slope and ⚠ over its steady window
(the same rule live and in its result), and which run's memory a row of repeated runs shows.

Live: the driver hands each probe tick of the running trial to `live_figures` (TrialWatch.with_figures), and the
tick reaches the faces with the figures on it (ProbeSample.uss). Finished: `window_figures` over the same window
gives the result's slopes, ⚠ and leak sentence. The faces draw these; they fit nothing.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from loadertop.core.engine.verdict.leak import LeakConfig, distinct, judge, leak_warning
from loadertop.core.model.events import ProbeSample, UssFigures, WorkerUss
from loadertop.core.model.results import TrialResult

# A sweep's trial is seconds long and its window starts after the start-up buffer: no warm-up or sliding window,
# a slope from 3 distinct readings over 3 s. A ⚠ still needs growth significant at z standard errors above
# 1 MB/min, steady (most steps up), and a rise of 16 MB over the window: a worker's first seconds copy the pages
# it touches of a dataset built before the fork (a few MB, then flat: the default run's warm finalists read
# "30 MB/min, memory gone in 3 h" from that), which seconds cannot tell from a leak; 16 MB in a trial's seconds can.
TRIAL_LEAK = LeakConfig(window_s=math.inf, warmup_s=0.0, min_points=3, min_span_s=3.0, min_rise_mb=16.0)


def window_figures(
    window: Sequence[ProbeSample], worker_pids: Sequence[int], config: LeakConfig = TRIAL_LEAK
) -> UssFigures:
    """The workers of `worker_pids` with a USS reading in `window`, in that order: the last reading, the slope
    and verdict of `judge` over their distinct readings, and the leak sentence when any climbs."""
    ordered = sorted(window, key=lambda s: s.t)
    series: dict[int, list[tuple[float, float]]] = {pid: [] for pid in worker_pids}
    for sample in ordered:
        for worker in sample.workers:
            if worker.uss_mb is not None and worker.pid in series:
                series[worker.pid].append((sample.t, worker.uss_mb))
    workers = []
    for pid in dict.fromkeys(worker_pids):
        points = series[pid]
        if points:
            fit, climbing = judge(distinct(points), config)
            workers.append(WorkerUss(pid, points[-1][1], None if fit is None else fit.slope_mb_per_min, climbing))
    available = min((s.mem_available_mb for s in ordered), default=None)
    return UssFigures(tuple(workers), _leak(workers, available))


def live_figures(sample: ProbeSample, window: Sequence[ProbeSample], worker_pids: Sequence[int]) -> UssFigures:
    """The running trial at this tick: its current workers only (`worker_pids`, not an earlier epoch's, a rank's
    main process, nor a parked pool's), each read now, with slopes over the window so far (none before it opens)."""
    own = set(worker_pids)
    current = [w.pid for w in sample.workers if w.pid in own and w.uss_mb is not None]
    judged = {w.pid: w for w in window_figures(window, current).workers}
    now = {w.pid: w.uss_mb for w in sample.workers}
    workers = [
        WorkerUss(pid, now[pid], judged[pid].slope_mb_per_min, judged[pid].climbing)
        if pid in judged
        else WorkerUss(pid, now[pid], None)
        for pid in current
    ]
    return UssFigures(tuple(workers), _leak(workers, sample.mem_available_mb))


def _leak(workers: Sequence[WorkerUss], available_mb: float | None) -> str | None:
    slopes = [w.slope_mb_per_min for w in workers if w.climbing and w.slope_mb_per_min is not None]
    return leak_warning(slopes, available_mb) if slopes else None


def memory_run(runs: Sequence[TrialResult]) -> TrialResult:
    """The run whose memory a configuration's row shows: its latest read alone (no other pool parked beside it,
    so its PSS is its own); the latest run when none was."""
    alone = [t for t in runs if t.parked_beside == 0 and t.total_pss_mb is not None]
    return max(alone or runs, key=lambda t: t.index)


def own_memory(merged: TrialResult, runs: Sequence[TrialResult]) -> TrialResult:
    """`merged` (repeats merged into one point, band.merge_repeats) with the memory of `memory_run(runs)`: a
    pool parked beside a run splits its PSS, and the row must not read less because of it."""
    run = memory_run(runs)
    return dataclasses.replace(
        merged,
        worker_uss_mb=run.worker_uss_mb,
        worker_uss_slope_mb_per_min=run.worker_uss_slope_mb_per_min,
        worker_uss_climbing=run.worker_uss_climbing,
        leak=run.leak,
        total_pss_mb=run.total_pss_mb,
        rss_mb=run.rss_mb,
        parked_beside=run.parked_beside,
    )
