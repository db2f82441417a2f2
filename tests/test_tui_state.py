"""The TUI's model and helpers, without Textual: the fake's event stream folded into SweepState."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from tui_fakes import BLOCKS, SETTINGS, WORKERS, FakeSweep, FakeSweepFactory, change_of, knee_rows

from loadertop.core.model.config import TrialConfig
from loadertop.core.model.events import ProbeSample, SweepFinished, SweepStarted, TrialFinished, TrialLaunched
from loadertop.faces.tui import fmt, ranges
from loadertop.faces.tui.state import SweepState
from loadertop.faces.tui.widgets.results import status_text

pytestmark = pytest.mark.tui


def run(sweep: FakeSweep, state: SweepState, only: bool = False) -> SweepState:
    state.begin(only=only)
    for event in sweep.events():
        state.apply(event)
    return state


def test_a_whole_sweep_fills_rows_traces_and_the_result(tmp_path: Path) -> None:
    factory = FakeSweepFactory(tmp_path)
    state = run(factory(SETTINGS, None, None), SweepState())
    assert [row.config.num_workers for row in state.rows] == list(WORKERS)
    assert [row.status for row in state.rows] == ["ok"] * 6 + ["failed"]
    assert state.phase == "finished" and state.result is not None
    assert state.recommendation is not None and state.recommendation.config.num_workers == 4
    assert [c.num_workers for c in knee_rows(state)] == [4]
    assert state.selected == state.recommendation.config
    trace = state.focus()  # the highlighted row: the recommendation
    assert trace is not None and trace.config == state.recommendation.config
    assert len(trace.batches_per_s) == BLOCKS
    workers = trace.workers()
    assert [w.label for w in workers] == ["w0", "w1", "w2", "w3"]
    assert [w.climbing for w in workers] == [False, False, False, True]  # the fake's last worker grows


def test_dirty_sets_keep_the_table_out_of_sample_updates(tmp_path: Path) -> None:
    state = SweepState()
    state.begin(only=False)
    for event in FakeSweepFactory(tmp_path)(SETTINGS, None, None).events():
        dirty = state.apply(event)
        if isinstance(event, ProbeSample):
            assert "table" not in dirty and "chart" not in dirty
        if isinstance(event, (TrialFinished, SweepFinished)):
            assert {"table", "chart"} <= dirty


def test_a_rerun_compares_each_row_with_the_previous_run(tmp_path: Path) -> None:
    factory = FakeSweepFactory(tmp_path)
    state = run(factory(SETTINGS, None, None), SweepState())
    first = state.result
    run(factory(SETTINGS, first, None), state)  # 8% faster
    changes = [change_of(state, i) for i in range(len(state.rows))]
    assert changes[:6] == pytest.approx([0.08] * 6)
    assert changes[6] is None  # failed both times
    assert state.previous is first


def test_a_row_rerun_keeps_the_table_and_the_recommendation(tmp_path: Path) -> None:
    factory = FakeSweepFactory(tmp_path)
    state = run(factory(SETTINGS, None, None), SweepState())
    rec = state.recommendation
    target = state.rows[2].config
    tight = replace(SETTINGS, target_spread=0.02, trial_seconds=16.0)
    run(factory(tight, state.result, [target]), state, only=True)
    assert len(state.rows) == len(WORKERS)
    assert change_of(state, 2) == pytest.approx(0.08)
    assert all(change_of(state, i) is None for i in range(len(state.rows)) if i != 2)
    # The engine merges the rerun into the whole run and judges it: the state takes that result as it is.
    assert state.result is factory.last.result
    assert state.recommendation is not None and rec is not None and state.recommendation.config == rec.config
    assert state.result is not None and len(state.result.trials) == len(WORKERS)
    assert state.rows[2].result is state.result.trials[-1]  # the rerun's measurement, not the first one


def test_the_engines_final_result_is_taken_whole(tmp_path: Path) -> None:
    # Whatever the rows showed during the sweep, SweepFinished's result replaces it: no merging in the TUI.
    factory = FakeSweepFactory(tmp_path)
    state = run(factory(SETTINGS, None, None), SweepState())
    first = state.result
    assert first is not None
    judged = replace(first, trials=first.trials[:3], recommendation=None)
    state.begin(only=True)
    state.apply(SweepStarted("x", first.machine, SETTINGS, (first.trials[0].config,), first))
    state.apply(SweepFinished(judged))
    assert state.result is judged and state.recommendation is None
    assert [row.status for row in state.rows][:3] == ["ok"] * 3


def test_rungs_a_finished_search_did_not_need_say_so(tmp_path: Path) -> None:
    # An adaptive search plans a ladder and may stop climbing early: SweepStarted listed 7 configurations, the
    # sweep ran 3 and ended normally. The other 4 were not needed, which is not the same as "not run".
    sweep = FakeSweepFactory(tmp_path)(SETTINGS, None, None)
    state = SweepState()
    state.begin(only=False)
    for event in sweep.events():
        if isinstance(event, SweepFinished):
            event = SweepFinished(replace(event.result, interrupted=False))
        state.apply(event)
        if isinstance(event, TrialFinished) and event.result.index == 2:
            sweep.stop_after_current()
    assert [row.status for row in state.rows] == ["ok"] * 3 + ["not needed"] * 4
    assert status_text(state.rows[-1]) == "not needed"


def test_an_interrupted_sweep_marks_what_never_ran(tmp_path: Path) -> None:
    sweep = FakeSweepFactory(tmp_path)(SETTINGS, None, None)
    state = SweepState()
    state.begin(only=False)
    for event in sweep.events():
        state.apply(event)
        if isinstance(event, TrialFinished) and event.result.index == 1:
            sweep.stop_after_current()
    assert [row.status for row in state.rows] == ["ok", "ok"] + ["not run"] * 5
    assert state.result is not None and state.result.interrupted
    assert state.recommendation is None
    snapshot = state.snapshot()
    assert snapshot is not None and len(snapshot.trials) == 2


def test_eta_counts_down_from_the_trial_budget_then_from_measured_trials(tmp_path: Path) -> None:
    state = SweepState()
    state.begin(only=False)
    events = FakeSweepFactory(tmp_path)(SETTINGS, None, None).events()
    state.apply(next(events))
    assert state.eta() == pytest.approx(7 * (SETTINGS.trial_seconds + 2))
    for event in events:
        state.apply(event)
        if isinstance(event, TrialFinished) and event.result.index == 2:
            break
    per_trial = state.count.finished_at[-1] / 3
    assert state.eta() == pytest.approx(per_trial * 4)


def test_spark_rescales_pins_and_pads() -> None:
    assert fmt.spark([], 4) == "    "
    assert fmt.spark([0, 50, 100], 3, lo=0, hi=100) == "▁▅█"
    assert fmt.spark([1, 2, 3, 4, 5], 3) == "▁▅█"  # the last `width` values, window min..max
    assert fmt.spark([100.0, 100.5], 2, min_range=10) == "▄▅"  # noise does not look like a climb
    assert fmt.spark([5], 3) == "  ▁"


def test_terminal_wording() -> None:
    assert fmt.no_gpu_line("NVML library not found") == "no NVIDIA GPU: NVML library not found"
    assert fmt.no_gpu_line("unavailable: NVML library not found") == "no NVIDIA GPU: NVML library not found"


@pytest.mark.parametrize(
    ("workers", "wider", "narrower"),
    [
        ((0, 1, 2, 4), (0, 1, 2, 4, 6, 8), (0, 1, 2)),
        (WORKERS, (*WORKERS, 12, 16), (0, 1, 2, 3, 4)),
        ((0,), (0, 1, 2), None),
        ((0, 1), (0, 1, 2), None),
    ],
)
def test_widen_and_narrow(workers: tuple[int, ...], wider: tuple[int, ...], narrower: tuple[int, ...] | None) -> None:
    assert ranges.widen(workers) == wider
    assert ranges.narrow(workers) == narrower


def test_knee_is_marked_on_the_recommended_family_only(tmp_path: Path) -> None:
    settings = replace(SETTINGS, batch_sizes=(32, 64), workers=(0, 2, 4))
    state = run(FakeSweepFactory(tmp_path)(settings, None, None), SweepState())
    marked = [(c.batch_size, c.num_workers) for c in knee_rows(state)]
    assert marked == [(32, 4)]
    assert TrialConfig(4, 64, 2, False, False, "fork") in [r.config for r in state.rows]


def test_a_repeated_finalist_is_one_row_showing_the_mean(tmp_path: Path) -> None:
    four = TrialConfig(4, 32, 2, False, False, "fork")
    three = TrialConfig(3, 32, 2, False, False, "fork")
    sweep = FakeSweepFactory(tmp_path)(SETTINGS, None, [three, four, four])
    state = run(sweep, SweepState())  # planned as a whole sweep that measures w=4 twice
    assert [row.config for row in state.rows] == [three, four]
    row = state.rows[1]
    assert len(row.runs) == 2 and row.status == "ok"
    report = state.report()  # the engine's mean of the two runs, as the table and the chart show it
    assert report is not None and report.row_for(four) is not None
    assert report.row_for(four).samples_per_s == pytest.approx(4310.0)  # type: ignore[union-attr]


def test_a_configuration_added_mid_sweep_slots_into_its_climb(tmp_path: Path) -> None:
    configs = [TrialConfig(w, 32, 2 if w else None, False, False, "fork" if w else None) for w in (0, 2, 8, 4)]
    sweep = FakeSweepFactory(tmp_path)(SETTINGS, None, configs[:3])
    state = SweepState()
    state.begin(only=False)
    events = list(sweep.events())
    state.apply(events[0])  # planned 0, 2, 8
    for event in events[1:]:
        state.apply(event)
    state.row_for(configs[3])  # an adaptive search bisects between 2 and 8
    assert [row.config.num_workers for row in state.rows] == [0, 2, 4, 8]


def test_a_finished_trial_shows_its_result_and_ignores_late_probes(tmp_path: Path) -> None:
    # The probes' tick after the workers exited (the fake sends one before and one after TrialFinished) read
    # "total PSS 60 MB" in the pane while the table said 312 MB: the finished trial shows its result's figures.
    state = run(FakeSweepFactory(tmp_path)(SETTINGS, None, None), SweepState())
    for trace in state.traces.values():
        result = trace.result
        assert result is not None
        assert trace.pss_mb == result.total_pss_mb and trace.rss_mb == result.rss_mb
        if result.status == "ok":
            assert [w.now for w in trace.workers()] == list(result.worker_uss_mb)
    trace = state.trace(4)
    before = ([w.series[:] for w in trace.workers()], trace.sampled_pss_mb)
    state.apply(ProbeSample(4, 99.0, (), 60.0, 0.0, 60.0, 60.0, 0.0, 5000.0, None, None))
    assert ([w.series for w in trace.workers()], trace.sampled_pss_mb) == before
    assert trace.pss_mb is not None and trace.pss_mb > 60.0


def test_a_launched_trial_is_the_running_one_even_when_its_configuration_repeats(tmp_path: Path) -> None:
    sweep = FakeSweepFactory(tmp_path, repeat=(4,))(SETTINGS, None, None)
    state = SweepState()
    state.begin(only=False)
    for event in sweep.events():
        state.apply(event)
        if isinstance(event, TrialLaunched) and event.index == len(WORKERS):
            break
    focus = state.focus()
    assert focus is state.live and focus is not None
    assert focus.index == len(WORKERS) and focus.config.num_workers == 4 and focus.result is None
    assert not focus.batches_per_s and not focus.worker_pids  # nothing sampled yet: not the first run's figures
    assert state.current_config() == focus.config and state.row_for(focus.config).status == "running"
