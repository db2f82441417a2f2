"""Sweeps of a StatefulDataLoader: a dataset factory (or `loadertop.sweep(dataset=...)`) hands over a loader, its
own arguments are kept, every trial builds its class with the swept knobs, and the snippet names it."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, RandomSampler, SequentialSampler

pytest.importorskip("torchdata.stateful_dataloader")
from torchdata.stateful_dataloader import StatefulDataLoader

import loadertop
from loadertop.core.datasets.errors import SpecError
from loadertop.core.datasets.loaders import loader_kwargs
from loadertop.core.datasets.spec import check_dataset, check_loaded, load_spec
from loadertop.core.engine.drive.api import dataset_spec
from loadertop.core.engine.verdict.snippet import UserArgs, snippet
from loadertop.core.model.config import TrialConfig
from loadertop.core.model.protocol import Checked, decode, encode

DATA = Path(__file__).parent / "data"
FAST = dict(trial_seconds=1.0, block_seconds=0.15, start_method="fork", search="grid")


class Rows(torch.utils.data.Dataset[torch.Tensor]):
    def __init__(self, length: int = 64) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.full((4,), float(index))


class Stream(IterableDataset[int]):
    def __iter__(self) -> Any:
        return iter(range(10))


def stack(samples: list[torch.Tensor]) -> torch.Tensor:
    return torch.stack(samples)


def seed_workers(worker_id: int) -> None:
    pass


@pytest.mark.unit
def test_a_stateful_loaders_own_arguments_are_kept_and_the_swept_ones_are_not() -> None:
    loader = StatefulDataLoader(Rows(), batch_size=8, shuffle=True, drop_last=True, collate_fn=stack, num_workers=2,
                                prefetch_factor=4, persistent_workers=True, snapshot_every_n_steps=5)  # fmt: skip
    assert loader_kwargs(loader) == {
        "shuffle": True,
        "drop_last": True,
        "collate_fn": stack,
        "snapshot_every_n_steps": 5,
    }
    loaded = check_loaded(loader, "dataset factory f.py:make")
    assert loaded.dataset is loader.dataset and loaded.loader_cls is StatefulDataLoader
    assert loaded.loader_name == "StatefulDataLoader"
    assert loader_kwargs(StatefulDataLoader(Rows(), batch_size=2)) == {}  # all defaults: nothing kept


@pytest.mark.unit
def test_a_plain_loaders_sampler_generator_and_functions_are_kept() -> None:
    gen = torch.Generator()
    sampler = RandomSampler(Rows(), num_samples=10)  # theirs, not the one shuffle=True builds
    loader = DataLoader(Rows(), batch_size=4, sampler=sampler, generator=gen, worker_init_fn=seed_workers, timeout=3)
    assert loader_kwargs(loader) == {"sampler": sampler, "worker_init_fn": seed_workers, "generator": gen, "timeout": 3}
    assert check_loaded(loader, "x").loader_name == "DataLoader"
    batches = [[0, 1], [2, 3]]
    assert loader_kwargs(DataLoader(Rows(), batch_sampler=batches)) == {"batch_sampler": batches}
    assert loader_kwargs(DataLoader(Rows(), batch_size=2, sampler=SequentialSampler(Rows()))) == {}
    # An IterableDataset's sampler is the loader's own placeholder; drop_last still counts.
    assert loader_kwargs(DataLoader(Stream(), batch_size=2, drop_last=True)) == {"drop_last": True}
    assert check_dataset(loader, "f.py:make") == (loader.dataset, loader_kwargs(loader))


@pytest.mark.unit
def test_an_unusable_loader_is_one_line() -> None:
    with pytest.raises(SpecError, match=r"^dataset factory f.py:make returned an empty dataset \(len 0\)$"):
        check_loaded(StatefulDataLoader(Rows(0), batch_size=2), "dataset factory f.py:make")


@pytest.mark.unit
def test_the_api_hands_a_loader_over_pickled(tmp_path: Path) -> None:
    loader = StatefulDataLoader(Rows(), batch_size=2, shuffle=True, collate_fn=stack)
    next(iter(loader))  # iterated: it keeps its iterator, which is not handed over (nor taken from it)
    spec, temporary = dataset_spec(loader)
    assert spec is not None and spec.startswith("pickle:") and temporary is not None
    try:
        with open(temporary, "rb") as handle:
            assert getattr(pickle.load(handle), "_iterator", None) is None
        loaded = load_spec(spec.partition("@")[0])  # not the "@MAIN" part: pytest's __main__ stays
        assert loaded.loader_cls is StatefulDataLoader and loaded.extra == {"shuffle": True, "collate_fn": stack}
        assert isinstance(loaded.dataset, Rows)
    finally:
        temporary.unlink()
    assert loader._iterator is not None


@pytest.mark.unit
def test_the_check_names_the_loader_and_the_snippet_builds_it() -> None:
    answer = Checked(
        True, dataset="Rows", extra=("shuffle",), extra_args=("shuffle=True",), loader="StatefulDataLoader"
    )
    assert decode(encode(answer)) == answer
    assert decode(encode(Checked(True))).loader == "DataLoader"
    user = UserArgs((("shuffle", "True"), ("snapshot_every_n_steps", "5")), loader="StatefulDataLoader")
    text = snippet(TrialConfig(2, 32, prefetch_factor=2), "fork", user=user)
    assert text == "StatefulDataLoader(dataset, batch_size=32, shuffle=True, snapshot_every_n_steps=5, num_workers=2)"


def test_a_factory_returning_a_stateful_loader_is_swept_as_one(runs: Path, tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    calls.mkdir()
    spec = f"{DATA / 'stateful_factory.py'}:make"
    result = loadertop.sweep(spec, dataset_args={"record": str(calls)}, workers=[0, 1], out_dir=runs, **FAST)
    data = result.to_dict()
    assert [t["config"]["num_workers"] for t in data["trials"]] == [0, 1]
    assert all(t["status"] == "ok" for t in data["trials"]), data["trials"]
    seen = [p.read_text().split() for p in calls.iterdir()]
    assert seen and all(stateful == "True" for stateful, _ in seen), seen  # every call came from a StatefulDataLoader
    assert "worker" in {where for _, where in seen}  # the 1-worker trial's worker too
    assert data["loader"] == "StatefulDataLoader"
    assert result.run_dir is not None
    assert json.loads((Path(result.run_dir) / "result.json").read_text())["loader"] == "StatefulDataLoader"
    pasted = data["recommendation"]["snippet"]
    assert pasted.startswith("StatefulDataLoader(dataset, batch_size=")
    assert "shuffle=True" in pasted and "collate_fn=collate_rows" in pasted


def test_the_api_sweeps_a_stateful_loader_instance(runs: Path) -> None:
    loader = StatefulDataLoader(Rows(2000), batch_size=4, shuffle=True, collate_fn=stack)
    result = loadertop.sweep(loader, workers=[0], out_dir=runs, **FAST)
    assert result.loader == "StatefulDataLoader"
    assert result.recommendation is not None
    assert result.recommendation.snippet.startswith("StatefulDataLoader(dataset, batch_size=")
    assert "shuffle=True, collate_fn=stack" in result.recommendation.snippet


@pytest.mark.unit
def test_thread_workers_are_refused_for_a_stateful_loader() -> None:
    from loadertop.core.engine.drive.settings import build_settings
    from loadertop.core.trial.check import check_threads

    settings = build_settings({"worker_method": "thread", "workers": [0, 2]})
    check_threads(settings, {}, False)  # a Dataset's: the thread chain
    with pytest.raises(SpecError, match="not the factory's StatefulDataLoader"):
        check_threads(settings, {}, False, "StatefulDataLoader")
