"""The Python API: `loadertop.sweep(...)` with a spec, a factory function and a Dataset instance."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import torch
from torch.utils.data import Dataset

import loadertop
from loadertop.core.model.config import UsageError
from loadertop.core.model.results import SweepResult

FAST = dict(trial_seconds=1.5, block_seconds=0.15)


class Squares(Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.full((64,), float(index * index))


def make_squares() -> Squares:
    return Squares()


def test_sweep_with_a_spec_returns_the_json_result(runs: Path) -> None:
    result = loadertop.sweep("synthetic:cpu_ms=0.2,io_ms=2,kb=8", workers=[0, 1], out_dir=runs, **FAST)
    assert isinstance(result, SweepResult)
    data = result.to_dict()
    assert [t["config"]["num_workers"] for t in data["trials"]] == [0, 1]
    assert SweepResult.from_dict(data) == result  # the JSON export round-trips


class Unpicklable(Squares):
    def __init__(self, failure: type[BaseException]) -> None:
        self.failure = failure

    def __reduce__(self) -> tuple[object, ...]:
        raise self.failure("not today")


@pytest.fixture
def temp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the API writes a Dataset instance's temporary pickle."""
    path = tmp_path / "temp"
    path.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(path))
    return path


@pytest.mark.unit
def test_no_pickle_is_left_behind_when_the_dump_fails(temp_dir: Path, runs: Path) -> None:
    with pytest.raises(UsageError, match="cannot be pickled"):
        loadertop.sweep(Unpicklable(TypeError), workers=[0], out_dir=runs)
    assert list(temp_dir.iterdir()) == []
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C halfway through pickling a large dataset
        loadertop.sweep(Unpicklable(KeyboardInterrupt), workers=[0], out_dir=runs)
    assert list(temp_dir.iterdir()) == []


@pytest.mark.unit
def test_no_pickle_is_left_behind_when_the_settings_are_wrong(temp_dir: Path, runs: Path) -> None:
    with pytest.raises(loadertop.UsageError, match="--tolerance"):  # the name API users catch
        loadertop.sweep(Squares(), workers=[0], tolerance=5, out_dir=runs)
    assert list(temp_dir.iterdir()) == []


def test_sweep_with_a_factory_and_an_instance(runs: Path, temp_dir: Path) -> None:
    seen: list[str] = []
    by_factory = loadertop.sweep(
        make_squares, workers=[1], batch_size=16, out_dir=runs, on_event=lambda e: seen.append(type(e).__name__), **FAST
    )
    assert by_factory.settings.dataset.endswith("test_api:make_squares")
    assert by_factory.trials[0].status == "ok", by_factory.trials[0].error
    assert seen[0] == "SweepStarted" and seen[-1] == "SweepFinished"
    by_instance = loadertop.sweep(Squares(), workers=[0], out_dir=runs, **FAST)
    assert by_instance.trials[0].status == "ok", by_instance.trials[0].error
    assert by_instance.trials[0].samples_per_s and by_instance.trials[0].samples_per_s > 0
    assert by_instance.settings.dataset.startswith(f"pickle:{temp_dir}")  # it went where we look, and is gone
    assert not list(temp_dir.glob("loadertop-dataset-*"))
