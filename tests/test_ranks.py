"""--ranks: R loader replicas at once, as torchrun starts them; sharded, aggregated, advised per rank, cleaned up."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from loadertop.core.engine.drive.driver import Sweep
from loadertop.core.engine.nodes.rank_notes import processes, ranks_note, rule_of_thumb, with_notes
from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.events import TrialProgress
from loadertop.core.model.protocol import Finished
from loadertop.core.model.results import TrialResult
from loadertop.core.trial.ranks import aggregate

DATA = Path(__file__).parent / "data"
FAST = dict(trial_seconds=1.5, block_seconds=0.1, interval=0.2, search="grid", start_methods=("fork",))


@pytest.mark.unit
def test_rule_of_thumb_and_process_count() -> None:
    assert rule_of_thumb(64, 8) == 6.0 and rule_of_thumb(256, 1) == 16.0 and rule_of_thumb(2, 2) == 0.75
    assert processes(3, 2) == 8
    note = ranks_note(workers=1, ranks=2, usable_cpus=2)
    assert "2 ranks × (1 worker + 1) = 4 processes on 2 usable CPUs (more than the CPUs)" in note
    assert "min(16, 0.75 × 2 ÷ 2) = 0.75 → 0 workers per rank is below the measured choice" in note
    assert "matches" in ranks_note(workers=6, ranks=8, usable_cpus=64)


@pytest.mark.unit
def test_aggregate_sums_rates_and_keeps_the_worst_of_the_rest() -> None:
    one = Finished(batches_per_s=10.0, samples_per_s=320.0, spread=0.02, first_batch_s=0.5, stall_fraction=0.9,
                   blocks=7, measured_s=2.0, warmup_batches=4, stable=True, warnings=("w",))  # fmt: skip
    two = dataclasses.replace(
        one, samples_per_s=300.0, batches_per_s=9.0, spread=0.08, first_batch_s=0.7, blocks=6, stable=False
    )
    node = aggregate([one, two])
    assert node.samples_per_s == 620.0 and node.batches_per_s == 19.0 and not node.stable
    assert node.spread == 0.08 and node.first_batch_s == 0.7 and node.blocks == 6
    assert node.ranks == 2 and node.rank_samples_per_s == (320.0, 300.0) and node.warnings == ("w",)


@pytest.mark.unit
def test_trial_reason_names_the_ranks_and_processes() -> None:
    trial = TrialResult(0, TrialConfig(2, 32, 2), "ok", reason="CPU-bound", rank_samples_per_s=(300.0, 280.0))
    assert with_notes(trial, ranks=2, usable_cpus=4).reason == (
        "CPU-bound; 2 ranks (300 + 280 samples/s), 6 processes on 4 CPUs"
    )
    assert with_notes(trial, ranks=1, usable_cpus=4) is trial


def test_two_ranks_shard_the_data_and_report_per_rank(
    runs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_leftovers: None
) -> None:
    seen = tmp_path / "seen"
    seen.mkdir()
    monkeypatch.setenv("LOADERTOP_TEST_RANKS", str(seen))
    settings = Settings(dataset=f"{DATA}/ranked.py:make", workers=(0, 1), ranks=2, **FAST)
    result = Sweep(settings, out_dir=runs).run()
    assert [t.status for t in result.trials] == ["ok", "ok"], [t.error for t in result.trials]
    for trial in result.trials:
        assert trial.ranks == 2 and len(trial.rank_samples_per_s) == 2
        assert trial.samples_per_s == pytest.approx(sum(trial.rank_samples_per_s))
        assert f"{2 * (trial.config.num_workers + 1)} processes" in trial.reason
    # Every process that loaded samples knew its rank, and the ranks read disjoint shards (DistributedSampler).
    by_rank: dict[int, set[int]] = {0: set(), 1: set()}
    for file in seen.iterdir():
        for line in file.read_text().splitlines():
            rank, index = map(int, line.split())
            by_rank[rank].add(index)
    assert by_rank[0] and by_rank[1] and not by_rank[0] & by_rank[1]
    assert {i % 2 for i in by_rank[0]} == {0} and {i % 2 for i in by_rank[1]} == {1}
    rec = result.recommendation
    assert rec is not None and "sampler=DistributedSampler(dataset)" in rec.snippet
    assert "workers are per rank" in rec.reason and "rule of thumb min(16, 0.75 ×" in rec.reason


def test_a_failing_rank_fails_the_trial_with_its_reason(runs: Path, no_leftovers: None) -> None:
    settings = Settings(dataset=f"{DATA}/ranked.py:fails_on_rank_one", workers=(1,), ranks=2, **FAST)
    settings = dataclasses.replace(settings, trial_timeout=30.0)
    started = time.monotonic()
    result = Sweep(settings, out_dir=runs).run()
    (trial,) = result.trials
    assert trial.status == "failed"
    assert trial.error is not None and "rank 1" in trial.error and "cannot open its shard" in trial.error
    assert time.monotonic() - started < 25  # told by the rank, not found by the hang timeout


def test_cancel_mid_trial_takes_every_rank_and_worker(runs: Path, no_leftovers: None) -> None:
    settings = Settings(dataset=f"{DATA}/ranked.py:make", workers=(1,), ranks=2, **{**FAST, "trial_seconds": 30.0})
    sweep = Sweep(settings, out_dir=runs)
    for event in sweep.events():
        if isinstance(event, TrialProgress):
            sweep.cancel()
    assert sweep.result is not None and sweep.result.interrupted


@pytest.mark.unit
def test_uneven_ranks_are_named_with_the_lockstep_rate() -> None:
    trial = TrialResult(0, TrialConfig(1, 32, 2), "ok", reason="loader-bound", rank_samples_per_s=(227.0, 347.0))
    assert with_notes(trial, ranks=2, usable_cpus=2).reason.endswith(
        "uneven ranks: in lockstep training 2 × the slowest = 454 samples/s"
    )
