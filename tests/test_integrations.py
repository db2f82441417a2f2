"""loadertop.integrations against the real libraries (the `lightning` and `hf` extras, in `test`): a real
Lightning `Trainer.fit` and a real Hugging Face `Trainer.train` on CPU, attached with `open_session` (what
`loadertop attach` runs), and their tune paths; Accelerate's prepared loader watched from inside.

Each framework's tests are skipped, with the reason, only when its library is not installed. The training jobs are
in tests/framework_jobs.py (run as subprocesses: the libraries' imports stay out of the test process).
"""

from __future__ import annotations

import importlib.util
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import torch
from framework_jobs import HF_JOB, LIGHTNING_JOB, run_job
from torch.utils.data import DataLoader, TensorDataset

from loadertop.core.job import publisher as publisher_mod
from loadertop.core.job.publisher import publisher
from loadertop.core.model.config import TrialConfig
from loadertop.core.model.jobs import SOCKET_FILE
from loadertop.core.model.live_protocol import JobEpoch, JobSteps, JobWorkers, LiveMessage, decode
from loadertop.integrations.loaders import LoaderProxy, innermost, install, proxied, tuned_of


def _installed(*names: str) -> bool:
    return all(importlib.util.find_spec(name) is not None for name in names)


needs_lightning = pytest.mark.skipif(
    not _installed("lightning"), reason="lightning is not installed (pip install -e '.[lightning]')"
)
needs_hf = pytest.mark.skipif(
    not _installed("transformers", "accelerate"),
    reason="transformers or accelerate is not installed (pip install -e '.[hf]')",
)
needs_accelerate = pytest.mark.skipif(
    not _installed("accelerate"), reason="accelerate is not installed (pip install -e '.[hf]')"
)


def _shown(snaps: list) -> list:
    """Snapshots with throughput, stall, wait tails and the workers' memory, from the job's own worker list."""
    return [
        s
        for s in snaps
        if s.watched
        and s.samples_per_s
        and s.stall_fraction is not None
        and s.wait_ms_p95 is not None
        and len(s.workers) == 2
        and all(w.uss_mb for w in s.workers)
    ]


def _check_attached(run: dict) -> None:
    snaps = run["snaps"]
    assert not any("throughput" in m for s in snaps if s.watched for m in s.missing), [s.missing for s in snaps]
    shown = _shown(snaps)
    assert shown, [(s.watched, s.samples_per_s, s.workers) for s in snaps]
    # 16-sample batches at ~10 ms steps: ~1000/s on a quiet machine; an interval of a busy one may read far less
    rates = [s.samples_per_s for s in shown]
    assert all(0 < r < 20_000 for r in rates) and max(rates) > 100, rates
    notes = [n for s in snaps for n in s.notes]
    assert any("epoch 0 ended: 60 batches" in n for n in notes), notes  # whole epochs, counted


def _check_tuned(run: dict) -> TrialConfig:
    choice = run["result"]["choice"]
    assert choice is not None, run["stderr"][-2000:]
    config = TrialConfig(**choice)
    chose = f"loadertop.tune: chose {config.label()} after "
    kept = f"loadertop.tune: kept {config.label()}, the job's own: "  # no evidence for a switch in a short budget
    assert chose in run["stderr"] or kept in run["stderr"], run["stderr"][-2000:]
    return config


# -- Lightning -----------------------------------------------------------------------------------------------------


@needs_lightning
def test_lightning_fit_is_attachable(jobs_root: Path, tmp_path: Path, no_leftovers: None) -> None:
    run = run_job(LIGHTNING_JOB, [], jobs_root, tmp_path, attach=True)
    _check_attached(run)


@needs_lightning
def test_lightning_tune_prints_the_dataloader_line_it_chose(
    jobs_root: Path, tmp_path: Path, no_leftovers: None
) -> None:
    run = run_job(LIGHTNING_JOB, ["2.5"], jobs_root, tmp_path, attach=False)
    config = _check_tuned(run)
    (line,) = [ln.strip() for ln in run["stderr"].splitlines() if ln.strip().startswith("DataLoader(")]
    assert "batch_size=16" in line
    assert (f"num_workers={config.num_workers}" in line) == (config.num_workers > 0)
    assert ("prefetch_factor=" in line) == (config.num_workers > 0 and config.prefetch_factor != 2)


# -- Hugging Face --------------------------------------------------------------------------------------------------


@needs_hf
def test_hf_train_is_attachable(jobs_root: Path, tmp_path: Path, no_leftovers: None) -> None:
    run = run_job(HF_JOB, [str(tmp_path / "out")], jobs_root, tmp_path, attach=True)
    _check_attached(run)


@needs_hf
def test_hf_tune_prints_the_training_arguments_it_chose(jobs_root: Path, tmp_path: Path, no_leftovers: None) -> None:
    run = run_job(HF_JOB, [str(tmp_path / "out"), "2.5"], jobs_root, tmp_path, attach=False)
    config = _check_tuned(run)
    (line,) = [ln.strip() for ln in run["stderr"].splitlines() if ln.strip().startswith("TrainingArguments(")]
    assert line == run["result"]["line"]
    workers = config.num_workers
    assert f"dataloader_num_workers={workers}," in line
    assert f"dataloader_prefetch_factor={config.prefetch_factor if workers else None}," in line
    assert f"dataloader_persistent_workers={config.persistent_workers and workers > 0}," in line
    assert f"dataloader_pin_memory={config.pin_memory})" in line


# -- Accelerate: the DataLoader inside the prepared wrapper is the one watched -------------------------------------

N, BS = 48, 8


@pytest.fixture
def jobs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="lt", dir="/tmp"))
    monkeypatch.setenv("LOADERTOP_JOBS_DIR", str(root))
    monkeypatch.delenv("LOADERTOP_WATCH", raising=False)
    publisher_mod.reset()
    yield root
    publisher_mod.reset()
    shutil.rmtree(root, ignore_errors=True)


def _prepared(workers: int) -> object:
    from accelerate.data_loader import prepare_data_loader

    data = TensorDataset(torch.arange(N, dtype=torch.float32).reshape(N, 1))
    loader = DataLoader(data, batch_size=BS, num_workers=workers)
    return prepare_data_loader(loader, device=torch.device("cpu"), put_on_device=True)


def _read(path: Path, until: int, timeout: float = 10.0) -> list[LiveMessage]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(path))
    sock.settimeout(0.2)
    messages: list[LiveMessage] = []
    rest = b""
    deadline = time.monotonic() + timeout
    while sum(isinstance(m, JobEpoch) for m in messages) < until and time.monotonic() < deadline:
        try:
            data = sock.recv(65536)
        except TimeoutError:
            continue
        if not data:
            break
        *lines, rest = (rest + data).split(b"\n")
        messages += [decode(line) for line in lines if line]
    sock.close()
    return messages


@needs_accelerate
def test_accelerate_prepared_loader_shows_its_dataloaders_workers(jobs: Path, no_leftovers: None) -> None:
    from loadertop.integrations import accelerate as lt_accelerate

    prepared = lt_accelerate.watch(_prepared(2))
    assert isinstance(prepared, DataLoader) and type(proxied(prepared)) is LoaderProxy
    children: set[int] = set()
    first = [b[0] for b in prepared]  # type: ignore[attr-defined]  # the publisher starts with the first epoch
    pub = publisher()
    assert pub is not None
    batches = []
    for (x,) in prepared:  # type: ignore[attr-defined]
        children.update(p.pid for p in psutil.Process().children())
        batches.append(x)
    messages = _read(pub.folder / SOCKET_FILE, until=2)
    assert torch.equal(torch.cat(batches), torch.cat(first)) and len(batches) == N // BS
    workers = [m for m in messages if isinstance(m, JobWorkers)]
    assert len(workers) == 2 and all(len(w.pids) == 2 for w in workers)
    assert set(workers[1].pids) <= children  # the DataLoader's own workers, not a wrapper's generator
    assert workers[0].config is not None and workers[0].config.num_workers == 2
    steps = [m for m in messages if isinstance(m, JobSteps)]
    assert sum(s.samples for s in steps) == 2 * N
    epochs = [m for m in messages if isinstance(m, JobEpoch)]
    assert [(e.epoch, e.batches, e.complete) for e in epochs] == [(0, N // BS, True), (1, N // BS, True)]


# -- in-process: the stand-in is the loader ------------------------------------------------------------------------


@pytest.mark.unit
def test_the_proxy_is_the_loader_to_the_framework(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOADERTOP_WATCH", "0")  # plain iteration: no publisher in a unit test
    loader = DataLoader(TensorDataset(torch.arange(10.0)), batch_size=4)
    proxy = install(loader)
    assert type(proxy) is LoaderProxy and isinstance(proxy, DataLoader)
    assert len(proxy) == 3 and proxy.batch_size == 4 and proxy.sampler is loader.sampler
    assert [b[0].tolist() for b in proxy] == [b[0].tolist() for b in loader]
    assert install(proxy) is proxy and innermost(proxy) is loader and tuned_of(proxy) is None


@pytest.mark.unit
@needs_accelerate
def test_an_accelerate_wrapper_is_watched_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOADERTOP_WATCH", "0")
    prepared = _prepared(0)
    base = prepared.base_dataloader  # type: ignore[attr-defined]
    assert install(prepared) is prepared and install(prepared) is prepared  # twice: one proxy
    proxy = proxied(prepared)
    assert proxy is not None and proxy.loader is base and innermost(prepared) is base
    assert isinstance(prepared, DataLoader) and len(prepared) == N // BS  # type: ignore[arg-type]
    assert torch.equal(torch.cat([b[0] for b in prepared]), torch.arange(N, dtype=torch.float32).reshape(N, 1))  # type: ignore[attr-defined]
