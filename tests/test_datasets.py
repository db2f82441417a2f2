"""The user's own data: file and package factories with their DataLoader arguments, imagefolder, IterableDataset
sharding, and the user's own training step, each measured for real through the engine."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import pytest
import torch

from loadertop.core.datasets.errors import SpecError
from loadertop.core.datasets.imagefolder import ImageFolderDataset, make_image_folder, scan
from loadertop.core.datasets.spec import load_dataset
from loadertop.core.datasets.synthetic import SyntheticDataset, SyntheticOptions, SyntheticSpec
from loadertop.core.engine.drive.driver import Sweep
from loadertop.core.model.config import Settings
from loadertop.core.model.events import Notice, TrialFinished
from loadertop.core.trial.sharding import ShardCheck, sample_fingerprints

DATA = Path(__file__).parent / "data"
FAST = dict(trial_seconds=1.0, block_seconds=0.1, interval=0.2, search="grid", start_methods=("fork",))


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_image_folder(tmp_path_factory.mktemp("imgs") / "train", count=36, classes=3, min_side=64, max_side=96)


# -- synthetic -----------------------------------------------------------------------------------------------------


@pytest.mark.unit
def test_synthetic_keywords_are_the_spec_fields_with_their_types() -> None:
    spec = {f.name: f.type for f in dataclasses.fields(SyntheticSpec)}
    assert {k: t.__name__ for k, t in typing.get_type_hints(SyntheticOptions).items()} == spec
    ds = SyntheticDataset(length=5, cpu_ms=0.0, io_ms=0.0, kb=1)
    assert len(ds) == 5 and ds.spec == SyntheticSpec(length=5, cpu_ms=0.0, io_ms=0.0, kb=1)


# -- imagefolder ---------------------------------------------------------------------------------------------------


@pytest.mark.unit
def test_image_folder_labels_by_folder_and_crops(images: Path) -> None:
    classes, samples = scan(images)
    assert classes == ["class_000", "class_001", "class_002"] and len(samples) == 36
    ds = ImageFolderDataset(images, size=48, resize=56)
    assert [label for _, label in samples] == sorted(label for _, label in samples)  # class by class, stable
    x, label = ds[12]
    assert x.shape == (3, 48, 48) and x.dtype == torch.uint8 and label == 1  # class_000 holds the first 12
    assert "/class_001/" in samples[12][0]
    x, _ = ImageFolderDataset(images, size=32, resize=40, dtype="float")[0]
    assert x.dtype == torch.float32 and -3 < float(x.mean()) < 3  # normalised, not 0..255


@pytest.mark.unit
def test_image_folder_options_and_errors(images: Path, tmp_path: Path) -> None:
    ds, _ = load_dataset(f"imagefolder:{images}", {"size": "40"})
    assert ds.size == 40 and ds.resize == 46  # 40 × 256/224
    ds, _ = load_dataset(f"imagefolder:{images}:size=24,dtype=float")
    assert (ds.size, ds.dtype) == (24, "float")
    (tmp_path / "empty" / "cats").mkdir(parents=True)
    for spec, args, needle in [
        (f"imagefolder:{tmp_path / 'empty'}", {}, "no images found"),
        (f"imagefolder:{images}", {"size": "big"}, "not a whole number"),
        (f"imagefolder:{images}", {"colour": "1"}, "'colour' is not one of"),
        (f"imagefolder:{images}:size=64,resize=32", {}, "smaller than the crop"),
        (f"imagefolder:{images}", {"dtype": "half"}, "expected uint8 or float"),
    ]:
        with pytest.raises(SpecError, match=needle):
            load_dataset(spec, args)


def test_imagefolder_sweep_decodes_real_jpegs(images: Path, runs: Path, no_leftovers: None) -> None:
    settings = Settings(dataset=f"imagefolder:{images}:size=32", workers=(0, 1), batch_sizes=(8,), **FAST)
    result = Sweep(settings, out_dir=runs).run()
    assert [t.status for t in result.trials] == ["ok", "ok"], [t.error for t in result.trials]
    assert all(t.samples_per_s and t.samples_per_s > 0 for t in result.trials)


# -- factories with DataLoader arguments, from a file and from a package ----------------------------------------


def test_file_factory_collate_fn_is_used_by_the_trial(runs: Path, no_leftovers: None) -> None:
    # keep_half makes batches of half the samples: only a trial that used the factory's collate_fn sees that.
    settings = Settings(dataset=f"{DATA}/collate_ds.py:build_halving", workers=(0, 1), batch_sizes=(16,), **FAST)
    sweep = Sweep(settings, out_dir=runs)
    events = list(sweep.events())
    trials = [e.result for e in events if isinstance(e, TrialFinished)]
    assert [t.status for t in trials] == ["ok", "ok"], [t.error for t in trials]
    for t in trials:
        assert t.samples_per_s == pytest.approx(t.batches_per_s * 8)
    notices = [e.message for e in events if isinstance(e, Notice)]
    assert any("the factory sets collate_fn" in n for n in notices), notices


def test_package_module_factory(runs: Path, monkeypatch: pytest.MonkeyPatch, no_leftovers: None) -> None:
    monkeypatch.syspath_prepend(str(DATA))  # the runner imports what the caller can
    settings = Settings(dataset="pkgds.tabular:make", dataset_args=(("width", "64"),), workers=(0, 1), **FAST)
    result = Sweep(settings, out_dir=runs).run()
    assert [t.status for t in result.trials] == ["ok", "ok"], [t.error for t in result.trials]
    assert result.recommendation is not None


# -- IterableDataset sharding ---------------------------------------------------------------------------------------


def _stream(n_workers: int, shard: bool, batches: int, size: int = 4) -> list[torch.Tensor]:
    """Batches as a DataLoader over n workers delivers them (round robin), each worker reading its share or all."""
    per_worker = []
    for w in range(n_workers):
        items = list(range(w, 10_000, n_workers)) if shard else list(range(10_000))
        per_worker.append(iter(items))
    out = []
    for b in range(batches):
        source = per_worker[b % n_workers]
        out.append(torch.stack([torch.full((3,), float(next(source))) for _ in range(size)]))
    return out


@pytest.mark.unit
@pytest.mark.parametrize(("shard", "flagged"), [(False, True), (True, False)])
def test_shard_check_by_sample_identity(shard: bool, flagged: bool) -> None:
    check = ShardCheck(num_workers=3)
    for batch in _stream(3, shard, batches=9):
        check.add(batch)
    verdict = check.verdict()
    assert (verdict is not None) == flagged
    if flagged:
        assert "3 workers yield the same samples" in verdict and "get_worker_info" in verdict


@pytest.mark.unit
def test_shard_check_says_nothing_for_constant_data_or_one_worker() -> None:
    constant = ShardCheck(num_workers=2)
    for _ in range(6):
        constant.add(torch.zeros(4, 3))
    assert constant.verdict() is None
    one = ShardCheck(num_workers=1)
    for batch in _stream(1, False, batches=6):
        one.add(batch)
    assert one.verdict() is None


@pytest.mark.unit
def test_fingerprints_cover_every_part_of_a_sample() -> None:
    batch = {"x": torch.zeros(3, 2), "label": torch.tensor([1, 1, 2]), "ids": ["a", "b", "c"]}
    prints = sample_fingerprints(batch)
    assert len(prints) == 3 and len(set(prints)) == 3  # same x, told apart by label and id


def test_unsharded_iterable_is_reported_and_sharded_is_not(runs: Path, no_leftovers: None) -> None:
    for factory, expect in (("unsharded", True), ("sharded", False)):
        settings = Settings(dataset=f"{DATA}/iterables.py:{factory}", workers=(2,), batch_sizes=(8,), **FAST)
        sweep = Sweep(settings, out_dir=runs)
        events = list(sweep.events())
        assert sweep.result is not None
        (trial,) = sweep.result.trials  # reasons are final at the end of the sweep
        assert trial.status == "ok", trial.error
        warned = [e for e in events if isinstance(e, Notice) and "not sharded" in e.message]
        assert bool(trial.warnings) == expect and bool(warned) == expect, (factory, trial.warnings)
        if expect:
            assert "not sharded" in trial.reason and warned[0].index == trial.index
            assert sweep.result.recommendation is not None
            assert "not sharded" in sweep.result.recommendation.reason


# -- the user's training step ----------------------------------------------------------------------------------------


def test_consumer_runs_as_the_training_step(runs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = tmp_path / "steps.txt"
    monkeypatch.setenv("LOADERTOP_TEST_STEPS", str(calls))
    settings = Settings(dataset="synthetic:cpu_ms=0.2,io_ms=0,kb=4", consumer=f"{DATA}/steps.py:sleepy_step",
                        workers=(1,), **FAST)  # fmt: skip
    result = Sweep(settings, out_dir=runs).run()
    (trial,) = [t for t in result.trials if t.status == "ok"]
    pids = set(calls.read_text().split())
    assert len(calls.read_text().splitlines()) >= 10  # called for every batch, in the trial process
    assert len(pids) >= 1
    # A 20 ms step over a loader that makes a batch in ~7 ms: the loop mostly waits on the step, not the data.
    assert trial.stall_fraction is not None and trial.stall_fraction < 0.5
    assert trial.batches_per_s is not None and trial.batches_per_s < 50  # at most 1 / 20 ms
