"""The datasets used at scale (WebDataset tar shards, a Hugging Face dataset saved to disk) and their traps: fewer
shards than ranks × workers (idle workers, found before the trial from the shard count and after it from the
per-worker sample counts) and persistent_workers + set_epoch (every epoch the same order)."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, default_collate, get_worker_info

from loadertop.core.datasets.errors import SpecError
from loadertop.core.datasets.spec import load_dataset
from loadertop.core.engine.drive.driver import Sweep
from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.trial.shard_counts import CountingCollate, idle_warning, set_epoch_warning, shard_warning

FAST = dict(trial_seconds=1.0, block_seconds=0.1, interval=0.2, search="grid", start_methods=("fork",))
SHARDS, PER_SHARD = 4, 48
ROWS = 512  # of the Hugging Face dataset, in 2 Arrow files


def write_shards(folder: Path, shards: int, per_shard: int) -> str:
    """Real WebDataset shards, written with tarfile: per sample `KEY.npy` (16 floats) and `KEY.cls`."""
    folder.mkdir(parents=True, exist_ok=True)
    for s in range(shards):
        with tarfile.open(folder / f"shard-{s:06d}.tar", "w") as tar:
            for i in range(per_shard):
                key = f"{s:03d}{i:05d}"
                buffer = io.BytesIO()
                np.save(buffer, np.full(16, s * per_shard + i, dtype=np.float32))
                for name, data in ((f"{key}.npy", buffer.getvalue()), (f"{key}.cls", str(i % 10).encode())):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    return f"{folder}/shard-{{000000..{shards - 1:06d}}}.tar"


@pytest.fixture(scope="module")
def pattern(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_shards(tmp_path_factory.mktemp("wds"), SHARDS, PER_SHARD)


def config(workers: int, persistent: bool = False) -> TrialConfig:
    return TrialConfig(num_workers=workers, batch_size=8, persistent_workers=persistent)


# -- webdataset: the spec ----------------------------------------------------------------------------------------


def test_webdataset_spec_reads_every_sample_once_across_workers(pattern: str) -> None:
    pytest.importorskip("webdataset", reason="pip install webdataset (the scale extra)")
    dataset, extra = load_dataset(f"webdataset:{pattern}")
    assert extra == {} and dataset.n_shards == SHARDS
    loader = DataLoader(dataset, batch_size=8, num_workers=2)
    seen = []
    for x, label in loader:
        assert x.shape[1:] == (16,) and x.dtype == torch.float32 and label.dtype == torch.int64
        seen += x[:, 0].long().tolist()
    assert sorted(seen) == list(range(SHARDS * PER_SHARD))  # split by worker: nothing twice, nothing lost


def test_webdataset_sweep_flags_too_few_shards_and_idle_workers(pattern: str, runs: Path, no_leftovers: None) -> None:
    """4 shards, 2 ranks: 1 worker per rank reads 2 shards; 4 workers per rank leave 2 of each rank's idle."""
    pytest.importorskip("webdataset", reason="pip install webdataset (the scale extra)")
    settings = Settings(dataset=f"webdataset:{pattern}", workers=(1, 4), batch_sizes=(8,), ranks=2, **FAST)
    result = Sweep(settings, out_dir=runs).run()
    by_workers = {t.config.num_workers: t for t in result.trials}
    assert all(t.status == "ok" for t in result.trials), [t.error for t in result.trials]
    assert by_workers[1].warnings == ()
    warned = " | ".join(by_workers[4].warnings)
    assert "4 shards for 2 ranks × 4 workers = 8 readers: 4 workers idle" in warned
    assert "use ≤ 2 workers per rank or split the data into ≥ 8 shards" in warned
    assert "2 of 4 workers produced no samples (worker 2, 3)" in warned  # counted in each rank's workers
    # The ranks' same words, told once (a loaded machine may add a true warning of its own: a first epoch that took
    # the whole trial)
    for words in ("workers idle", "produced no samples"):
        assert sum(words in w for w in by_workers[4].warnings) == 1, by_workers[4].warnings


def test_a_rank_without_a_shard_fails_its_trial_saying_why(tmp_path: Path, runs: Path, no_leftovers: None) -> None:
    pytest.importorskip("webdataset", reason="pip install webdataset (the scale extra)")
    one = write_shards(tmp_path / "one", 1, 16)
    settings = Settings(dataset=f"webdataset:{one}", workers=(0,), batch_sizes=(8,), ranks=2, **FAST)
    (trial,) = Sweep(settings, out_dir=runs).run().trials
    assert trial.status == "failed"
    assert (
        trial.error is not None
        and "rank 1: RuntimeError: the loader yielded no batch; 1 shard for 2 ranks" in trial.error
    )


@pytest.mark.unit
def test_bad_webdataset_specs_say_one_line(pattern: str, tmp_path: Path) -> None:
    pytest.importorskip("webdataset", reason="pip install webdataset (the scale extra)")
    for spec, needle in (
        (f"webdataset:{tmp_path}/none-{{0..3}}.tar", "none-0.tar' not found (and 3 more)"),
        (f"webdataset:{tmp_path}/*.tar", "no file matches"),
        (f"webdataset:{pattern}:bogus=1", "option 'bogus' is not one of"),
        (f"webdataset:{pattern}:size=x", "size='x' is not a whole number"),
        ("webdataset:", "needs a path"),
    ):
        with pytest.raises(SpecError) as caught:
            load_dataset(spec)
        assert needle in str(caught.value) and "\n" not in str(caught.value), spec


@pytest.mark.unit
def test_a_missing_package_says_what_to_install(pattern: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for module, spec in (("webdataset", f"webdataset:{pattern}"), ("datasets", "hf:/tmp")):
        monkeypatch.setitem(sys.modules, module, None)  # as if not installed
        with pytest.raises(SpecError, match=f"pip install {module}$"):
            load_dataset(spec)


def test_bad_webdataset_path_is_exit_2_from_the_cli(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "loadertop", "--headless", "--workers", "0", "--out", str(tmp_path),
         "--dataset", f"webdataset:{tmp_path}/shard-{{000..009}}.tar"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert "shard-000.tar' not found (and 9 more)" in last or "pip install webdataset" in last, last
    assert "Traceback" not in out.stderr


# -- the shard arithmetic and the idle workers -------------------------------------------------------------------


@pytest.mark.unit
def test_shard_arithmetic_names_the_numbers_and_the_fix() -> None:
    assert shard_warning(8, workers=8, ranks=2) == (
        "8 shards for 2 ranks × 8 workers = 16 readers: 8 workers idle; "
        "use ≤ 4 workers per rank or split the data into ≥ 16 shards"
    )
    assert shard_warning(16, workers=8, ranks=2) is None
    assert shard_warning(2, workers=4, ranks=2, per_rank=True) == (  # datasets' split_dataset_by_node counts per rank
        "2 shards per rank for 2 ranks × 4 workers = 8 readers: 4 workers idle; "
        "use ≤ 2 workers per rank or split the data into ≥ 8 shards"
    )
    assert "use ≤ 1 worker per rank" in (shard_warning(2, workers=2, ranks=2) or "")
    assert "2 of 4 ranks get no shard at all" in (shard_warning(2, workers=1, ranks=2, nodes=2) or "")
    assert "1 of 2 ranks gets no shard at all" in (shard_warning(1, workers=0, ranks=2) or "")
    assert "for 2 nodes × 2 ranks" in (shard_warning(2, workers=1, ranks=2, nodes=2) or "")


class FirstWorkerOnly(IterableDataset[torch.Tensor]):
    """Only worker 0 yields: the others are idle, as with fewer shards than workers. No shard count to read."""

    def __iter__(self):  # type: ignore[no-untyped-def]
        info = get_worker_info()
        if info is None or info.id == 0:
            yield from (torch.tensor([i]) for i in range(64))


def test_idle_workers_are_found_from_per_worker_counts() -> None:
    loader = DataLoader(FirstWorkerOnly(), batch_size=4, num_workers=3, collate_fn=CountingCollate(default_collate, 3))
    batches = sum(1 for _ in loader)
    assert batches == 16 and loader.collate_fn.counts.tolist() == [64, 0, 0]
    assert "2 of 3 workers produced no samples (worker 1, 2)" in (idle_warning(loader, batches) or "")
    assert idle_warning(loader, 3) is None  # too few batches for every worker to have had its turn


# -- persistent_workers + set_epoch ------------------------------------------------------------------------------


class EpochShuffled(IterableDataset[int]):
    """Shuffles by epoch, the epoch set by set_epoch in the main process (a plain int, or a shared tensor)."""

    def __init__(self, shared: bool) -> None:
        self.epoch = torch.tensor(0).share_memory_() if shared else 0

    def set_epoch(self, epoch: int) -> None:
        if isinstance(self.epoch, torch.Tensor):
            self.epoch.fill_(epoch)  # in place: the workers map the same memory
        else:
            self.epoch = epoch

    def __iter__(self):  # type: ignore[no-untyped-def]
        order = torch.randperm(32, generator=torch.Generator().manual_seed(int(self.epoch)))
        yield from order.tolist()


@pytest.mark.parametrize(
    ("shared", "persistent", "repeats"), [(False, True, True), (False, False, False), (True, True, False)]
)
def test_set_epoch_with_persistent_workers_repeats_the_order(shared: bool, persistent: bool, repeats: bool) -> None:
    dataset = EpochShuffled(shared)
    loader = DataLoader(dataset, batch_size=None, num_workers=1, persistent_workers=persistent)
    orders = []
    for epoch in range(2):
        dataset.set_epoch(epoch)
        orders.append(list(loader))
    assert (orders[0] == orders[1]) == repeats  # the trap, shown on a real loader
    warning = set_epoch_warning(dataset, config(1, persistent))
    assert (warning is not None) == repeats
    if warning:
        assert "EpochShuffled has set_epoch, but with persistent_workers=True" in warning
        assert "persistent_workers=False" in warning
    del loader


STREAM = """
import torch
from torch.utils.data import IterableDataset, get_worker_info


class Stream(IterableDataset):
    n_shards = 2

    def __init__(self):
        self.epoch = 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __iter__(self):
        info = get_worker_info()
        shards = range(2) if info is None else range(info.id, 2, info.num_workers)
        for s in shards:
            yield from (torch.full((4,), float(s * 512 + i)) for i in range(512))


def make():
    return Stream()
"""


def test_user_stream_sweep_warns_set_epoch_shards_and_idle(tmp_path: Path, runs: Path, no_leftovers: None) -> None:
    """A factory's own IterableDataset: its `n_shards` is read, its set_epoch with persistent workers flagged."""
    (tmp_path / "stream_factory.py").write_text(STREAM)
    settings = Settings(
        dataset=f"{tmp_path}/stream_factory.py:make", workers=(2, 3), batch_sizes=(8,), persistent_workers=(True,),
        **FAST,
    )  # fmt: skip
    result = Sweep(settings, out_dir=runs).run()
    assert all(t.status == "ok" for t in result.trials), [t.error for t in result.trials]
    two, three = sorted(result.trials, key=lambda t: t.config.num_workers)
    assert len(two.warnings) == 1 and "Stream has set_epoch" in two.warnings[0]
    warned = " | ".join(three.warnings)
    assert "2 shards for 1 rank × 3 workers = 3 readers: 1 worker idle" in warned
    assert "1 of 3 workers produced no samples (worker 2)" in warned and "Stream has set_epoch" in warned


# -- Hugging Face datasets saved to disk --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    datasets = pytest.importorskip("datasets", reason="pip install datasets (the scale extra)")
    import pyarrow as pa
    from datasets.table import InMemoryTable

    path = tmp_path_factory.mktemp("hf") / "saved"
    rows = {"x": [[float(i)] * 8 for i in range(ROWS)], "label": [i % 10 for i in range(ROWS)]}
    # A fingerprint given: datasets 5.2 cannot hash a pyarrow table to make one (PicklingError on MonthDayNano).
    table = InMemoryTable(pa.table(rows))
    datasets.Dataset(table, fingerprint="loadertop-test").save_to_disk(str(path), num_shards=2)
    return path


def test_hf_saved_dataset_map_style_and_streaming(saved: Path) -> None:
    dataset, _ = load_dataset(f"hf:{saved}")
    assert len(dataset) == ROWS and dataset[3]["x"].shape == (8,) and int(dataset[3]["label"]) == 3
    stream, _ = load_dataset(f"hf:{saved}:streaming=1")  # shards: one per Arrow file
    assert isinstance(stream, IterableDataset) and stream.n_shards == 2
    loader = DataLoader(stream, batch_size=8, num_workers=4, collate_fn=CountingCollate(default_collate, 4))
    seen = sorted(int(v) for batch in loader for v in batch["x"][:, 0])
    assert seen == list(range(ROWS))
    assert "2 of 4 workers produced no samples" in (idle_warning(loader, 8) or "")
    assert "2 shards for 1 rank × 4 workers = 4 readers: 2 workers idle" in (shard_warning(2, 4, 1) or "")


def test_bad_hf_specs_say_one_line(saved: Path, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    for spec, needle in (
        (f"hf:{tmp_path}/missing", "folder not found"),
        (f"hf:{tmp_path}/empty", "load_from_disk raised"),
        (f"hf:{saved}:columns=nope", "has no column 'nope'"),
        (f"hf:{saved}:streaming=1,shards=0", "shards=0: must be at least 1"),
        (f"hf:{saved}:split=test", "is a single Dataset"),
    ):
        with pytest.raises(SpecError) as caught:
            load_dataset(spec)
        assert needle in str(caught.value) and "\n" not in str(caught.value), (spec, str(caught.value))


def test_hf_streaming_sweep_counts_shards_per_rank(saved: Path, runs: Path, no_leftovers: None) -> None:
    """2 Arrow files, 2 ranks: split_dataset_by_node leaves each rank 1 shard, so 3 of its 4 workers are idle."""
    settings = Settings(dataset=f"hf:{saved}:streaming=1", workers=(4,), batch_sizes=(8,), ranks=2, **FAST)
    (trial,) = Sweep(settings, out_dir=runs).run().trials
    assert trial.status == "ok", trial.error
    shards = (
        "1 shard per rank for 2 ranks × 4 workers = 8 readers: 6 workers idle; "
        "use ≤ 1 worker per rank or split the data into ≥ 8 shards",
        "3 of 4 workers produced no samples (worker 1, 2, 3): the dataset gives them no shard (fewer shards than "
        "workers) or its __iter__ skips them",
    )
    # On a busy machine a third, true, warning may come: the first epoch took the whole trial.
    assert [w for w in trial.warnings if "produced no samples" in w or "shard per rank" in w] == list(shards)
    assert all(w in shards or w.startswith("the first epoch took") for w in trial.warnings), trial.warnings
