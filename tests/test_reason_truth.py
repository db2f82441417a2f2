"""Advice and labels that the measurements beside them contradict.

Results are built by hand (no trials run) from the issue's own numbers, and two recorded runs are judged again; the
reasons come from the engine's one conclusion (engine/outcome.conclude), as every face shows them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from reason_checks import contradictions

from loadertop.core.engine.report.rows import build_report
from loadertop.core.engine.verdict.bound import CPU_BOUND, IO_BOUND, LOADER_BOUND, bound_of
from loadertop.core.engine.verdict.outcome import conclude
from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.results import Ceiling, Knee, MachineInfo, SweepResult, TrialResult

pytestmark = pytest.mark.unit  # no subprocess, no DataLoader workers

DATA = Path(__file__).parent / "data"
STEPPING = Settings(start_methods=("fork",), tolerance=0.05, consumer="x.py:step")
PLAIN = Settings(start_methods=("fork",), tolerance=0.05)


def machine(cpus: int = 2) -> MachineInfo:
    return MachineInfo("box", "linux", "3.12", "2.6", cpus, cpus, None, 64000.0, 32000.0, None, None, "fork")


def trial(i: int, w: int, sps: float, cpu: float, main: float, stall: float, *, pss: float = 0.0) -> TrialResult:
    config = TrialConfig(w, 32, 2 if w else None, False, False, "fork" if w else None)
    return TrialResult(
        index=i, config=config, status="ok", samples_per_s=sps, batches_per_s=sps / 32, spread=0.02,
        stall_fraction=stall, cpu_percent=cpu, main_cpu_percent=main, main_threads=1,
        total_pss_mb=pss or 400.0 + 150.0 * w,
    )  # fmt: skip


# The issue's first hour on 2 CPUs: 0 and 1 worker slower than 2 (375, 329 vs 486); 8 workers share the two
# saturated cores (152% in all, 14% per worker).
FIRST_HOUR = [
    trial(0, 0, 375.0, 98.0, 98.0, 0.60),
    trial(1, 1, 329.0, 120.0, 40.0, 0.55),
    trial(2, 2, 486.0, 190.0, 45.0, 0.20),
    trial(3, 4, 480.0, 185.0, 45.0, 0.25),
    trial(4, 8, 470.0, 152.0, 40.0, 0.30),
]
# A consumer on 2 CPUs, 0 to 2 workers by grid: 2 the fastest and the largest tried, its training loop barely
# waiting (stall 3%): its row says consumer-bound, and the Why said loader-bound.
RISING_TO_THE_CONSUMER = [
    trial(0, 0, 40.0, 95.0, 95.0, 0.55),
    trial(1, 1, 40.0, 120.0, 70.0, 0.30),
    trial(2, 2, 56.0, 140.0, 80.0, 0.03),
]
# A float32 image batch on 2 CPUs: 2 workers hand over 93% of what this machine's workers can hand over at all
# (the transport ceiling), and the main process alone, loader-bound, is faster: the ★ 0-worker row said
# loader-bound, the Why led with transport-bound.
HANDED_OVER = [trial(0, 0, 800.0 * 32, 60.0, 60.0, 0.20), trial(1, 2, 140.0 * 32, 120.0, 40.0, 0.5)]
HANDED_OVER_CEILINGS = (
    Ceiling(32, 900.0 * 32, "null", None, "transport", 0, False, 900.0, 900.0 * 18.4 / 1024, 18.4, 2, True),
    Ceiling(32, 150.0 * 32, "null", None, "transport", 2, False, 150.0, 150.0 * 18.4 / 1024, 18.4, 2, True),
)
# A busy machine (CI, other tests on its 2 CPUs): the fastest, 1 worker, epoch-bound (each epoch's restart 26% of
# its time); its ceilings read while other processes held the CPUs: the consumer alone at a third of what the trials
# reached with it, the transport's blocks spread 70% wide. The ★ row said epoch-bound and "300% of ceiling", the Why
# "transport-bound: 1 worker reaches 21% of" that ceiling.
BUSY_CEILINGS_TRIALS = [
    dataclasses.replace(trial(0, 0, 102.0, 98.0, 98.0, 0.60), spread=0.3),
    dataclasses.replace(trial(1, 1, 207.0, 150.0, 90.0, 0.30), spread=0.3, epoch_batches=10, epoch_restart_s=0.4),
    dataclasses.replace(trial(2, 2, 150.0, 190.0, 80.0, 0.40), spread=0.3),
]
BUSY_CEILINGS = (
    Ceiling(32, 69.0, "consumer alone on a cached batch", 0.1),
    Ceiling(32, 31.0 * 32, "null", 0.7, "transport", 1, False, 31.0, 31.0 * 0.8 / 1024, 0.8, 2, True),
)
# Genuinely waiting: 8 CPUs mostly idle while the training loop stalls.
IO_WAITING = [trial(i, w, 90.0 * w, 10.0 + 8.0 * w, 8.0, 0.8) for i, w in enumerate((1, 2, 4, 8, 16))]
IO_WAITING[-1] = dataclasses.replace(IO_WAITING[-1], samples_per_s=760.0)  # flat past 8: 720 vs 760
# CPU-bound from 2 workers on a 2-CPU machine, with no training step on the CPU.
SATURATING = [
    trial(0, 0, 100.0, 100.0, 100.0, 0.6),
    trial(1, 1, 95.0, 110.0, 15.0, 0.6),
    trial(2, 2, 190.0, 185.0, 20.0, 0.3),
    trial(3, 4, 195.0, 196.0, 20.0, 0.3),
    trial(4, 8, 185.0, 198.0, 20.0, 0.3),
]


def judged(trials: list[TrialResult], settings: Settings = STEPPING, cpus: int = 2) -> SweepResult:
    return conclude(trials, settings, machine(cpus)).result


# -- 22.4: advice ---------------------------------------------------------------------------------------------------


def test_the_recommendation_does_not_advise_fewer_workers_that_measured_slower() -> None:
    result = judged(FIRST_HOUR)
    rec = result.recommendation
    assert rec is not None and rec.config.num_workers == 2
    assert "oversubscribed: 2 workers × 1 thread + 1 main-process thread = 3 > 2 usable CPUs" in rec.reason
    assert "fewer workers" not in rec.reason.replace("fewer workers measured slower", "")
    assert "yet fewer workers measured slower (1 worker: 329, 0 workers: 375 vs 486 samples/s)" in rec.reason
    row = next(t for t in result.trials if t.config.num_workers == 2)
    assert "try fewer workers" not in row.reason and "fewer workers measured slower" in row.reason


def test_advice_stays_where_the_measurements_support_it() -> None:
    # The 8-worker row: 2 and 4 workers kept up (486, 480 vs 470), so fewer workers is sound advice there.
    row = next(t for t in judged(FIRST_HOUR).trials if t.config.num_workers == 8)
    assert "(try fewer workers)" in row.reason
    # Nothing measured below: the advice is untried, not contradicted.
    alone = judged([dataclasses.replace(t, index=i) for i, t in enumerate(FIRST_HOUR[2:])])
    assert alone.recommendation is not None and "(try fewer workers)" in alone.recommendation.reason


# -- 22.5: labels ---------------------------------------------------------------------------------------------------


def test_eight_workers_sharing_two_saturated_cores_are_cpu_bound_not_io_bound() -> None:
    row = next(t for t in judged(FIRST_HOUR).trials if t.config.num_workers == 8)
    assert row.reason.startswith("CPU-bound (1.5/2 CPUs)"), row.reason
    assert "I/O-bound" not in row.reason
    # The same trial as the recommendation (a sweep of 8 workers alone) says the same.
    alone = judged([dataclasses.replace(FIRST_HOUR[-1], index=0)], PLAIN)
    assert alone.recommendation is not None and alone.recommendation.reason.startswith("CPU-bound: workers use 1.5")


def test_a_loader_starved_by_other_processes_is_cpu_bound_not_io_bound() -> None:
    # Measured on a loaded machine: a CPU-bound decode at 8 workers got 0.6 of 2 CPUs while other
    # processes held the rest (vmstat: 0-19% idle), and read "I/O-bound (0.6/2 CPUs, workers at 1% CPU each)"
    starved = dataclasses.replace(trial(0, 8, 120.0, 60.0, 20.0, 0.95), machine_cpu_percent=192.0)
    b = bound_of(starved, machine(2))
    assert b.kind == CPU_BOUND and b.contended
    result = judged([trial(1, 1, 60.0, 50.0, 10.0, 0.9), starved], PLAIN)
    row = next(t for t in result.trials if t.config.num_workers == 8)
    assert row.reason.startswith("CPU-bound (1.9/2 CPUs busy, 1.3 of them other processes')"), row.reason
    assert contradictions(result) == []
    said_io = dataclasses.replace(row, reason="I/O-bound (0.6/2 CPUs, workers at 1% CPU each)")
    found = contradictions(dataclasses.replace(result, trials=(said_io,)))
    assert any("while every process held 96%" in f for f in found), found
    # the same trial on a quiet machine (the others idle) waits: I/O-bound
    quiet = dataclasses.replace(starved, machine_cpu_percent=70.0)
    assert bound_of(quiet, machine(2)).kind == IO_BOUND


def test_waiting_workers_on_an_idle_machine_are_still_io_bound() -> None:
    result = judged(IO_WAITING, PLAIN, cpus=8)
    assert all(t.reason.startswith("I/O-bound (") for t in result.trials), [t.reason for t in result.trials]
    assert result.recommendation is not None and result.recommendation.reason.startswith("I/O-bound: ")


@pytest.mark.parametrize(
    ("workers", "cpu", "main", "cpus", "kind"),
    [
        (8, 152.0, 40.0, 2, CPU_BOUND),  # the issue's row: 76% of the machine
        (8, 60.0, 20.0, 2, IO_BOUND),  # 30% of the machine: waiting
        (1, 105.0, 5.0, 8, LOADER_BOUND),  # one worker at 100% of its CPU, 7 CPUs idle: more workers help
        (1, 35.0, 5.0, 8, IO_BOUND),  # one worker at 30%: waiting
        (4, 260.0, 20.0, 4, LOADER_BOUND),  # 65% of the machine, 60% per worker: neither saturated nor idle
    ],
)
def test_one_function_decides_the_label_for_the_table_and_the_recommendation(workers, cpu, main, cpus, kind) -> None:
    t = trial(0, workers, 500.0, cpu, main, 0.4)
    assert bound_of(t, machine(cpus)).kind == kind
    result = judged([t], PLAIN, cpus)
    assert result.trials[0].reason.startswith(kind)
    assert result.recommendation is not None and result.recommendation.reason.startswith(kind)


# -- 22.5: the knee -------------------------------------------------------------------------------------------------


def test_the_knee_is_not_at_zero_workers_when_workers_add_more_than_the_band() -> None:
    result = judged(FIRST_HOUR)
    assert result.knee is not None and result.knee.num_workers == 2, result.knee
    assert "gains flatten at 0 workers" not in result.knee.reason
    # Every face marks the engine's one knee: the report's ◆ row is that knee's row.
    marked = [row.config.num_workers for row in build_report(result).rows if row.knee]
    assert marked == [2]


def test_a_knee_at_zero_workers_remains_where_workers_add_nothing() -> None:
    points = ((0, 400.0), (1, 300.0), (2, 390.0), (4, 395.0))  # workers add nothing over 0 (within 5%)
    flat_after_zero = [trial(i, w, s, 100.0, 60.0, 0.5) for i, (w, s) in enumerate(points)]
    knee = judged(flat_after_zero, PLAIN).knee
    assert knee is not None and knee.num_workers in (0, None), knee


# -- 4: no reason clause contradicts the table ----------------------------------------------------------------------


def _recorded(name: str) -> SweepResult:
    recorded = SweepResult.from_dict(json.loads((DATA / name).read_text()))
    trials = [dataclasses.replace(t, reason="") for t in recorded.trials]
    return conclude(trials, recorded.settings, recorded.machine, ceilings=recorded.ceilings).result


CASES = {
    "first hour (2 CPUs, a consumer)": lambda: judged(FIRST_HOUR),
    "first hour without the consumer": lambda: judged(FIRST_HOUR, PLAIN),
    "I/O-bound on 8 CPUs": lambda: judged(IO_WAITING, PLAIN, cpus=8),
    "saturating 2 CPUs, a consumer": lambda: judged(SATURATING),
    "rising to the top of the range, consumer-bound": lambda: judged(
        RISING_TO_THE_CONSUMER, dataclasses.replace(STEPPING, workers=(0, 1, 2), search="grid")
    ),
    "0 workers faster than workers hand over": lambda: (
        conclude(HANDED_OVER, PLAIN, machine(), ceilings=HANDED_OVER_CEILINGS).result
    ),
    "ceilings read on a busy machine": lambda: (
        conclude(BUSY_CEILINGS_TRIALS, STEPPING, machine(), ceilings=BUSY_CEILINGS).result
    ),
    "recorded_result.json": lambda: _recorded("recorded_result.json"),
    "previous_result.json": lambda: _recorded("previous_result.json"),
    # A default run on the first-hour pipeline: the ★ row epoch-bound (its Why said I/O-bound)
    "epoch_bound_result.json": lambda: _recorded("epoch_bound_result.json"),
    # The default sweep on an audio pipeline whose fresh workers import a library on their first sample: each
    # epoch restarts them, and the search measured the same counts with persistent workers
    "epoch_restart_result.json": lambda: _recorded("epoch_restart_result.json"),
    # A default run: 4 workers 5.1% behind over 6 runs each, a close call just outside the band; its row
    # said "within noise of best" by its own ±11% spread
    "close_call_result.json": lambda: _recorded("close_call_result.json"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_no_reason_clause_contradicts_the_table(case: str) -> None:
    assert contradictions(CASES[case]()) == []


def test_ceilings_read_on_a_busy_machine_place_no_trial_near_them() -> None:
    result = CASES["ceilings read on a busy machine"]()
    rec = result.recommendation
    assert rec is not None and rec.config.num_workers == 1
    assert rec.reason.startswith("epoch-bound"), rec.reason
    assert not any("transport-bound" in t.reason for t in result.trials), [t.reason for t in result.trials]
    # every trial beat the consumer alone: the ceiling read low, and no share of it is quoted
    assert all("that ceiling read low" in t.reason and "of ceiling" not in t.reason for t in result.trials)


def test_the_checker_finds_a_row_within_noise_that_the_recommendation_put_outside() -> None:
    as_written = SweepResult.from_dict(json.loads((DATA / "close_call_result.json").read_text()))  # before the fix
    assert contradictions(as_written) == [
        "#16 w=4: its row says 'CPU-bound (1.7/2 CPUs), within noise of best', but it is not in the ≈ set"
    ]


def test_the_checker_finds_the_sentences_the_issue_found() -> None:
    # The issue's own sentences, beside its own numbers: each is found (a checker that finds nothing proves nothing).
    result = judged(FIRST_HOUR)
    rows = [dataclasses.replace(t, reason="I/O-bound (workers at 14% CPU each)") if t.config.num_workers == 8 else t
            for t in result.trials]  # fmt: skip
    rec = result.recommendation
    assert rec is not None
    said = dataclasses.replace(
        rec, reason="CPU-bound: ...; oversubscribed: 3 > 2 CPUs (try fewer workers); slower again at 4 workers (+3%)"
    )
    knee = Knee(0, "kneedle", "gains flatten at 0 workers (375 samples/s, 77% of the 486 samples/s peak at 2 workers)")
    found = contradictions(dataclasses.replace(result, trials=tuple(rows), recommendation=said, knee=knee))
    assert any("'I/O-bound' at 76%" in f for f in found), found
    assert any("'try fewer workers' when fewer measured slower" in f for f in found), found
    assert any("knee at 0 workers" in f for f in found), found
    assert any("'slower again at 4 workers'" in f for f in found), found


def test_no_speed_is_read_as_the_rule_chooses_it() -> None:
    """'no speed (a vs b, within B%)': the slower of the two within B% below the faster, either way round (the rule
    a recommendation is chosen by: band.at_least_within of the cheaper against the best)."""
    from reason_checks import _comparisons

    assert _comparisons("8 workers add 90 MB and no speed (493 vs 449 samples/s, within 9.5%)") == []
    assert _comparisons("2 workers add no speed (449 vs 493 samples/s, within 9.5%)") == []
    assert _comparisons("8 workers add 90 MB and no speed (560 vs 449 samples/s, within 9.5%)") == [
        "'no speed' when 560 beats 449 by more than 9.5%"
    ]
