"""Every DataLoader knob as a sweep axis: what runs, what is skipped and why, what reaches the DataLoader, and the
epoch boundary that persistent workers are for."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.data import BatchSampler, DistributedSampler, RandomSampler, SequentialSampler

from loadertop.core.engine.drive.driver import Sweep
from loadertop.core.engine.verdict.analysis import snippet
from loadertop.core.model.config import Settings, TrialConfig, default_start_method, zero_worker_conflicts
from loadertop.core.trial.loader import EpochControl, build_loader
from loadertop.core.trial.measure import MeasuredLoop

DATA = Path(__file__).parent / "data"
FAST = dict(trial_seconds=1.0, block_seconds=0.1, interval=0.2, search="grid")


# -- the sweep space ----------------------------------------------------------------------------------------------


@pytest.mark.unit
def test_zero_worker_combinations_are_measured_once_and_the_rest_skipped_with_a_reason() -> None:
    settings = Settings(
        workers=(0, 2),
        batch_sizes=(32, 128),
        prefetch_factors=(2, 4),
        persistent_workers=(True, False),
        in_order=(True, False),
        start_methods=("fork",),
    )
    configs = settings.trial_configs()
    assert [c for c in configs if c.num_workers == 0] == [TrialConfig(0, 32), TrialConfig(0, 128)]
    assert len([c for c in configs if c.num_workers == 2]) == 2 * 2 * 2 * 2
    skipped = dict(settings.skipped_configs())
    # Per batch size: 2 prefetch × 2 persistent × 2 in_order = 8 combinations, one of which is the measured one.
    assert len(skipped) == 2 * 7
    assert not set(skipped) & set(configs)
    assert (
        skipped[TrialConfig(0, 32, 4, False, False, None, True)] == "DataLoader rejects prefetch_factor=4 at 0 workers"
    )
    assert skipped[TrialConfig(0, 128, None, False, True, None, False)] == (
        "DataLoader rejects persistent_workers=True at 0 workers; in_order=False does nothing at 0 workers"
    )


@pytest.mark.unit
def test_skipped_labels_read_differently_from_the_measured_zero_worker_trial() -> None:
    other = next(m for m in ("spawn", "forkserver", "fork") if m != default_start_method())
    settings = Settings(workers=(0,), prefetch_factors=(4,), start_methods=(other,))
    (measured,) = settings.trial_configs()
    ((skipped, why),) = settings.skipped_configs()
    assert measured.label() == "w=0 bs=32"
    assert skipped.label() == f"w=0 bs=32 pf=4 {other}"
    assert "prefetch_factor=4" in why and f"multiprocessing_context={other!r}" in why
    assert zero_worker_conflicts(2, False, default_start_method(), True) == ""


@pytest.mark.unit
def test_new_settings_round_trip_and_snippet() -> None:
    settings = Settings(in_order=(True, False), consumer="train.py:step", ranks=4)
    assert Settings.from_dict(json.loads(json.dumps(settings.to_dict()))) == settings
    unordered = TrialConfig(4, 64, 2, False, False, "fork", False)
    assert snippet(unordered, "fork") == "DataLoader(dataset, batch_size=64, num_workers=4, in_order=False)"
    assert snippet(TrialConfig(0, 8), "fork", ("sampler=DistributedSampler(dataset)",)) == (
        "DataLoader(dataset, batch_size=8, sampler=DistributedSampler(dataset))"
    )


# -- what reaches the DataLoader ------------------------------------------------------------------------------------


def _settings(dataset: str, **kw: object) -> Settings:
    return Settings(dataset=dataset, **kw)  # type: ignore[arg-type]


@pytest.mark.unit
def test_knobs_reach_the_dataloader() -> None:
    config = TrialConfig(2, 16, 3, True, True, "spawn", False)
    built = build_loader(_settings("synthetic:length=64,kb=1"), config)
    loader = built.loader
    assert (loader.num_workers, loader.batch_size, loader.prefetch_factor) == (2, 16, 3)
    assert loader.pin_memory and loader.persistent_workers and not loader.in_order
    assert loader.multiprocessing_context.get_start_method() == "spawn"
    assert isinstance(loader.sampler, EpochControl) and isinstance(loader.sampler.base, SequentialSampler)
    assert isinstance(loader.batch_sampler, BatchSampler) and not built.iterable


@pytest.mark.unit
def test_factory_samplers_are_kept_and_ranks_get_a_distributed_sampler() -> None:
    shuffled = _settings(f"{DATA}/collate_ds.py:build", dataset_args=(("length", "40"),))
    built = build_loader(shuffled, TrialConfig(0, 8))
    assert built.loader.drop_last and built.loader.collate_fn.__name__ == "collate"
    assert built.extra_keys == ("collate_fn", "drop_last")
    two = [build_loader(_settings("synthetic:length=10,kb=1"), TrialConfig(0, 2), rank=r, world=2) for r in (0, 1)]
    samplers = [b.loader.sampler.base for b in two]
    assert all(isinstance(s, DistributedSampler) for s in samplers)
    shards = [set(iter(s)) for s in samplers]
    assert not shards[0] & shards[1] and shards[0] | shards[1] == set(range(10))
    iterable = build_loader(_settings(f"{DATA}/iterables.py:sharded"), TrialConfig(0, 4))
    assert iterable.iterable and iterable.control is None


@pytest.mark.unit
def test_epoch_control_ends_an_epoch_early_and_the_next_one_runs_in_full() -> None:
    control = EpochControl(RandomSampler(range(10), generator=torch.Generator().manual_seed(0)))
    first = iter(control)
    taken = [next(first), next(first)]
    control.end()
    assert list(first) == [] and len(taken) == 2
    assert sorted(control) == list(range(10)) and len(control) == 10


@pytest.mark.unit
def test_epoch_boundary_in_process_at_zero_workers() -> None:
    settings = _settings("synthetic:length=100000,kb=1,cpu_ms=0,io_ms=0", trial_seconds=0.3, block_seconds=0.05)
    config = TrialConfig(0, 8)
    built = build_loader(settings, config)
    m = MeasuredLoop(built.loader, config, settings, lambda batch: None, built.control)
    m.start()
    m.first_batch()
    m.warm_up()
    finished = m.blocks(lambda message: None)
    assert finished.blocks >= 1 and finished.epoch_restart_s is None  # no boundary crossed in 100000 samples
    boundary = m.epoch_boundary()
    assert boundary is not None and boundary > 0
    # The next epoch started from the top of the sampler: its first batch was samples 0..7, the next is 8..15.
    assert m.it is not None
    x, _ = next(m.it)
    assert x[:, 0].tolist() == [float(i) for i in range(8, 16)]


# -- for real: start methods with a file.py dataset, and the whole grid through the CLI -------------------------


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_file_dataset_works_under_every_start_method(method: str, runs: Path, no_leftovers: None) -> None:
    # Workers that re-import by name must find collate_ds (and its collate_fn) through the file's folder.
    settings = Settings(
        dataset=f"{DATA}/collate_ds.py:build", dataset_args=(("cpu_ms", "0.5"),), workers=(1,),
        start_methods=(method,), in_order=(False,), **FAST,
    )  # fmt: skip
    result = Sweep(settings, out_dir=runs).run()
    (trial,) = result.trials
    assert trial.status == "ok", trial.error
    assert trial.config.start_method == method and not trial.config.in_order
    assert result.recommendation is not None and "in_order=False" in result.recommendation.snippet


def test_grid_over_batch_prefetch_persistent_through_the_cli(tmp_path: Path) -> None:
    json_path, csv_path = tmp_path / "out.json", tmp_path / "out.csv"
    cmd = [
        sys.executable, "-m", "loadertop", "--headless", "--search", "grid", "--out", str(tmp_path / "runs"),
        "--dataset", "synthetic:cpu_ms=0.1,io_ms=0.5,kb=8", "--workers", "0,1", "--start-method", "fork",
        "--batch-size", "16,32", "--prefetch-factor", "2,4", "--persistent-workers", "on,off",
        "--trial-seconds", "0.8", "--json", str(json_path), "--csv", str(csv_path),
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "250"})
    assert out.returncode == 0, out.stderr
    result = json.loads(json_path.read_text())
    trials = result["trials"]
    ok = [t for t in trials if t["status"] == "ok"]
    skipped = [t for t in trials if t["status"] == "skipped"]
    assert len(ok) == 2 + 2 * 2 * 2, [t["error"] for t in trials if t["status"] != "ok"]
    assert len(skipped) == 2 * 3 and all("at 0 workers" in t["reason"] for t in skipped)
    keys = {(t["config"]["batch_size"], t["config"]["prefetch_factor"], t["config"]["persistent_workers"]) for t in ok}
    assert {(b, p, s) for b in (16, 32) for p in (2, 4) for s in (True, False)} <= keys
    # Every measured trial timed its epoch boundary (the wait that persistent workers shorten).
    assert all(t["epoch_restart_s"] is not None and t["epoch_restart_s"] > 0 for t in ok)
    assert all("in_order" in t["config"] for t in trials)
    assert "epoch" in out.stdout and "skipped" in out.stdout
    rows = list(csv.DictReader(csv_path.open()))
    assert len(rows) == len(trials) and all(r["epoch_restart_s"] != "" for r in rows if r["status"] == "ok")
