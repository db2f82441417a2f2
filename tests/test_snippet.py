"""The DataLoader(...) snippet keeps what the user set and changes only what was measured: from a
live loader (tune, attach's TuneChose), and from a dataset factory's keyword arguments (the sweep)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, WeightedRandomSampler

from loadertop.core.datasets.spec import check_dataset
from loadertop.core.engine.verdict.outcome import DatasetFacts, conclude
from loadertop.core.engine.verdict.snippet import UserArgs, snippet
from loadertop.core.job.resume import current_config, user_args
from loadertop.core.job.tune_plan import Tuner, tune_settings
from loadertop.core.model.arg_text import loader_arg_texts
from loadertop.core.model.config import Settings, TrialConfig
from tests.test_analysis import machine, trial

pytestmark = pytest.mark.unit

DATA = list(range(100))


def pad(batch: list[int]) -> list[int]:
    return batch


def seed_worker(worker_id: int) -> None:
    pass


def tuned_line(loader: DataLoader, config: TrialConfig) -> str:
    """The snippet tune writes for `config` over `loader` (its Tuner's own builder)."""
    user = current_config(loader)
    tuner = Tuner(tune_settings(user, machine(), 8, 0.05, cuda=False), machine(), user_args(loader))
    return tuner._line(config)


def test_tune_keeps_shuffle_and_changes_only_num_workers() -> None:
    loader = DataLoader(DATA, batch_size=32, shuffle=True, num_workers=1)  # the loader
    assert tuned_line(loader, TrialConfig(4, 32, 2, False, False, "fork")) == (
        "DataLoader(dataset, batch_size=32, shuffle=True, num_workers=4)"
    )


def test_tune_keeps_every_argument_the_user_set() -> None:
    g = torch.Generator()
    loader = DataLoader(
        DATA,
        batch_size=8,
        shuffle=True,
        drop_last=True,
        collate_fn=pad,
        num_workers=2,
        prefetch_factor=3,
        persistent_workers=True,
        worker_init_fn=seed_worker,
        generator=g,
        timeout=30,
    )
    line = tuned_line(loader, TrialConfig(6, 8, 2, False, False, "fork"))
    assert line == (
        "DataLoader(dataset, batch_size=8, shuffle=True, drop_last=True, collate_fn=pad, worker_init_fn=seed_worker, "
        "generator=Generator(...), timeout=30, num_workers=6, persistent_workers=True)"
    )  # prefetch_factor=3 was tuned back to the default 2: left out; persistent_workers is theirs, kept
    # At 0 workers the DataLoader rejects timeout and persistent_workers: both go, the rest stays.
    zero = tuned_line(loader, TrialConfig(0, 8))
    assert zero == (
        "DataLoader(dataset, batch_size=8, shuffle=True, drop_last=True, collate_fn=pad, worker_init_fn=seed_worker, "
        "generator=Generator(...))"
    )


def test_own_sampler_and_batch_sampler_are_kept() -> None:
    weights = WeightedRandomSampler([1.0] * len(DATA), num_samples=50)
    line = tuned_line(DataLoader(DATA, batch_size=4, sampler=weights), TrialConfig(2, 4, 4, False, False, "fork"))
    assert line == (
        "DataLoader(dataset, batch_size=4, sampler=WeightedRandomSampler(...), num_workers=2, prefetch_factor=4)"
    )
    batches = BatchSampler(SequentialSampler(DATA), batch_size=5, drop_last=False)
    line = tuned_line(DataLoader(DATA, batch_sampler=batches), TrialConfig(2, 5, 2, False, False, "fork"))
    assert line == "DataLoader(dataset, batch_sampler=BatchSampler(...), num_workers=2)"


def test_an_unchanged_knob_keeps_the_users_text() -> None:
    loader = DataLoader(DATA, batch_size=4, num_workers=2, multiprocessing_context="spawn", in_order=False)
    line = tuned_line(loader, TrialConfig(3, 4, 2, False, False, "spawn"))
    assert line == 'DataLoader(dataset, batch_size=4, multiprocessing_context="spawn", in_order=False, num_workers=3)'


def factory() -> dict:
    return {"dataset": DATA, "shuffle": True, "drop_last": True, "collate_fn": pad}


def test_the_sweeps_snippet_keeps_a_factorys_arguments() -> None:
    _, extra = check_dataset(factory(), "tests.test_snippet:factory")
    args = tuple(f"{n}={t}" for n, t in loader_arg_texts(extra))  # as the runner's check sends them
    assert args == ("shuffle=True", "drop_last=True", "collate_fn=pad")
    trials = [trial(0, 0, 100.0), trial(1, 1, 150.0), trial(2, 2, 300.0), trial(3, 4, 305.0)]
    settings = Settings(start_methods=("fork",), tolerance=0.05)
    rec = conclude(trials, settings, machine(), dataset=DatasetFacts(loader_args=args)).result.recommendation
    assert rec is not None
    assert rec.snippet == (
        "DataLoader(dataset, batch_size=32, shuffle=True, drop_last=True, collate_fn=pad, num_workers=2)"
    )
    ranks = dataclasses.replace(settings, ranks=2)
    rec = conclude(trials, ranks, machine(), dataset=DatasetFacts(loader_args=args)).result.recommendation
    assert rec is not None  # our DistributedSampler shuffles: the factory's shuffle would be rejected beside it
    assert rec.snippet == (
        "DataLoader(dataset, batch_size=32, sampler=DistributedSampler(dataset), drop_last=True, collate_fn=pad, "
        "num_workers=2)"
    )


def test_the_builder_without_user_arguments_is_the_old_line() -> None:
    config = TrialConfig(4, 64, 4, True, True, "spawn")
    assert snippet(config, "fork", user=UserArgs()) == snippet(config, "fork")
    assert snippet(config, "fork") == (
        "DataLoader(dataset, batch_size=64, num_workers=4, prefetch_factor=4, pin_memory=True, "
        'persistent_workers=True, multiprocessing_context="spawn")'
    )
