"""loadertop.tune with torchdata's StatefulDataLoader: the switch loaders are StatefulDataLoaders, and a state_dict
taken mid-epoch after a switch resumes a fresh loader of the user's own arguments exactly where the tuned one
stopped; the snippet names the class; snapshot_every_n_steps measured on request; without torchdata, nothing
changes for a plain DataLoader. Real loaders with 2 workers and the tiny `Indexed` dataset of test_tune.py."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

import loadertop
from loadertop.core.job import resume
from loadertop.core.job import stateful as stateful_module
from loadertop.core.job import tune as tune_module
from loadertop.core.job.stateful import is_stateful
from loadertop.core.model.config import TrialConfig
from tests.test_tune import BUDGET_S, STEP_S, Indexed, _short_jobs_dir, no_children  # noqa: F401

StatefulDataLoader = pytest.importorskip("torchdata.stateful_dataloader").StatefulDataLoader

N, BS = 1801, 6  # 301 batches: tuning switches inside the first epoch


def user_loader(shuffle: bool, **extra: Any) -> Any:
    """The user's loader, as they build it: the same arguments each call (a fresh generator of the same seed)."""
    g = torch.Generator().manual_seed(7) if shuffle else None
    return StatefulDataLoader(Indexed(N), batch_size=BS, shuffle=shuffle, generator=g, num_workers=2, **extra)


def indices(loader: Any) -> list[int]:
    return [i for idx, _ in loader for i in idx.tolist()]


def tuned_until_switch(tuned: Any) -> tuple[int, dict[str, Any], list[int], list[int]]:
    """Iterate the first epoch; a few steps after the first switch take state_dict(). Returns (the step taken at,
    the state, indices up to it, the indices of the rest of the epoch)."""
    before: list[int] = []
    after: list[int] = []
    state: dict[str, Any] | None = None
    at, first_nw, switched_for = 0, None, 0
    for idx, nw in tuned:
        (after if state is not None else before).extend(idx.tolist())
        time.sleep(STEP_S)
        if state is not None:
            continue
        first_nw = int(nw[0]) if first_nw is None else first_nw
        switched_for += int(nw[0]) != first_nw
        at += 1
        if switched_for == 3:  # three batches into the second configuration
            state = tuned.state_dict()
    assert state is not None, "no switch inside the first epoch"
    return at, state, before, after


@pytest.mark.parametrize("shuffle", [True, False])
def test_state_dict_after_a_switch_resumes_a_fresh_user_loader_exactly(shuffle: bool) -> None:
    reference = user_loader(shuffle)
    uninterrupted, second = indices(reference), indices(reference)  # the user's loader, untuned: two epochs
    tuned = loadertop.tune(user_loader(shuffle), budget_s=BUDGET_S, max_workers=2)
    at, state, before, after = tuned_until_switch(tuned)
    assert before == uninterrupted[: at * BS]  # the tuned epoch is the user's loader's, in its order
    assert after == uninterrupted[at * BS :]
    assert [i for idx, _ in tuned for i in idx.tolist()] == second  # the switches did not shift the generator
    fresh = user_loader(shuffle)  # the user's own, untuned arguments
    fresh.load_state_dict(state)
    resumed = indices(fresh)
    assert resumed == uninterrupted[at * BS :]
    # The Tuned object takes the state back as well: its next epoch is the user's loader, resumed.
    again = loadertop.tune(user_loader(shuffle), budget_s=BUDGET_S, max_workers=2)
    again.load_state_dict(state)
    assert indices(again) == uninterrupted[at * BS :]
    assert no_children() == []


def test_a_stateful_loader_is_tuned_with_stateful_loaders_and_its_snippet_names_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kinds: set[str] = set()
    real = resume.loader_from

    def spy(*args: Any, **kwargs: Any) -> Any:
        built = real(*args, **kwargs)
        kinds.add(type(built).__name__)
        return built

    monkeypatch.setattr(tune_module, "loader_from", spy)
    monkeypatch.setattr(tune_module, "_SNAPSHOT_BATCHES", 40)  # the test's time: 4 loaders, 2 rounds
    monkeypatch.setattr(stateful_module, "_ROUNDS", 2)
    tuned = loadertop.tune(user_loader(True), budget_s=BUDGET_S, max_workers=2, snapshot_every=(1, 10, 100))
    for _ in range(10):
        for _batch in tuned:
            time.sleep(STEP_S)
        if tuned.choice is not None:
            break
    assert tuned.choice is not None
    assert kinds == {"StatefulDataLoader"}
    assert tuned.snippet.startswith("StatefulDataLoader(dataset, batch_size=6, shuffle=True, generator=Generator(")
    # snapshot_every_n_steps, measured at the choice: three figures, in the reason.
    assert [v for v, _, _ in tuned.snapshot_costs] == [1, 10, 100]
    assert all(ms >= 0.0 and pct >= 0.0 for _, ms, pct in tuned.snapshot_costs)
    assert "snapshot_every_n_steps at" in tuned.reason
    # Settled: a state taken mid-epoch resumes the user's loader where the chosen configuration's stopped.
    seen: list[int] = []
    for idx, _ in tuned:
        seen += idx.tolist()
        if len(seen) == 50 * BS:
            state = tuned.state_dict()
    fresh = user_loader(True)
    fresh.load_state_dict(state)
    assert indices(fresh) == seen[50 * BS :]
    assert no_children() == []


@pytest.mark.unit
def test_a_user_snapshot_interval_stays_in_the_snippet_args_and_switch_loaders() -> None:
    loader = StatefulDataLoader(Indexed(10), batch_size=2, snapshot_every_n_steps=10)
    args = resume.user_args(loader)
    assert args.loader == "StatefulDataLoader"
    assert ("snapshot_every_n_steps", "10") in args.args
    built = resume.loader_from(loader, [[0, 1]], TrialConfig(num_workers=0, batch_size=2))
    assert type(built) is StatefulDataLoader and built.snapshot_every_n_steps == 10
    assert (
        resume.loader_from(loader, [[0, 1]], TrialConfig(num_workers=0, batch_size=2), every=0).snapshot_every_n_steps
        == 0
    )


@pytest.mark.unit
def test_without_torchdata_a_plain_loader_is_unaffected(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "torchdata" or m.startswith("torchdata.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "torchdata", None)  # `import torchdata` now fails
    loader = DataLoader(Indexed(10), batch_size=2, shuffle=True)
    assert not is_stateful(loader)
    args = resume.user_args(loader)
    assert args.loader == "DataLoader"
    built = resume.loader_from(loader, [[0, 1]], TrialConfig(num_workers=0, batch_size=2))
    assert type(built) is DataLoader
    tuned = loadertop.tune(loader, budget_s=0)
    assert [idx.tolist() for idx, _ in tuned] != []
    with pytest.raises(TypeError):
        tuned.state_dict()


def test_loadertop_never_imports_torchdata_by_itself() -> None:
    code = "import sys, loadertop, loadertop.core.job.tune; assert 'torchdata' not in sys.modules, 'imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.unit
@pytest.mark.parametrize("kind", ["DataLoader", "StatefulDataLoader"])
def test_a_sweep_given_a_loader_object_says_what_to_pass(kind: str) -> None:
    from loadertop.core.engine.drive.api import dataset_spec
    from loadertop.core.model.config import UsageError

    cls = StatefulDataLoader if kind == "StatefulDataLoader" else DataLoader
    with pytest.raises(UsageError, match=f"dataset= is a {kind}: pass its dataset"):
        dataset_spec(cls(Indexed(10), batch_size=2))


@pytest.mark.unit
def test_a_watched_stateful_loader_keeps_its_own_state() -> None:
    # An IterableDataset is only watched: the user's loader iterates, and its own state_dict is the answer.
    from tests.test_tune import Stream

    tuned = loadertop.tune(StatefulDataLoader(Stream(), batch_size=2, num_workers=0), budget_s=BUDGET_S)
    seen = []
    for batch in tuned:
        seen += batch.tolist()
        if len(seen) == 6:
            state = tuned.state_dict()
    fresh = StatefulDataLoader(Stream(), batch_size=2, num_workers=0)
    fresh.load_state_dict(state)
    assert [i for batch in fresh for i in batch.tolist()] == seen[6:]


def test_persistent_workers_epochs_keep_the_user_loaders_order() -> None:
    # Persistent workers reset their iterator each epoch (no new seed drawn): tune's epochs draw as theirs do.
    reference = user_loader(True, persistent_workers=True)
    epochs = [indices(reference) for _ in range(3)]
    tuned = loadertop.tune(user_loader(True, persistent_workers=True), budget_s=0.5, max_workers=2)
    for expected in epochs:
        assert [i for idx, _ in tuned for i in idx.tolist()] == expected
    del reference
    assert no_children(collect=True) == []
