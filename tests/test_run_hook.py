"""`loadertop run`'s hook in the job's process: DataLoader.__iter__ wrapped into watch()'s own epoch, once per
iteration (a loader the job also passes to watch() is not recorded twice), plain iteration when watching is off."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.utils.data.dataloader as dataloader_module
from torch.utils.data import DataLoader, TensorDataset

import loadertop
from loadertop.core.job import publisher as publisher_module
from loadertop.core.job import run_hook
from loadertop.core.job.watch import state_of
from loadertop.core.model.live_protocol import JobSteps

pytestmark = pytest.mark.unit


@pytest.fixture
def hooked(jobs_root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(DataLoader, "__iter__", DataLoader.__iter__)  # put back as it was after the test
    publisher_module.reset()
    run_hook.patch(dataloader_module)
    yield
    publisher_module.reset()


def batches_recorded(loader: DataLoader[object]) -> int:
    recorder = state_of(loader).recorder
    assert recorder is not None
    return sum(m.batches for m in recorder.drain(1e9) if isinstance(m, JobSteps))


def test_iterating_a_dataloader_is_watched_once(hooked: None, jobs_root: Path) -> None:
    assert getattr(DataLoader.__iter__, "__wrapped__", None) is not None
    run_hook.patch(dataloader_module)  # idempotent: not wrapped twice
    assert getattr(DataLoader.__iter__.__wrapped__, "__wrapped__", None) is None  # type: ignore[attr-defined]
    loader = DataLoader(TensorDataset(torch.arange(32.0)), batch_size=8)
    assert [len(x) for (x,) in loader] == [8, 8, 8, 8]  # the same batches
    assert [p.name for p in jobs_root.iterdir()] != []  # the job publishes
    for _ in loadertop.watch(loader):  # watch() over a hooked loader records its epoch once
        pass
    assert state_of(loader).epoch == 2
    assert batches_recorded(loader) == 8


def test_watching_off_is_plain_iteration(hooked: None, jobs_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOADERTOP_WATCH", "0")
    loader = DataLoader(TensorDataset(torch.arange(16.0)), batch_size=8)
    assert [len(x) for (x,) in loader] == [8, 8]
    assert state_of(loader).recorder is None and list(jobs_root.iterdir()) == []
