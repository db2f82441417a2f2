"""A row rerun (the TUI's `enter`): the engine folds the rerun rows into the previous result and judges the whole
table again, keeping the ceilings, the USL fit, the search trace, the data warnings and the --ranks snippet."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from loadertop.core.engine.drive.driver import Sweep
from loadertop.core.engine.search.adaptive import make_planner
from loadertop.core.engine.verdict.outcome import conclude
from loadertop.core.engine.verdict.rerun import Evidence, fold_rerun, merge_ceilings, merge_trials
from loadertop.core.engine.verdict.usl import fit_usl
from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.results import Ceiling, MachineInfo, SearchStep, SweepResult, TrialResult

SETTINGS = Settings(
    dataset="synthetic:cpu_ms=0.2,io_ms=2,kb=16",
    workers=(0, 1, 2, 4),
    ranks=2,
    trial_seconds=1.0,
    block_seconds=0.1,
    interval=0.2,
    search="grid",
    start_methods=("fork",),
)
WARNING = "samples repeat: the dataset returned the same sample twice"
# Far above anything the rerun measures here, so the measured row is clearly the slowest one.
RECORDED = {1: 400_000.0, 2: 700_000.0, 4: 1_000_000.0}


def machine() -> MachineInfo:
    return MachineInfo("box", "linux", "3.11", None, 2, 2, None, 8000.0, 4000.0, None, None, "fork")


def by_workers(settings: Settings = SETTINGS) -> dict[int, TrialConfig]:
    return {c.num_workers: c for c in settings.trial_configs()}


def recorded_trial(index: int, config: TrialConfig, sps: float, **extra: object) -> TrialResult:
    return TrialResult(
        index, config, "ok", samples_per_s=sps, batches_per_s=sps / 32, spread=0.02, stall_fraction=0.3,
        ranks=2, rank_samples_per_s=(sps / 2, sps / 2), **extra,  # type: ignore[arg-type]
    )  # fmt: skip


def previous_result() -> SweepResult:
    """A recorded sweep: 0 workers recommended at a (made-up) 5M samples/s, with ceilings, USL fit and trace."""
    configs = by_workers()
    trials = [recorded_trial(0, configs[0], 5_000_000.0)]
    for i, n in enumerate((1, 2, 4), start=1):
        trials.append(recorded_trial(i, configs[n], RECORDED[n], warnings=(WARNING,) if n == 4 else ()))
    trace = (SearchStep("plan", "4 configurations: measuring all of them"), SearchStep("done", "measured all 4"))
    conclusion = conclude(trials, SETTINGS, machine(), ceilings=(Ceiling(32, 9e9, "recorded"),), search_trace=trace)
    result = conclusion.result
    assert result.recommendation is not None and result.recommendation.config == configs[0]
    assert result.usl is not None
    return result


def test_a_real_row_rerun_keeps_the_whole_picture_and_judges_every_row(runs: Path, no_leftovers: None) -> None:
    prev = previous_result()
    configs = by_workers()
    result = Sweep(SETTINGS, out_dir=runs, previous=prev, only=[configs[0]]).run()

    # Every row, once, renumbered; the rerun row is the real measurement, the others are as recorded.
    assert [t.index for t in result.trials] == [0, 1, 2, 3]
    assert [t.config.num_workers for t in result.trials] == [0, 1, 2, 4]
    rerun = result.trials[0]
    assert rerun.status == "ok", rerun.error
    assert rerun.ranks == 2 and len(rerun.rank_samples_per_s) == 2
    assert rerun.samples_per_s is not None and rerun.samples_per_s < 100_000  # measured, not the recorded 5M
    assert [t.samples_per_s for t in result.trials[1:]] == [RECORDED[1], RECORDED[2], RECORDED[4]]

    # Judged over all rows: the measured 0 workers lost to the recorded rows, so the recommendation moved to 4
    # workers (judged alone, the rerun row would have been recommended), and its reason compares with them.
    rec = result.recommendation
    assert rec is not None and rec.config == configs[4] and rec.trial_index == 3
    assert "of best" in rerun.reason and ", best" not in rerun.reason

    # The ranks snippet, the data warnings, ceilings, a refit USL and the trace (the previous plus the rerun's).
    assert "sampler=DistributedSampler(dataset)" in rec.snippet and "num_workers=4" in rec.snippet
    assert WARNING in rec.reason and "workers are per rank" in rec.reason
    assert WARNING in result.trials[3].reason
    assert result.ceilings and all(c.samples_per_s is not None for c in result.ceilings)
    expected_usl = fit_usl([0, 1, 2, 4], [rerun.samples_per_s, RECORDED[1], RECORDED[2], RECORDED[4]])
    assert result.usl is not None and expected_usl is not None
    assert result.usl.peak_workers == expected_usl.peak_workers and result.usl.r2 == expected_usl.r2
    assert result.search_trace[:2] == prev.search_trace
    assert [(s.phase, s.config) for s in result.search_trace[2:]] == [("rerun", configs[0].label())]
    assert result.settings == prev.settings and result.iterable is False
    # What the run folder keeps is that whole picture.
    assert SweepResult.from_dict(result.to_dict()) == result


@pytest.mark.unit
def test_a_plain_previous_is_only_a_baseline() -> None:
    only = [by_workers()[1]]
    assert make_planner(SETTINGS, only).reruns_rows
    assert not make_planner(SETTINGS).reruns_rows and not make_planner(SETTINGS, []).reruns_rows


@pytest.mark.unit
def test_merge_puts_rerun_runs_in_place_and_renumbers() -> None:
    c = by_workers()
    previous = [
        recorded_trial(0, c[0], 10.0),
        recorded_trial(1, c[1], 20.0),
        recorded_trial(2, c[2], 30.0),
        recorded_trial(3, c[1], 22.0),  # a finalist repeat of w=1
    ]
    rerun = [recorded_trial(0, c[1], 25.0), recorded_trial(1, c[1], 26.0), recorded_trial(2, c[4], 40.0)]
    merged = merge_trials(previous, rerun)
    assert [(t.index, t.config.num_workers, t.samples_per_s) for t in merged] == [
        (0, 0, 10.0), (1, 1, 25.0), (2, 1, 26.0), (3, 2, 30.0), (4, 4, 40.0),
    ]  # fmt: skip
    assert merge_trials(previous, []) == previous  # a rerun cancelled before any trial ended changes nothing


@pytest.mark.unit
def test_merge_ceilings_prefers_fresh_measured_ones() -> None:
    old = (Ceiling(32, 100.0, "old"), Ceiling(64, None, "not measured"), Ceiling(128, 300.0, "old"))
    fresh = (Ceiling(32, None, "not measured (boom)"), Ceiling(64, 210.0, "fresh"), Ceiling(256, None, "no work"))
    assert merge_ceilings(old, fresh) == (
        Ceiling(32, 100.0, "old"),
        Ceiling(64, 210.0, "fresh"),
        Ceiling(128, 300.0, "old"),
        Ceiling(256, None, "no work"),
    )
    assert merge_ceilings((), fresh) == fresh


@pytest.mark.unit
def test_fold_keeps_the_previous_settings_and_trace_and_knows_the_dataset() -> None:
    prev = dataclasses.replace(previous_result(), iterable=True)
    tighter = dataclasses.replace(SETTINGS, trial_seconds=9.0)
    step = SearchStep("rerun", "again", "w=1")
    rerun = Evidence((recorded_trial(0, by_workers()[1], 1.0),), tighter, (), (step,), False)
    folded = fold_rerun(prev, rerun)
    assert folded.settings == SETTINGS and folded.iterable
    assert folded.search_trace == (*prev.search_trace, step) and folded.ceilings == prev.ceilings
    assert len(folded.trials) == 4 and folded.trials[1].samples_per_s == 1.0


@pytest.mark.unit
def test_conclude_with_rerun_of_judges_the_whole_table() -> None:
    prev = previous_result()
    slow = recorded_trial(0, by_workers()[0], 5.0)
    alone = conclude([slow], SETTINGS, machine()).result
    assert alone.recommendation is not None and alone.recommendation.config.num_workers == 0
    whole = conclude([slow], SETTINGS, machine(), rerun_of=prev).result
    assert whole.recommendation is not None and whole.recommendation.config.num_workers == 4
    assert whole.usl is not None and whole.ceilings == prev.ceilings
    # The iterable flag decides the --ranks snippet: no DistributedSampler for an IterableDataset.
    iterable = conclude([slow], SETTINGS, machine(), rerun_of=dataclasses.replace(prev, iterable=True)).result
    assert iterable.recommendation is not None and "DistributedSampler" not in iterable.recommendation.snippet
    assert iterable.iterable
