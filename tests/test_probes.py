"""Probes against real child processes (real psutil), and summarize_window on synthetic samples."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import psutil
import pytest

from loadertop.core.machine.gpu import GpuProbe
from loadertop.core.machine.probes import Probes, summarize_window
from loadertop.core.model.events import GpuSample, ProbeSample, WorkerSample
from loadertop.core.model.figures import MB

# A child that holds `mb` MB of private, touched memory and sleeps until killed.
CHILD = """
import sys, time
block = b"x" * ({mb} * 1024 * 1024)
print("ready", flush=True)
time.sleep(600)
"""

Spawn = Callable[..., subprocess.Popen[str]]


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    children: list[subprocess.Popen[str]] = []

    def start(mb: int = 1) -> subprocess.Popen[str]:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD.format(mb=mb)], stdout=subprocess.PIPE, text=True, start_new_session=True
        )
        children.append(child)
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        return child

    try:
        yield start
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
            child.wait(timeout=30)
            if child.stdout is not None:
                child.stdout.close()


def no_gpu() -> GpuProbe:
    mod = ModuleType("fake_pynvml")

    class NVMLError(Exception):
        def __init__(self, value: int) -> None:
            super().__init__(value)
            self.value = value

    def nvmlInit() -> None:
        raise NVMLError(12)

    mod.NVMLError = NVMLError  # type: ignore[attr-defined]
    mod.NVML_ERROR_LIBRARY_NOT_FOUND = 12  # type: ignore[attr-defined]
    mod.nvmlInit = nvmlInit  # type: ignore[attr-defined]
    return GpuProbe(nvml=mod)


def fake_gpus(utils: list[int]) -> GpuProbe:
    mod = ModuleType("fake_pynvml")
    mod.NVMLError = type("NVMLError", (Exception,), {})  # type: ignore[attr-defined]
    mod.nvmlInit = lambda: None  # type: ignore[attr-defined]
    mod.nvmlShutdown = lambda: None  # type: ignore[attr-defined]
    mod.nvmlDeviceGetCount = lambda: len(utils)  # type: ignore[attr-defined]
    mod.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    mod.nvmlDeviceGetName = lambda h: f"Fake GPU {h}"  # type: ignore[attr-defined]
    mod.nvmlDeviceGetMemoryInfo = lambda h: SimpleNamespace(total=16384 * MB, used=(h + 1) * 1024 * MB)  # type: ignore[attr-defined]
    mod.nvmlDeviceGetUtilizationRates = lambda h: SimpleNamespace(gpu=utils[h], memory=0)  # type: ignore[attr-defined]
    return GpuProbe(nvml=mod)


def wait_for(predicate: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


# -- sample_once against real processes -------------------------------------------------------------------------


def test_worker_uss_and_rss(spawn: Spawn) -> None:
    worker = spawn(mb=50)
    probes = Probes(emit=lambda s: None, gpu=no_gpu())
    probes.watch(3, os.getpid(), [worker.pid])
    sample = probes.sample_once()
    assert sample.index == 3
    assert [w.pid for w in sample.workers] == [worker.pid]
    w = sample.workers[0]
    assert w.uss_mb is not None and w.uss_mb >= 45
    assert w.rss_mb >= w.uss_mb
    assert sample.main_rss_mb is not None and sample.main_rss_mb > 0
    assert sample.main_cpu_percent is not None and sample.main_cpu_percent >= 0
    assert sample.rss_mb == pytest.approx(sample.main_rss_mb + w.rss_mb)
    assert sample.total_pss_mb is not None and sample.total_pss_mb >= 45
    assert sample.cpu_percent >= 0
    assert sample.mem_available_mb > 0
    assert sample.shm_free_mb is None or sample.shm_free_mb >= 0
    assert sample.gpus == () and sample.gpu_unavailable == "unavailable: NVML library not found"


def test_full_info_is_rate_limited_and_carried(spawn: Spawn, monkeypatch: pytest.MonkeyPatch) -> None:
    worker = spawn(mb=5)
    calls: list[int] = []
    real = psutil.Process.memory_full_info

    def counting(self: psutil.Process) -> Any:
        calls.append(self.pid)
        return real(self)

    monkeypatch.setattr(psutil.Process, "memory_full_info", counting)
    now = [100.0]
    probes = Probes(emit=lambda s: None, gpu=no_gpu(), full_info_every=2.0, clock=lambda: now[0])
    probes.watch(0, None, [worker.pid])
    first = probes.sample_once()
    assert first.t == 0.0 and len(calls) == 1
    for step in (0.5, 1.0, 1.5):
        now[0] = 100.0 + step
        sample = probes.sample_once()
        assert sample.t == pytest.approx(step)
        assert sample.workers[0].uss_mb == first.workers[0].uss_mb  # carried
        assert sample.total_pss_mb == first.total_pss_mb
    assert len(calls) == 1
    now[0] = 102.0
    probes.sample_once()
    assert len(calls) == 2


def test_exited_processes_are_skipped(spawn: Spawn) -> None:
    stays, reaped, zombie = spawn(), spawn(), spawn()
    probes = Probes(emit=lambda s: None, gpu=no_gpu())
    probes.watch(1, None, [stays.pid, reaped.pid, zombie.pid])
    assert {w.pid for w in probes.sample_once().workers} == {stays.pid, reaped.pid, zombie.pid}
    reaped.kill()
    reaped.wait(timeout=30)
    zombie.kill()  # not waited for: a zombie until the fixture reaps it
    assert wait_for(lambda: psutil.Process(zombie.pid).status() == psutil.STATUS_ZOMBIE)
    for _ in range(3):
        sample = probes.sample_once()
        assert [w.pid for w in sample.workers] == [stays.pid]
        assert sample.rss_mb == pytest.approx(sample.workers[0].rss_mb)


def test_main_process_gone(spawn: Spawn) -> None:
    main = spawn()
    probes = Probes(emit=lambda s: None, gpu=no_gpu())
    probes.watch(0, main.pid, [])
    assert probes.sample_once().main_rss_mb is not None
    main.kill()
    main.wait(timeout=30)
    sample = probes.sample_once()
    assert sample.main_rss_mb is None and sample.main_cpu_percent is None
    assert sample.rss_mb is None and sample.total_pss_mb is None and sample.cpu_percent == 0.0


@pytest.mark.unit
def test_between_trials() -> None:
    probes = Probes(emit=lambda s: None, gpu=no_gpu())
    probes.watch(2, os.getpid(), [])
    probes.watch(None, None, ())
    sample = probes.sample_once()
    assert sample.index is None and sample.workers == ()
    assert sample.main_rss_mb is None and sample.rss_mb is None and sample.cpu_percent == 0.0
    assert sample.mem_available_mb > 0


@pytest.mark.unit
def test_nonexistent_pid_is_skipped() -> None:
    probes = Probes(emit=lambda s: None, gpu=no_gpu())
    probes.watch(0, 2**22 + 12345, [2**22 + 12346])  # above any pid_max default
    sample = probes.sample_once()
    assert sample.workers == () and sample.main_rss_mb is None


def test_cpu_percent_of_a_busy_worker() -> None:
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
    try:
        probes = Probes(emit=lambda s: None, gpu=no_gpu())
        probes.watch(0, None, [busy.pid])  # baseline taken here
        time.sleep(0.5)
        assert probes.sample_once().cpu_percent > 5.0  # generous: the machine may be loaded
    finally:
        busy.kill()
        busy.wait(timeout=30)


@pytest.mark.unit
def test_fake_gpu_flows_into_samples() -> None:
    probes = Probes(emit=lambda s: None, gpu=fake_gpus([10, 90]))
    sample = probes.sample_once()
    assert sample.gpu_unavailable is None
    assert sample.gpus == (
        GpuSample(index=0, util_percent=10.0, mem_used_mb=1024.0),
        GpuSample(index=1, util_percent=90.0, mem_used_mb=2048.0),
    )


@pytest.mark.unit
def test_fake_cgroup_and_shm_paths(tmp_path: Path) -> None:
    (tmp_path / "cg").mkdir()
    (tmp_path / "cg" / "cgroup.controllers").write_text("memory\n")
    (tmp_path / "cg" / "memory.max").write_text(f"{1000 * MB}\n")
    (tmp_path / "cg" / "memory.current").write_text(f"{400 * MB}\n")
    proc = tmp_path / "proc_self_cgroup"
    proc.write_text("0::/\n")
    probes = Probes(
        emit=lambda s: None, gpu=no_gpu(), cgroup_root=tmp_path / "cg", shm_path=tmp_path / "absent", proc_cgroup=proc
    )
    sample = probes.sample_once()
    assert sample.cgroup_mem_headroom_mb == pytest.approx(600.0)
    assert sample.shm_free_mb is None


# -- the thread -------------------------------------------------------------------------------------------------


@pytest.mark.unit
def test_thread_emits_and_stops_promptly() -> None:
    got: list[ProbeSample] = []
    probes = Probes(emit=got.append, gpu=no_gpu(), interval=0.02)
    probes.watch(0, os.getpid(), [])
    probes.start()
    try:
        assert wait_for(lambda: len(got) >= 3)
    finally:
        assert probes.stop(timeout=5.0)
    assert not probes.running
    times = [s.t for s in got]
    assert times == sorted(times)
    n = len(got)
    time.sleep(0.1)
    assert len(got) == n  # nothing after stop


@pytest.mark.unit
def test_stop_does_not_wait_for_the_interval() -> None:
    got: list[ProbeSample] = []
    probes = Probes(emit=got.append, gpu=no_gpu(), interval=60.0)
    probes.start()
    assert wait_for(lambda: len(got) >= 1)
    started = time.monotonic()
    assert probes.stop(timeout=10.0)
    assert time.monotonic() - started < 5.0  # far below the 60 s interval
    assert len(got) == 1


@pytest.mark.unit
def test_emit_errors_are_logged_and_the_thread_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[ProbeSample] = []

    def emit(sample: ProbeSample) -> None:
        calls.append(sample)
        raise RuntimeError("consumer broke")

    probes = Probes(emit=emit, gpu=no_gpu(), interval=0.01)
    with caplog.at_level("ERROR", logger="loadertop.core.machine.probes"), probes:
        assert wait_for(lambda: len(calls) >= 3)
    assert not probes.running
    assert probes.errors >= 3
    assert sum("probe emit failed" in r.getMessage() for r in caplog.records) == 1  # first with traceback only


def test_watch_is_thread_safe_while_running(spawn: Spawn) -> None:
    workers = [spawn(), spawn()]
    got: list[ProbeSample] = []
    probes = Probes(emit=got.append, gpu=no_gpu(), interval=0.001)
    probes.start()
    try:
        stop = threading.Event()

        def flip() -> None:
            i = 0
            while not stop.is_set():
                if i % 2:
                    probes.watch(i, None, [w.pid for w in workers])
                else:
                    probes.watch(None, None, ())
                i += 1

        flipper = threading.Thread(target=flip)
        flipper.start()
        time.sleep(0.5)
        stop.set()
        flipper.join(timeout=10)
    finally:
        assert probes.stop(timeout=5.0)
    assert probes.errors == 0
    assert got
    for sample in got:
        assert len(sample.workers) <= 2


# A trial as the runner forks it: the leader of its own process group, with `n` workers in that group.
POOL = """
import subprocess, sys, time
workers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]) for _ in range({n})]
print(" ".join(str(w.pid) for w in workers), flush=True)
time.sleep(600)
"""


def test_processes_beside_the_trial_are_counted_with_its_pss() -> None:
    # The finalists' parked pool (its trial and 2 workers, another group) is counted beside the running trial
    # (1 worker, its own group); once the pool is dropped, nothing is. This process plays the runner: what it had
    # running already (the runner template of an earlier sweep) is beside the trial too.
    already = len(psutil.Process().children(recursive=True))
    pools = []
    try:
        for n in (1, 2):
            pool = subprocess.Popen(
                [sys.executable, "-c", POOL.format(n=n)], stdout=subprocess.PIPE, text=True, start_new_session=True
            )
            pools.append(pool)
        assert pools[0].stdout is not None
        workers = [int(p) for p in pools[0].stdout.readline().split()]
        assert pools[1].stdout is not None and len(pools[1].stdout.readline().split()) == 2
        now = [0.0]
        probes = Probes(emit=lambda s: None, gpu=no_gpu(), full_info_every=2.0, clock=lambda: now[0])
        probes.watch(0, pools[0].pid, workers)
        assert probes.sample_once().beside == 3 + already
        os.killpg(pools[1].pid, 9)  # the runner drops the parked pool
        pools[1].wait(timeout=30)  # its workers, orphaned, are no longer under the runner
        now[0] = 1.0
        assert probes.sample_once().beside == 3 + already  # carried between memory reads, as PSS is
        now[0] = 2.5
        assert probes.sample_once().beside == already
        probes.watch(None, None, ())
        assert probes.sample_once().beside is None  # between trials
    finally:
        for pool in pools:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pool.pid, 9)
            pool.wait(timeout=30)
            if pool.stdout is not None:
                pool.stdout.close()


# -- summarize_window -------------------------------------------------------------------------------------------


def sample(t: float, workers: tuple[WorkerSample, ...] = (), **kw: Any) -> ProbeSample:
    base: dict[str, Any] = {
        "index": 0,
        "t": t,
        "workers": workers,
        "main_rss_mb": 300.0,
        "main_cpu_percent": 50.0,
        "total_pss_mb": 500.0,
        "rss_mb": 900.0,
        "cpu_percent": 150.0,
        "mem_available_mb": 10_000.0,
        "cgroup_mem_headroom_mb": None,
        "shm_free_mb": 1000.0,
    }
    base.update(kw)
    return ProbeSample(**base)


@pytest.mark.unit
def test_summarize_linear_uss_growth() -> None:
    # Ticks every 0.5 s; USS re-read every 2 s (carried in between). Worker 11 grows 1 MB per 2 s = 30 MB/min,
    # worker 12 is flat, worker 13 never got a USS reading, worker 14 is not part of this trial.
    samples = []
    for tick in range(16):
        t = 10.0 + tick * 0.5
        reading = tick // 4
        samples.append(
            sample(
                t,
                (
                    WorkerSample(pid=11, rss_mb=200.0, cpu_percent=50.0, uss_mb=100.0 + reading),
                    WorkerSample(pid=12, rss_mb=200.0, cpu_percent=50.0, uss_mb=80.0),
                    WorkerSample(pid=13, rss_mb=200.0, cpu_percent=50.0, uss_mb=None),
                    WorkerSample(pid=14, rss_mb=200.0, cpu_percent=50.0, uss_mb=999.0),
                ),
                total_pss_mb=500.0 + tick,
                cpu_percent=100.0 + tick,
            )
        )
    stats = summarize_window(list(reversed(samples)), [11, 12, 13])
    assert stats.samples == 16
    assert stats.worker_pids == (11, 12)
    assert stats.worker_uss_mb == pytest.approx((101.5, 80.0))
    assert stats.total_pss_mb == pytest.approx(507.5)
    assert stats.rss_mb == pytest.approx(900.0)
    assert stats.cpu_percent == pytest.approx(107.5)
    assert stats.main_cpu_percent == pytest.approx(50.0)
    assert stats.gpu_util is None and stats.gpu_mem_mb is None
    assert stats.mem_available_min_mb == pytest.approx(10_000.0)


@pytest.mark.unit
def test_summarize_keeps_the_most_processes_seen_beside() -> None:
    worker = WorkerSample(pid=5, rss_mb=10.0, cpu_percent=0.0, uss_mb=42.0)
    stats = summarize_window([sample(1.0, (worker,), beside=None), sample(1.5, (worker,), beside=9)], [5])
    assert stats.worker_uss_mb == (42.0,)
    assert stats.parked_beside == 9
    assert summarize_window([sample(1.0, (worker,))], [5]).parked_beside == 0  # never read: none counted


@pytest.mark.unit
def test_pss_is_the_whole_pools_while_workers_restart() -> None:
    # Short epochs: between the old workers' exit and the new ones' report, the ticks see the main process alone
    # (PSS 25 MB) for most of the window; the 8-worker pool read 180 MB.
    pool = tuple(WorkerSample(pid=p, rss_mb=20.0, cpu_percent=5.0, uss_mb=13.0) for p in range(8))
    samples = [
        sample(0.5 * k, pool if k % 4 == 0 else (), total_pss_mb=180.0 if k % 4 == 0 else 25.0) for k in range(12)
    ]
    assert summarize_window(samples, range(8)).total_pss_mb == pytest.approx(180.0)


@pytest.mark.unit
def test_per_worker_figures_fall_back_to_the_last_workers_read() -> None:
    # Short epochs: the workers reported last (3, 4) started after the window's last USS reading; the row showed
    # no USS at all. The last workers read (1, 2) stand for the pool.
    old = tuple(WorkerSample(pid=p, rss_mb=20.0, cpu_percent=5.0, uss_mb=12.0 + p) for p in (1, 2))
    stats = summarize_window([sample(0.0, old), sample(0.5, ())], [3, 4])
    assert stats.worker_pids == (1, 2) and stats.worker_uss_mb == (13.0, 14.0)
    assert summarize_window([sample(0.0, old)], [2, 9]).worker_pids == (2,)  # the latest, where read


@pytest.mark.unit
def test_summarize_gpus_and_missing_values() -> None:
    samples = [
        sample(0.0, gpus=(GpuSample(0, 20.0, 1000.0), GpuSample(1, 40.0, 3000.0)), main_cpu_percent=None),
        sample(0.5, gpus=(GpuSample(0, 60.0, 2000.0), GpuSample(1, 80.0, 2500.0)), total_pss_mb=None, rss_mb=None),
        sample(1.0, main_cpu_percent=10.0, mem_available_mb=5000.0),
    ]
    stats = summarize_window(samples, [])
    assert stats.gpu_util == pytest.approx(50.0)
    assert stats.gpu_mem_mb == pytest.approx(3000.0)
    assert stats.main_cpu_percent == pytest.approx(30.0)
    assert stats.total_pss_mb == pytest.approx(500.0)
    assert stats.worker_uss_mb == ()
    assert stats.mem_available_min_mb == pytest.approx(5000.0)


@pytest.mark.unit
def test_summarize_empty() -> None:
    stats = summarize_window([], [1, 2])
    assert stats.samples == 0
    assert stats.worker_pids == () and stats.worker_uss_mb == () and stats.parked_beside == 0
    assert stats.total_pss_mb is None and stats.rss_mb is None
    assert stats.cpu_percent is None and stats.main_cpu_percent is None
    assert stats.gpu_util is None and stats.gpu_mem_mb is None and stats.mem_available_min_mb is None
