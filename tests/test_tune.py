"""loadertop.tune inside a training loop: real DataLoaders with real worker processes, tiny datasets, budgets of a
few seconds. Each sample is (its index, the num_workers of the loader that loaded it), so a test sees which
configuration produced every sample, and that every index comes exactly once per epoch across the switches."""

from __future__ import annotations

import gc
import logging
import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
import torch
from procs import own_children
from torch.utils.data import DataLoader, Dataset, DistributedSampler, IterableDataset, get_worker_info

import loadertop
from loadertop.core.job import tune_viewers
from loadertop.core.job.publisher import enabled, publisher, reset
from loadertop.core.job.resume import start_up_buffer
from loadertop.core.job.tune_measure import Meter
from loadertop.core.job.tune_plan import Tuner
from loadertop.core.job.watch import StepRecorder
from loadertop.core.model.config import TrialConfig
from loadertop.core.model.jobs import TUNE_FILE
from loadertop.core.model.live_protocol import TuneChose, TuneStep, decode

BUDGET_S = 2.5
STEP_S = 0.002


@pytest.fixture(autouse=True, scope="module")
def _short_jobs_dir() -> Iterator[None]:
    # Short: a Unix socket path has at most 107 bytes. One for the module: the job's publisher is the process's.
    # The publisher is the process's: one an earlier module started lives in that module's (removed) folder.
    folder = tempfile.mkdtemp(prefix="lt", dir="/tmp")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOADERTOP_JOBS_DIR", folder)
        reset()
        yield
        reset()
    shutil.rmtree(folder, ignore_errors=True)


class Indexed(Dataset[tuple[int, int]]):
    """Sample i is (i, the loading loader's num_workers); a millisecond of I/O-like wait each."""

    def __init__(self, n: int, fail_in_worker: bool = False) -> None:
        self.n = n
        self.fail_in_worker = fail_in_worker

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[int, int]:
        info = get_worker_info()
        if self.fail_in_worker and info is not None:
            raise ValueError(f"sample {i} cannot be read in a worker")
        time.sleep(0.001)
        return i, info.num_workers if info is not None else 0


class Stream(IterableDataset[int]):
    def __iter__(self) -> Any:
        return iter(range(20))


def run(tuned: Any, after_settled: int = 2, max_epochs: int = 80) -> list[list[tuple[int, int]]]:
    """Train: each epoch's (index, num_workers) samples, until `after_settled` epochs ran with the choice."""
    epochs: list[list[tuple[int, int]]] = []
    settled_at: int | None = None
    for e in range(max_epochs):
        seen: list[tuple[int, int]] = []
        for idx, nw in tuned:
            seen += zip(idx.tolist(), nw.tolist(), strict=True)
            time.sleep(STEP_S)  # the training step
        epochs.append(seen)
        if settled_at is None and tuned.choice is not None:
            settled_at = e
        if settled_at is not None and e - settled_at >= after_settled:
            break
    assert settled_at is not None, "tuning never settled"
    return epochs


def no_children(collect: bool = False) -> list[psutil.Process]:
    if collect:  # an iterator left in a reference cycle (a caught exception's traceback) keeps its workers
        gc.collect()
    deadline = time.monotonic() + 5.0  # the last workers are being reaped
    while (kids := own_children()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return kids


def assert_switched_and_kept(tuned: Any, epochs: list[list[tuple[int, int]]]) -> None:
    # Tuning switched loaders: the run's samples came from loaders with different worker counts. A switch falls
    # where a measurement ends: inside an epoch, or on its last batch (the next epoch then opens the next loader);
    # the callers check each epoch's indices whole either way.
    assert len({nw for seen in epochs for _, nw in seen}) > 1
    assert len(tuned.trace) >= 2
    assert all(isinstance(step, TuneStep) for step in tuned.trace)
    # After settling: every sample of the last epochs came from the chosen configuration.
    for seen in epochs[-2:]:
        assert {nw for _, nw in seen} == {tuned.choice.num_workers}
    assert tuned.snippet.startswith("DataLoader(dataset, batch_size=")


def test_shuffled_epochs_see_every_index_once_across_switches() -> None:
    g = torch.Generator().manual_seed(7)
    loader = DataLoader(Indexed(601), batch_size=6, shuffle=True, generator=g)  # 6 does not divide 601
    tuned = loadertop.tune(loader, budget_s=BUDGET_S, max_workers=2)
    assert len(tuned) == len(loader) == 101
    epochs = run(tuned)
    for seen in epochs:
        assert sorted(i for i, _ in seen) == list(range(601))
    assert [i for i, _ in epochs[0]] != list(range(601))  # shuffled
    assert_switched_and_kept(tuned, epochs)
    # The snippet is the user's loader with what tune changed: shuffling and their generator stay.
    assert tuned.snippet.startswith("DataLoader(dataset, batch_size=6, shuffle=True, generator=Generator(...)")
    assert no_children() == []


def test_a_loop_that_stops_at_the_length_ends_whole_epochs_while_tuning_and_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Lightning's fetcher (and zip with a range) never asks past len(loader): `run --tune` said of every epoch
    # "ended (the loop left it early)" and counted its last batch dropped. Every batch handed out is a whole epoch,
    # and the step the loop left in counts, as watch() counts them.
    ended: list[tuple[int, bool]] = []
    real = StepRecorder.epoch_ended

    def spy(self: StepRecorder, epoch: int, batches: int, seconds: float, first: float | None, complete: bool) -> None:
        ended.append((batches, complete))
        real(self, epoch, batches, seconds, first, complete)

    steps: list[int] = []
    real_step = StepRecorder.step

    def step_spy(self: StepRecorder, wait_s: float, step_s: float, samples: int) -> None:
        steps.append(samples)
        real_step(self, wait_s, step_s, samples)

    monkeypatch.setattr(StepRecorder, "epoch_ended", spy)
    monkeypatch.setattr(StepRecorder, "step", step_spy)
    loader = DataLoader(Indexed(300), batch_size=6)
    tuned = loadertop.tune(loader, budget_s=BUDGET_S, max_workers=2)
    for _ in range(80):
        settled = tuned.choice is not None
        for _, _batch in zip(range(len(loader)), tuned, strict=False):  # stops at the length
            time.sleep(STEP_S)
        if settled:  # one epoch on the choice, after the tuning ones
            break
    assert tuned.choice is not None and len(ended) >= 2
    assert ended == [(len(loader), True)] * len(ended)
    # every sample, the last step of each epoch too (none reported dropped), and on the chosen loader, whose
    # batch_size is None (the user's batch sampler), its batches counted as 6 samples, not 1
    assert sum(steps) == 300 * len(ended)
    assert no_children() == []


@pytest.mark.parametrize("rank", [0, 1])
def test_distributed_sampler_with_drop_last_sees_its_share_once(rank: int) -> None:
    data = Indexed(403)
    sampler = DistributedSampler(data, num_replicas=2, rank=rank, shuffle=True, seed=3)
    loader = DataLoader(data, batch_size=5, sampler=sampler, drop_last=True)  # 202 per rank: 40 batches, 2 left
    tuned = loadertop.tune(loader, budget_s=BUDGET_S, max_workers=2)
    epochs: list[list[tuple[int, int]]] = []
    settled_at: int | None = None
    for epoch in range(80):
        sampler.set_epoch(epoch)  # the user's set_epoch, before each epoch
        twin = DistributedSampler(data, num_replicas=2, rank=rank, shuffle=True, seed=3)
        twin.set_epoch(epoch)
        expected = list(twin)[: 40 * 5]
        seen = []
        for idx, nw in tuned:
            seen += zip(idx.tolist(), nw.tolist(), strict=True)
            time.sleep(STEP_S)
        assert [i for i, _ in seen] == expected  # the same order too: in_order batches, no skip, no repeat
        epochs.append(seen)
        if settled_at is None and tuned.choice is not None:
            settled_at = epoch
        if settled_at is not None and epoch - settled_at >= 2:
            break
    assert_switched_and_kept(tuned, epochs)
    assert no_children() == []


def test_trace_is_written_to_the_job_folder() -> None:
    if not enabled():
        pytest.skip("LOADERTOP_WATCH=0: publishing is off on purpose")
    pub = publisher()
    assert pub is not None, "the job's publisher did not start (see the loadertop log): a broken publisher"
    loader = DataLoader(Indexed(300), batch_size=4, num_workers=1, timeout=30)  # a timeout: not at 0 workers
    tuned = loadertop.tune(loader, budget_s=1.5, max_workers=1)
    run(tuned, after_settled=0)
    assert tuned.trace[0].config.num_workers == 1 and tuned.choice is not None  # the job's own configuration first
    lines = [decode(line) for line in (pub.folder / TUNE_FILE).read_text().splitlines()]
    chose = [m for m in lines if isinstance(m, TuneChose)]
    assert any(isinstance(m, TuneStep) for m in lines)
    assert chose and chose[-1].config == tuned.choice and chose[-1].snippet == tuned.snippet
    # What attach shows is the user's loader with what tune changed: their timeout stays (with workers: the
    # DataLoader rejects one without).
    assert ("timeout=30" in tuned.snippet) == (tuned.choice.num_workers > 0)


def test_without_a_publisher_it_still_tunes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tune_viewers, "publisher", lambda: None)
    loader = DataLoader(Indexed(300), batch_size=4)
    tuned = loadertop.tune(loader, budget_s=1.5, max_workers=1)
    for n, _ in enumerate(tuned):  # an epoch left early: the next one starts afresh, as with the loader
        if n == 10:
            break
    for seen in run(tuned, after_settled=1):
        assert sorted(i for i, _ in seen) == list(range(300))
    assert tuned.choice is not None and tuned.trace
    assert no_children() == []


@pytest.mark.unit
def test_an_iterable_dataset_is_watched_not_tuned(capsys: pytest.CaptureFixture[str]) -> None:
    loader = DataLoader(Stream(), batch_size=4)
    tuned = loadertop.tune(loader, budget_s=BUDGET_S)
    assert "IterableDataset" in capsys.readouterr().err
    for _ in range(2):
        assert torch.cat(list(tuned)).tolist() == list(range(20))
    assert tuned.choice is None and tuned.trace == []


def test_the_datasets_error_reaches_the_loop_as_the_plain_loader_raises_it() -> None:
    loader = DataLoader(Indexed(600, fail_in_worker=True), batch_size=4, num_workers=2)
    tuned = loadertop.tune(loader, budget_s=BUDGET_S, max_workers=2)
    with pytest.raises(ValueError, match="cannot be read in a worker"):  # the job's own 2 workers first
        for _ in range(10):
            for _ in tuned:
                time.sleep(STEP_S)
    assert no_children() == []  # tune shut its workers down itself
    with pytest.raises(ValueError, match="cannot be read in a worker"):  # what the plain loader raises
        for _ in loader:
            pass
    assert no_children(collect=True) == []


def test_an_internal_failure_steps_aside_without_losing_the_position(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(self: Tuner, *_: Any) -> None:
        raise RuntimeError("planner broke")

    monkeypatch.setattr(Tuner, "feed", broken)
    g = torch.Generator().manual_seed(1)
    loader = DataLoader(Indexed(400), batch_size=4, shuffle=True, generator=g, num_workers=1)
    tuned = loadertop.tune(loader, budget_s=BUDGET_S, max_workers=2)
    with caplog.at_level(logging.WARNING, logger="loadertop"):
        epochs = []
        for _ in range(3):
            epochs.append([i for idx, _ in tuned for i in idx.tolist()])
    for seen in epochs:
        assert Counter(seen) == Counter(range(400))
    warnings = [r for r in caplog.records if "internal error" in r.getMessage()]
    assert len(warnings) == 1 and "planner broke" in warnings[0].getMessage()
    assert tuned.choice is None
    assert no_children() == []


class SlowStart(Indexed):
    """Each process's first sample waits `start_s` (a heavy import inside __getitem__): every fresh worker pays it."""

    def __init__(self, n: int, start_s: float) -> None:
        super().__init__(n)
        self.start_s = start_s
        self.started: set[int] = set()

    def __getitem__(self, i: int) -> tuple[int, int]:
        if os.getpid() not in self.started:
            self.started.add(os.getpid())
            time.sleep(self.start_s)
        return super().__getitem__(i)


def test_a_budget_that_fits_one_configuration_keeps_the_jobs_loader_and_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The job's own 1 worker is measured first; a rival's start-up (1.5 s) cannot fit in what is left of 3 s. Before:
    # 0 workers measured alone, the job switched to it, "only 0 workers measured; try max_workers".
    loader = DataLoader(SlowStart(1200, start_s=1.5), batch_size=8, num_workers=1)  # epochs past the span
    tuned = loadertop.tune(loader, budget_s=3.0)
    epochs = run(tuned, after_settled=1)
    assert tuned.choice is not None and tuned.choice.num_workers == 1, tuned.reason
    assert len(tuned.trace) == 1 and tuned.trace[0].config.num_workers == 1
    assert tuned.reason == (
        "kept w=1 bs=8 pf=2 fork, the job's own: only 1 configuration fit the 3 s budget, nothing to compare it "
        "with; a larger budget_s measures the others"
    )
    assert all({nw for _, nw in seen} == {1} for seen in epochs)  # never switched
    said = capsys.readouterr().err
    assert f"loadertop.tune: {tuned.reason} (1 configuration measured in " in said
    assert "DataLoader(dataset, batch_size=8, num_workers=1)" in said
    assert no_children() == []


@pytest.mark.parametrize("seeded", [False, True], ids=["torch-rng", "own-generator"])
def test_the_first_epoch_keeps_the_order_the_untuned_loader_gives(seeded: bool) -> None:
    # Tune drew the epoch's batches before the seed a loader's iterator draws first: epoch 0 was shuffled otherwise
    def shuffled() -> DataLoader[tuple[int, int]]:
        torch.manual_seed(11)
        g = torch.Generator().manual_seed(5) if seeded else None
        return DataLoader(Indexed(240), batch_size=8, shuffle=True, generator=g, num_workers=1)

    untuned = [i for idx, _ in shuffled() for i in idx.tolist()]
    tuned = loadertop.tune(shuffled(), budget_s=BUDGET_S, max_workers=2)
    assert [i for idx, _ in tuned for i in idx.tolist()] == untuned
    assert no_children() == []


@pytest.mark.unit
def test_a_measurement_skips_the_start_up_buffer_and_a_cut_one_does_not_count() -> None:
    config = TrialConfig(2, 4, 2)
    meter = Meter(config, skip=start_up_buffer(config))  # 2 × 2 + 2 batches ready before the step asks
    for _ in range(6):
        meter.add(0.0, 0.01, 4)  # start-up: no wait, would inflate throughput
    for _ in range(5):
        meter.add(0.02, 0.01, 4)
    cut = meter.result(0, 0.05, span_s=1.0)
    assert cut.status == "failed" and "cut by the budget" in (cut.error or "")
    for _ in range(15):
        meter.add(0.02, 0.01, 4)
    ok = meter.result(1, 0.05, span_s=1.0)  # 20 batches, 0.6 s: more than half the span
    assert ok.status == "ok" and ok.warmup_batches == 6
    assert ok.samples_per_s == pytest.approx(4 / 0.03) and ok.stall_fraction == pytest.approx(2 / 3)
