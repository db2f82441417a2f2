"""The epoch boundary as a cost: when each epoch's restart of the workers takes a share of it beyond the noise band,
the search measures the same worker counts with persistent_workers=True unasked, and the reasons name the restart.

Fixed figures of an audio pipeline on 2 CPUs (a heavy library imported inside __getitem__, 9-batch epochs): each
fresh worker pays 1.5 s of imports, started one after another, so a plain loader's epoch waits 1.5 s + 1.5 s per
worker at its boundary; persistent workers wait 0.05 s. One short sweep with real workers is at the end."""

from __future__ import annotations

import dataclasses
import io
import re
from typing import Any

import pytest
from reason_checks import contradictions
from test_search import drive, machine, settings

from loadertop.core.engine.search.adaptive import AdaptivePlanner
from loadertop.core.engine.verdict.analysis import analyze
from loadertop.core.engine.verdict.outcome import conclude
from loadertop.core.engine.verdict.reasons import epoch_bound
from loadertop.core.engine.verdict.stops import FLAT, Stop
from loadertop.core.model.config import TrialConfig
from loadertop.core.model.results import TrialResult
from loadertop.faces.headless import Reporter

EPOCH_SAMPLES, BATCH = 288, 32  # 9 batches of 32
PER_CORE = 58.0  # samples/s one CPU computes


def audio(config: TrialConfig, run: int, *, import_s: float = 1.5) -> dict[str, Any]:
    """Whole epochs, boundary included: the steady rate of min(workers, 2 CPUs), and the restart."""
    n = config.num_workers
    steady = PER_CORE * max(1, min(n, 2)) * (0.9 if n else 1.0)
    restart = 0.0 if n == 0 else 0.05 if config.persistent_workers else import_s * (1 + n)
    epoch_s = EPOCH_SAMPLES / steady + restart
    return {
        "samples_per_s": EPOCH_SAMPLES / epoch_s,
        "batches_per_s": EPOCH_SAMPLES / BATCH / epoch_s,
        "epoch_batches": EPOCH_SAMPLES // BATCH,
        "epoch_restart_s": restart if n else 0.6,
    }


def persistent(trials: list[TrialResult]) -> list[int]:
    return [t.config.num_workers for t in trials if t.config.persistent_workers]


@pytest.mark.unit
def test_a_restart_beyond_the_noise_band_has_the_same_worker_counts_measured_with_persistent_workers() -> None:
    planner = AdaptivePlanner(settings())
    done = drive(planner, audio)
    plain = sorted({t.config.num_workers for t in done if t.config.num_workers and not t.config.persistent_workers})
    assert set(persistent(done)) == set(plain) and plain  # every count the climb measured, none asked for
    first = next(i for i, t in enumerate(done) if t.config.persistent_workers)
    assert all(not t.config.persistent_workers for t in done[:first])  # after the climb, not instead of it
    notes = [s.message for s in planner.trace if s.phase == "epoch"]
    assert "each epoch restarts 2 workers in 4.50 s, 62% of its time, beyond the 5% noise band: measure " in notes[1]
    assert notes[1].endswith("w=2 bs=32 pf=2 persist fork, whose workers live from epoch to epoch")


@pytest.mark.unit
def test_a_restart_within_the_noise_band_adds_no_persistent_trial() -> None:
    done = drive(AdaptivePlanner(settings()), lambda c, r: audio(c, r, import_s=0.01))
    assert persistent(done) == []


@pytest.mark.unit
def test_a_small_space_measures_its_persistent_twins_too_and_a_swept_one_is_not_measured_twice() -> None:
    small = drive(AdaptivePlanner(settings(workers=(0, 2))), audio)
    assert [(t.config.num_workers, t.config.persistent_workers) for t in small] == [(0, False), (2, False), (2, True)]
    swept = drive(AdaptivePlanner(settings(workers=(0, 2), persistent_workers=(False, True))), audio)
    assert len(swept) == 3  # 0, 2 and 2 persistent, the user's: none again


@pytest.mark.unit
def test_a_plain_rows_reason_names_the_restart_and_what_persistent_workers_do() -> None:
    row = TrialResult(0, TrialConfig(2, 32, 2, False, False, "fork"), "ok", **audio(TrialConfig(2, 32), 0))
    assert epoch_bound(row) == (
        "epoch-bound (each epoch restarts 2 workers in 4.50 s, 62% of its time: persistent_workers=True keeps them)"
    )
    kept = dataclasses.replace(row, config=KEPT[1], epoch_restart_s=2.0)  # a long wait for the first batch still
    assert epoch_bound(kept) == "epoch-bound (each 9-batch epoch waits 2.00 s at its boundary, 28% of its time)"


def _trials(*configs: TrialConfig) -> list[TrialResult]:
    return [TrialResult(i, c, "ok", spread=0.02, stable=True, **audio(c, 0)) for i, c in enumerate(configs)]


ZERO = TrialConfig(0, 32)
PLAIN = [TrialConfig(n, 32, 2, False, False, "fork") for n in (1, 2, 4)]
KEPT = [dataclasses.replace(c, persistent_workers=True) for c in PLAIN]


@pytest.mark.unit
def test_zero_workers_chosen_over_restarting_ones_says_the_restart_is_the_cost_never_transfer() -> None:
    _, rec = analyze(_trials(ZERO, *PLAIN), settings(), machine())
    assert rec is not None and rec.config == ZERO
    assert rec.reason.startswith("the main process does the work fastest (0 workers): workers cost more than they save")
    assert (
        "each epoch restarts 2 workers in 4.50 s, 62% of its time, and each fresh worker pays its start-up again (its "
        "process, the dataset, every import its first sample makes); persistent_workers=True keeps them"
    ) in rec.reason
    assert "transfer" not in rec.reason and "transport" not in rec.reason


@pytest.mark.unit
def test_persistent_workers_chosen_say_what_the_restart_cost_without_them() -> None:
    trials = _trials(ZERO, *PLAIN, *KEPT)
    result = conclude(trials, settings(), machine()).result
    rec = result.recommendation
    assert rec is not None and rec.config == KEPT[1]  # 2 persistent workers: both CPUs, no restart
    assert "persistent workers: without them each epoch restarts 2 workers in 4.50 s, 62% of its time (40 vs " in (
        rec.reason
    )
    assert "DataLoader(dataset, batch_size=32, num_workers=2, persistent_workers=True)" in rec.snippet
    assert contradictions(result) == []


@pytest.mark.unit
def test_the_epoch_column_stays_in_the_headless_table_at_100_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    result = conclude(_trials(ZERO, *PLAIN, *KEPT), settings(), machine()).result
    out = io.StringIO()
    Reporter(out, io.StringIO()).summary(result)
    lines = re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue()).splitlines()
    header = next(line for line in lines if "samples/s" in line and "┃" in line)
    assert "epoch" in header and max(len(line) for line in lines) <= 100
    assert " 4.50 s " in "\n".join(lines)
    dropped = next((line for line in lines if line.startswith("not shown at 100 columns")), "")
    assert "epoch" not in dropped


@pytest.mark.unit
def test_the_checker_finds_a_restart_no_trial_measured_and_a_transfer_never_measured() -> None:
    result = conclude(_trials(ZERO, *PLAIN), settings(), machine()).result
    wrong = "epoch-bound (each epoch restarts 2 workers in 6.30 s, 41% of its time: persistent_workers=True keeps them)"
    rows = [dataclasses.replace(t, reason=wrong) if t.config == PLAIN[1] else t for t in result.trials]
    rec = result.recommendation
    assert rec is not None
    said = dataclasses.replace(rec, reason="transport-bound: workers cost more than they save")
    found = contradictions(dataclasses.replace(result, trials=tuple(rows), recommendation=said))
    assert any("'restarts 2 workers in 6.30 s, 41%' matches no measured trial" in f for f in found), found
    assert any("'transport-bound' with no transport ceiling measured" in f for f in found), found


@pytest.mark.unit
def test_a_persistent_top_rung_says_the_climb_that_stopped_was_the_one_without_them() -> None:
    trials = _trials(ZERO, *PLAIN, *KEPT)
    trials[-1] = dataclasses.replace(trials[-1], samples_per_s=150.0)  # 4 persistent workers: the fastest
    stop = Stop("stopped climbing: 4 workers: 28 samples/s, −30% over 2 workers", FLAT, 4, -0.3).step()
    rec = conclude(trials, settings(), machine(), search_trace=(stop,)).result.recommendation
    assert rec is not None and rec.config == KEPT[2]
    assert (
        "fastest at 4 workers, the most measured (no fewer within 5%); the climb without persistent workers stopped "
        "there (4 workers gained less than the noise band: more were not run), and they were measured at its counts"
    ) in rec.reason
