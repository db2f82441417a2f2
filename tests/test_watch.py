"""loadertop.watch(loader) in a real training loop: real DataLoaders (0 and 2 worker processes), the real
publisher, real Unix-socket viewers decoding the live protocol."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

import loadertop
from loadertop.core.job import publisher as publisher_mod
from loadertop.core.job.publisher import Publisher, publisher
from loadertop.core.job.watch import loader_config, samples_in
from loadertop.core.model.config import TrialConfig
from loadertop.core.model.jobs import SOCKET_FILE, read_job
from loadertop.core.model.live_protocol import (
    JobBye,
    JobEpoch,
    JobHello,
    JobSteps,
    JobWorkers,
    LiveMessage,
    TuneStep,
    decode,
)

N = 64  # samples per epoch
BS = 8


@pytest.fixture
def jobs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A short jobs folder (Unix socket paths are limited to 107 bytes) and a fresh publisher for each test."""
    root = Path(tempfile.mkdtemp(prefix="lt", dir="/tmp"))
    monkeypatch.setenv("LOADERTOP_JOBS_DIR", str(root))
    monkeypatch.delenv("LOADERTOP_WATCH", raising=False)
    publisher_mod.reset()
    yield root
    publisher_mod.reset()
    shutil.rmtree(root, ignore_errors=True)


def dataset() -> TensorDataset:
    return TensorDataset(torch.arange(N, dtype=torch.float32).reshape(N, 1), torch.arange(N))


def loader(workers: int, **more: object) -> DataLoader:
    return DataLoader(dataset(), batch_size=BS, num_workers=workers, **more)  # type: ignore[arg-type]


class Viewer:
    """A real viewer: connects to the job's socket and decodes what arrives."""

    def __init__(self, pub: Publisher) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(str(pub.folder / SOCKET_FILE))
        self.sock.settimeout(0.2)
        self.messages: list[LiveMessage] = []
        self.eof = False
        self._rest = b""

    def read_until(self, done: Callable[[list[LiveMessage]], bool], timeout: float = 5.0) -> list[LiveMessage]:
        deadline = time.monotonic() + timeout
        while not done(self.messages) and not self.eof and time.monotonic() < deadline:
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            if not data:
                self.eof = True
            *lines, self._rest = (self._rest + data).split(b"\n")
            self.messages += [decode(line) for line in lines if line]
        return self.messages

    def close(self) -> None:
        self.sock.close()


def of(kind: type, messages: list[LiveMessage]) -> list:
    return [m for m in messages if isinstance(m, kind)]


def epochs_done(count: int) -> Callable[[list[LiveMessage]], bool]:
    return lambda ms: len(of(JobEpoch, ms)) >= count


def run_epoch(watched: object, step: Callable[[], None] = lambda: None) -> list:
    out = []
    for batch in watched:  # type: ignore[attr-defined]
        out.append(batch)
        step()
    return out


@pytest.mark.parametrize("workers", [0, 2])
def test_same_batches_as_the_loader(jobs: Path, workers: int) -> None:
    plain = loader(workers, shuffle=True, generator=torch.Generator().manual_seed(7))
    watched_loader = loader(workers, shuffle=True, generator=torch.Generator().manual_seed(7))
    watched = loadertop.watch(watched_loader)
    assert len(watched) == len(plain) == N // BS
    for _ in range(2):  # two epochs: the shuffles go on alike
        ours, theirs = run_epoch(watched), run_epoch(plain)
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs, strict=True):
            assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert publisher() is not None  # it really was watched


class Faulty(Dataset):
    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> int:
        if i == 20:
            raise KeyError(f"sample {i} is broken")
        return i


@pytest.mark.parametrize("workers", [0, 2])
def test_exceptions_of_the_loader_pass_through(jobs: Path, workers: int) -> None:
    def error_of(iterable: object) -> BaseException:
        try:
            run_epoch(iterable)
        except Exception as exc:
            # Drop the frames now: a DataLoader iterator left to the cyclic GC takes 10 s to stop its workers.
            exc.__traceback__ = None
            return exc
        raise AssertionError("the loader raised nothing")

    plain = error_of(DataLoader(Faulty(), batch_size=BS, num_workers=workers))
    ours = error_of(loadertop.watch(DataLoader(Faulty(), batch_size=BS, num_workers=workers)))
    assert type(ours) is type(plain) and str(ours) == str(plain)
    assert "sample 20 is broken" in str(ours)


def test_a_viewer_sees_hello_workers_steps_and_epochs(jobs: Path, no_leftovers: None) -> None:
    dl = loader(2)
    watched = loadertop.watch(dl)
    pub = publisher()
    assert pub is not None
    viewer = Viewer(pub)
    children: set[int] = set()

    def note_children() -> None:
        children.update(p.pid for p in psutil.Process().children())

    run_epoch(watched, note_children)
    messages = viewer.read_until(epochs_done(1))
    viewer.close()
    assert isinstance(messages[0], JobHello) and messages[0].pid == os.getpid()
    (workers,) = of(JobWorkers, messages)
    assert len(workers.pids) == 2 and set(workers.pids) <= children  # the real workers, children of this process
    assert workers.config == loader_config(dl) == TrialConfig(2, BS, 2, start_method=workers.config.start_method)
    steps = of(JobSteps, messages)
    assert sum(s.batches for s in steps) == N // BS
    assert sum(s.samples for s in steps) == N
    assert all(s.epoch == 0 and s.loader == 0 and s.dropped == 0 for s in steps)
    (epoch,) = of(JobEpoch, messages)
    assert epoch.complete and epoch.batches == N // BS and epoch.first_batch_s is not None
    assert epoch.seconds >= epoch.first_batch_s
    order = [type(m) for m in messages]
    assert order.index(JobWorkers) < order.index(JobSteps) < order.index(JobEpoch)


def test_epochs_count_across_watch_calls_and_persistent_workers_stay(jobs: Path) -> None:
    dl = loader(2, persistent_workers=True)
    pub = publisher()
    assert pub is not None
    viewer = Viewer(pub)
    for _ in range(3):
        assert len(run_epoch(loadertop.watch(dl))) == N // BS  # a new watch() each epoch, as in a training loop
    messages = viewer.read_until(epochs_done(3))
    viewer.close()
    assert [e.epoch for e in of(JobEpoch, messages)] == [0, 1, 2]
    pids = {w.pids for w in of(JobWorkers, messages)}
    assert len(pids) == 1 and len(next(iter(pids))) == 2  # the same two workers each epoch
    per_epoch = {e: sum(s.batches for s in of(JobSteps, messages) if s.epoch == e) for e in range(3)}
    assert per_epoch == {0: N // BS, 1: N // BS, 2: N // BS}


@pytest.mark.unit
def test_a_loop_that_stops_at_the_length_ran_a_whole_epoch(jobs: Path) -> None:
    """Lightning's fetcher (and zip with a range) never asks past len(loader): every batch handed out is an epoch."""
    dl = loader(0)
    pub = publisher()
    assert pub is not None
    viewer = Viewer(pub)
    it = iter(loadertop.watch(dl))
    for _ in range(len(dl)):
        next(it)
    del it  # closed without StopIteration
    it = iter(loadertop.watch(dl))
    next(it)
    del it  # one batch of the next epoch: left early
    messages = viewer.read_until(epochs_done(2))
    viewer.close()
    assert [(e.batches, e.complete) for e in of(JobEpoch, messages)] == [(N // BS, True), (1, False)]


def test_break_closes_the_epoch_and_its_workers(jobs: Path, no_leftovers: None) -> None:
    dl = loader(2)
    pub = publisher()
    assert pub is not None
    viewer = Viewer(pub)
    for i, _ in enumerate(loadertop.watch(dl)):
        if i == 2:
            break
    messages = viewer.read_until(epochs_done(1))
    viewer.close()
    (epoch,) = of(JobEpoch, messages)
    assert not epoch.complete and epoch.batches == 3
    (workers,) = of(JobWorkers, messages)
    gone = psutil.wait_procs([psutil.Process(p) for p in workers.pids if psutil.pid_exists(p)], timeout=5)[1]
    assert not gone  # the iterator shut its workers down when the loop left
    assert len(run_epoch(loadertop.watch(dl))) == N // BS  # and the next epoch runs whole


@pytest.mark.unit
def test_two_viewers_at_once_and_a_late_one_gets_the_history(jobs: Path) -> None:
    pub = publisher()
    assert pub is not None
    first, second = Viewer(pub), Viewer(pub)
    run_epoch(loadertop.watch(loader(0)))
    seen = [v.read_until(epochs_done(1)) for v in (first, second)]
    late = Viewer(pub)
    seen.append(late.read_until(epochs_done(1)))
    for v in (first, second, late):
        v.close()
    for messages in seen:
        assert isinstance(messages[0], JobHello)
        assert sum(s.batches for s in of(JobSteps, messages)) == N // BS
        assert len(of(JobEpoch, messages)) == 1


@pytest.mark.unit
def test_a_viewer_that_never_reads_blocks_nothing(jobs: Path) -> None:
    pub = publisher()
    assert pub is not None
    stuck = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stuck.connect(str(pub.folder / SOCKET_FILE))
    config = TrialConfig(2, BS)
    for i in range(6000):  # far more than the socket and the viewer's buffer hold
        pub.send(TuneStep(float(i), 0, config, i, 1.0, 0.0, 0.0, 0.0, "x" * 200))
    assert len(run_epoch(loadertop.watch(loader(0)))) == N // BS
    deadline = time.monotonic() + 5
    while pub._outbox and time.monotonic() < deadline:  # the publisher's thread has taken them all
        time.sleep(0.01)
    reader = Viewer(pub)  # the publisher still serves others: hello, then at most the bounded history
    messages = reader.read_until(epochs_done(1))
    viewers = list(pub._fanout._viewers.values())  # the stuck one lags, bounded: its oldest lines were dropped
    assert all(len(v.lines) <= 2000 for v in viewers) and max(v.dropped for v in viewers) > 0
    reader.close()
    stuck.close()
    assert isinstance(messages[0], JobHello)
    assert len(messages) <= publisher_mod.HISTORY + 1 + 10
    assert of(JobEpoch, messages) and pub.alive


@pytest.mark.unit
def test_folder_is_private_and_removed_at_close(jobs: Path) -> None:
    run_epoch(loadertop.watch(loader(0)))
    pub = publisher()
    assert pub is not None
    folder = pub.folder
    assert folder == jobs / str(os.getpid())
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / SOCKET_FILE).stat().st_mode) == 0o600
    job = read_job(folder)
    assert job is not None and job.pid == os.getpid() and job.hello == pub.hello
    viewer = Viewer(pub)
    viewer.read_until(lambda ms: bool(ms))
    pub.close()
    messages = viewer.read_until(lambda ms: False, timeout=3)
    viewer.close()
    assert viewer.eof and isinstance(messages[-1], JobBye)
    assert not folder.exists()
    pub.close()  # idempotent


def test_workers_do_not_publish_and_do_not_hold_the_socket(jobs: Path) -> None:
    class WhoPublishes(Dataset):
        def __len__(self) -> int:
            return N

        def __getitem__(self, i: int) -> tuple[int, bool]:
            return os.getpid(), publisher() is None

    dl = DataLoader(WhoPublishes(), batch_size=BS, num_workers=2, persistent_workers=True)
    pub = publisher()
    assert pub is not None
    viewer = Viewer(pub)
    batches = run_epoch(loadertop.watch(dl))
    assert all(bool(b[1].all()) for b in batches)  # publisher() is None in every worker
    assert {int(p) for b in batches for p in b[0]}.isdisjoint({os.getpid()})
    pub.close()  # the persistent workers are still alive: they must not hold the viewer's socket open
    viewer.read_until(lambda ms: False, timeout=3)
    viewer.close()
    assert viewer.eof and not pub.folder.exists()
    del dl


def test_a_failing_publisher_steps_aside_and_logs_once(
    jobs: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = jobs / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("LOADERTOP_JOBS_DIR", str(blocker))  # the jobs root cannot be created
    caplog.set_level(logging.WARNING, logger="loadertop.watch")
    dl = loader(2, shuffle=True, generator=torch.Generator().manual_seed(3))
    plain = loader(2, shuffle=True, generator=torch.Generator().manual_seed(3))
    for _ in range(2):
        ours, theirs = run_epoch(loadertop.watch(dl)), run_epoch(plain)
        assert [b[1].tolist() for b in ours] == [b[1].tolist() for b in theirs]
    assert publisher() is None
    records = [r for r in caplog.records if r.name == "loadertop.watch"]
    assert len(records) == 1 and "steps aside" in records[0].getMessage()


@pytest.mark.unit
def test_loadertop_watch_0_disables_it(jobs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOADERTOP_WATCH", "0")
    dl = loader(0)
    assert len(run_epoch(loadertop.watch(dl))) == N // BS
    assert publisher() is None
    assert not any(jobs.iterdir())  # no job folder
    assert type(iter(loadertop.watch(dl))) is type(iter(dl))  # plain iteration


@pytest.mark.unit
def test_samples_and_config_of_loaders_without_a_batch_size() -> None:
    assert samples_in((torch.zeros(5, 3), torch.zeros(5))) == 5
    assert samples_in({"x": torch.zeros(7, 2)}) == 7
    assert samples_in(torch.zeros(3)) == 3
    assert loader_config([1, 2, 3]) is None
    assert loader_config(loader(0)) == TrialConfig(0, BS)


@pytest.mark.unit
def test_a_list_is_watched_too(jobs: Path) -> None:
    batches = [torch.zeros(4, 2), torch.zeros(4, 2), torch.zeros(2, 2)]
    pub = publisher()
    assert pub is not None
    viewer = Viewer(pub)
    assert len(run_epoch(loadertop.watch(batches))) == 3
    messages = viewer.read_until(epochs_done(1))
    viewer.close()
    assert sum(s.samples for s in of(JobSteps, messages)) == 10  # detected from each batch
    assert of(JobWorkers, messages)[0].pids == () and of(JobWorkers, messages)[0].config is None


@pytest.mark.unit
def test_a_short_last_batch_counts_its_samples(jobs: Path) -> None:
    pub = publisher()
    assert pub is not None
    viewer = Viewer(pub)
    dl = DataLoader(dataset(), batch_size=10, num_workers=0)  # 64 samples: six batches of 10, one of 4
    unused = iter(loadertop.watch(dl))  # an epoch never started takes no epoch number
    del unused
    run_epoch(loadertop.watch(dl))
    messages = viewer.read_until(epochs_done(1))
    viewer.close()
    assert sum(s.samples for s in of(JobSteps, messages)) == N
    assert [e.epoch for e in of(JobEpoch, messages)] == [0]


class Broken:
    """A recorder whose drain fails: the publisher's thread dies of it."""

    def drain(self, now: float) -> list[LiveMessage]:
        raise RuntimeError("drain failed")


@pytest.mark.unit
def test_a_publisher_thread_that_fails_steps_aside(jobs: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="loadertop.watch")
    pub = publisher()
    assert pub is not None
    pub.add_recorder(Broken())
    deadline = time.monotonic() + 5
    while pub.alive and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pub.alive and not pub.folder.exists()  # it cleaned up after itself
    for _ in range(2):
        assert len(run_epoch(loadertop.watch(loader(0)))) == N // BS
    assert publisher() is None
    records = [r for r in caplog.records if r.name == "loadertop.watch"]
    assert len(records) == 1 and "drain failed" in records[0].getMessage()


def test_break_with_persistent_workers_keeps_them_and_a_dropped_loader_is_forgotten(jobs: Path) -> None:
    dl = loader(2, persistent_workers=True)
    pub = publisher()
    assert pub is not None
    viewer = Viewer(pub)
    for i, _ in enumerate(loadertop.watch(dl)):
        if i == 1:
            break
    assert len(run_epoch(loadertop.watch(dl))) == N // BS  # the loader's own workers carry on
    messages = viewer.read_until(epochs_done(2))
    viewer.close()
    assert [(e.batches, e.complete) for e in of(JobEpoch, messages)] == [(2, False), (N // BS, True)]
    assert len({w.pids for w in of(JobWorkers, messages)}) == 1
    assert len(pub._recorders) == 1
    del dl
    deadline = time.monotonic() + 5
    while pub._recorders and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pub._recorders
