"""A trial's memory as the engine judges it once (engine/verdict/memory.py), and as the TUI's model then shows it:
each of the running trial's own workers only, slopes over its steady window only, and rows whose memory was read
alone."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from loadertop.core.engine import build_report
from loadertop.core.engine.verdict.band import merge_repeats
from loadertop.core.engine.verdict.leak import judge
from loadertop.core.engine.verdict.memory import TRIAL_LEAK, live_figures, memory_run, window_figures
from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.events import ProbeSample, TrialLaunched, TrialStarted, WorkerSample
from loadertop.core.model.results import MachineInfo, SweepResult, TrialResult
from loadertop.faces.tui.state import SweepState

pytestmark = pytest.mark.unit


def sample(t: float, uss: dict[int, float | None], index: int = 0, **kw: Any) -> ProbeSample:
    workers = tuple(WorkerSample(pid=p, rss_mb=200.0, cpu_percent=50.0, uss_mb=u) for p, u in uss.items())
    base: dict[str, Any] = {
        "index": index,
        "t": t,
        "workers": workers,
        "main_rss_mb": 300.0,
        "main_cpu_percent": 50.0,
        "total_pss_mb": 500.0,
        "rss_mb": 900.0,
        "cpu_percent": 150.0,
        "mem_available_mb": 10_000.0,
        "cgroup_mem_headroom_mb": None,
        "shm_free_mb": 1000.0,
    }
    base.update(kw)
    return ProbeSample(**base)


def ticks(seconds: float, uss: dict[int, Any], t0: float = 0.0) -> list[ProbeSample]:
    """Ticks every 0.5 s; USS re-read every 2 s and carried in between, as the probes do. `uss[pid](t)` or None."""
    out = []
    for k in range(int(seconds / 0.5) + 1):
        t = t0 + 0.5 * k
        read = t0 + 2.0 * (k // 4)
        out.append(sample(t, {pid: (None if f is None else f(read)) for pid, f in uss.items()}))
    return out


# -- the figures ----------------------------------------------------------------------------------------------


def test_window_figures_fit_distinct_readings_of_the_trials_own_workers() -> None:
    # 11 grows 4 MB/s (240 MB/min), 12 is flat, 13 never had a USS reading, 14 is not the trial's.
    window = ticks(7.5, {11: lambda t: 100.0 + 4.0 * t, 12: lambda t: 80.0, 13: None, 14: lambda t: 999.0})
    figures = window_figures(list(reversed(window)), [11, 12, 13])
    assert [w.pid for w in figures.workers] == [11, 12]
    grows, flat = figures.workers
    assert grows.slope_mb_per_min == pytest.approx(240.0) and grows.uss_mb == pytest.approx(124.0)
    assert flat.slope_mb_per_min is None  # one distinct reading: nothing to fit
    assert grows.climbing and not flat.climbing  # 24 MB over 6 s, every step up
    assert figures.leak is not None and figures.leak.startswith("1 worker grows 240 MB/min; at this rate it exhausts")


def test_a_step_a_slow_drift_or_a_small_rise_is_no_warning() -> None:
    step = ticks(7.5, {1: lambda t: 100.0 if t < 4 else 130.0})  # one jump: a cache filled once
    drift = ticks(7.5, {1: lambda t: 100.0 + 0.01 * t})  # 0.6 MB/min, under the 1 MB/min floor
    small = ticks(7.5, {1: lambda t: 100.0 + 0.25 * t})  # 15 MB/min, but 1.5 MB over the window
    # 30 MB/min, every step up, but 3 MB in 6 s: a fresh worker copying the pages it touches of a dataset built
    # before the fork does this, then goes flat (the default run's warm finalists did); seconds cannot tell
    warming = ticks(7.5, {1: lambda t: 100.0 + 0.5 * t})
    for window in (step, drift, small, warming):
        assert not window_figures(window, [1]).workers[0].climbing
        assert window_figures(window, [1]).leak is None
    fit, grows = judge([(0.0, 100.0), (2.0, 101.0), (4.0, 103.0)], TRIAL_LEAK)
    assert fit is not None and not grows  # two steps up: too few to call it steady


def test_live_figures_list_only_the_current_workers_and_fit_only_the_window() -> None:
    # A 2-worker trial that restarted its workers (a short epoch): 21, 22 exited, 31, 32 run now; 7 is a rank's
    # main process, also probed. Start-up growth (USS 40 -> 84 MB in 4 s) came before the window opened.
    startup = [sample(t, {21: 40.0 + 11 * t, 22: 40.0 + 11 * t, 7: 300.0}) for t in (0.0, 1.0, 2.0, 3.0, 4.0)]
    now = sample(4.5, {31: 84.0, 32: 83.0, 7: 300.0})
    before = live_figures(now, [], [31, 32])
    assert [(w.pid, w.uss_mb, w.slope_mb_per_min, w.climbing) for w in before.workers] == [
        (31, 84.0, None, False),
        (32, 83.0, None, False),
    ]
    window = [*startup, now]
    assert [w.pid for w in live_figures(now, window, [31, 32]).workers] == [31, 32]


def test_a_steep_climb_in_the_window_carries_its_warning() -> None:
    # A recorded 1-worker rerun: "w0 84 MB +483.6 MB/min" and no ⚠. A climb that steep inside the window is one.
    window = ticks(8.0, {5: lambda t: 84.0 + 483.6 / 60 * t})
    figures = live_figures(window[-1], window, [5])
    (worker,) = figures.workers
    assert worker.slope_mb_per_min == pytest.approx(483.6, rel=0.01) and worker.climbing
    assert figures.leak is not None and figures.leak.startswith("1 worker grows 48")


# -- the TUI's model renders them -----------------------------------------------------------------------------


def test_the_pane_lists_only_the_running_trials_own_workers() -> None:
    # A pane once listed w0-w3 during a 2-worker trial (the workers of the epoch before were kept), and 16 rows
    # during an 8-worker one. The pane lists what the engine lists: the workers running now.
    config = TrialConfig(num_workers=2, batch_size=32, prefetch_factor=2, start_method="fork")
    state = SweepState()
    state.begin(only=False)
    state.apply(TrialLaunched(0, 1, config, 100))
    state.apply(TrialStarted(0, 1, config, 100, (21, 22), 0.5))
    window: list[ProbeSample] = []
    first = ticks(4.0, {21: lambda t: 50.0, 22: lambda t: 51.0})
    second = ticks(4.0, {31: lambda t: 52.0, 32: lambda t: 53.0}, t0=4.5)  # the next epoch's workers
    for tick in [*first, *second]:
        window.append(tick)
        current = [w.pid for w in tick.workers]
        state.apply(replace(tick, uss=live_figures(tick, window, current)))
    trace = state.focus()
    assert trace is not None
    assert [(w.label, w.now) for w in trace.workers()] == [("w0", 52.0), ("w1", 53.0)]


# -- the row's memory: a run read alone ------------------------------------------------------------------------


def run(index: int, workers: int, pss: float, beside: int = 0, warm: bool = False) -> TrialResult:
    config = TrialConfig(num_workers=workers, batch_size=32, prefetch_factor=2, start_method="fork")
    return TrialResult(
        index, config, "ok", samples_per_s=500.0 + index, spread=0.02, total_pss_mb=pss, rss_mb=pss * 2,
        worker_uss_mb=(pss / 20,) * workers, parked_beside=beside, warm=warm,
    )  # fmt: skip


def test_a_row_shows_the_memory_of_a_run_read_alone() -> None:
    # A recorded run: 5 workers read 206 and 203 MB alone, 143 MB warm with the 6-worker pool parked beside;
    # 6 workers 216 MB cold, 172 and 167 MB beside the 5-worker pool. 4 workers: 185 MB, one run.
    trials = [
        run(0, 4, 185.0),
        run(1, 6, 216.0),
        run(2, 5, 206.0),
        run(3, 5, 203.0),
        run(4, 6, 172.0, beside=6),
        run(5, 5, 143.0, beside=7, warm=True),
        run(6, 6, 167.0, beside=6, warm=True),
    ]
    assert memory_run([t for t in trials if t.config.num_workers == 5]).index == 3
    merged = {t.config.num_workers: t for t in merge_repeats(trials)}
    assert {n: t.total_pss_mb for n, t in merged.items()} == {4: 185.0, 5: 203.0, 6: 216.0}
    assert merged[5].samples_per_s == pytest.approx((502 + 503 + 505) / 3)  # the throughput is still all runs'
    machine = MachineInfo("h", "p", "3", "t", 2, 2, None, 4096.0, 2048.0, None, None, "fork")
    result = SweepResult(machine=machine, settings=Settings(), trials=tuple(trials), knee=None, recommendation=None)
    report = build_report(result)
    assert {r.config.num_workers: r.pss_mb for r in report.rows} == {4: 185.0, 5: 203.0, 6: 216.0}
    assert {r.config.num_workers: r.uss_per_worker_mb for r in report.rows}[6] == pytest.approx(216.0 / 20)
    every = result.to_dict()["trials"]  # the JSON: each run its own figure, and whether it was read alone
    assert [(t["total_pss_mb"], t["parked_beside"]) for t in every][4:] == [(172.0, 6), (143.0, 7), (167.0, 6)]


def test_without_a_run_read_alone_the_latest_is_shown() -> None:
    runs = [run(0, 2, 150.0, beside=3), run(1, 2, 140.0, beside=3)]
    assert memory_run(runs).index == 1
