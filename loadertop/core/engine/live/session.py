"""A live view of one training job: `open_session(target)` checks the target, connects to its socket when it runs
loadertop.watch(), starts the probes on its processes, and `snapshots()` yields one LiveSnapshot per interval
until the job ends (the last one has `ended` set) or `close()` is called. Nothing here raises once open."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil

from loadertop.core.engine.live.client import JobClient
from loadertop.core.engine.live.snapshot import Interval, MessageFold, gpu_util, job_gpus
from loadertop.core.engine.live.target import (
    AttachError,
    Target,
    dataloader_workers,
)
from loadertop.core.engine.verdict.leak import LeakConfig, LeakDetector
from loadertop.core.machine.free_memory import free_mb, read_free_mb
from loadertop.core.machine.gpu import GpuProbe
from loadertop.core.machine.probes import Probes
from loadertop.core.model.events import ProbeSample, WorkerSample
from loadertop.core.model.figures import mean_of
from loadertop.core.model.jobs import JobInfo
from loadertop.core.model.live import LiveSnapshot, LiveWorker

PUMP_S = 0.25  # how often the job's messages are folded between snapshots
NOT_WATCHED = "throughput and stall: the job does not run loadertop.watch(loader)"


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def job_rank(process: psutil.Process) -> str:
    """The job's rank as its launcher set it (RANK, else LOCAL_RANK; "0" for a job with neither, or unreadable)."""
    try:
        env = process.environ()
    except psutil.Error:
        return "0"
    return env.get("RANK") or env.get("LOCAL_RANK") or "0"


def open_one(job: JobInfo, *, interval: float, leak: LeakConfig | None) -> LiveSession | None:
    """A session on one rank that publishes; None when it exited or cannot be read meanwhile."""
    try:
        return LiveSession(Target(pid=job.pid, command=job.command, job=job), interval=interval, leak=leak)
    except (psutil.Error, OSError, AttachError):
        return None


def paced(
    interval: float,
    closed: threading.Event,
    now: Callable[[], float],
    pump: Callable[[], None],
    build: Callable[[], LiveSnapshot],
    close: Callable[[], None],
) -> Iterator[LiveSnapshot]:
    """One snapshot per interval (blocking), `pump` every PUMP_S between them; the last one has `ended` set, and
    `close` follows it. Returns early once `closed` is set. Shared by one job's session and a launcher's ranks."""
    next_t = interval
    while not closed.wait(max(0.0, min(PUMP_S, next_t - now()))):
        if now() < next_t:
            pump()
            continue
        next_t += interval
        if next_t < now():  # the caller was slow: skip ahead, never yield a burst
            next_t = now() + interval
        snapshot = build()
        if closed.is_set():
            return
        if snapshot.ended is not None:
            close()  # before the last yield: a caller that stops at the ended snapshot never resumes the generator
            yield snapshot
            return
        yield snapshot


class LiveSession:
    """See the module docstring. `pid`, `command` and `watched` describe the job."""

    def __init__(
        self,
        target: Target,
        *,
        interval: float = 2.0,
        leak: LeakConfig | None = None,
        gpu: GpuProbe | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.pid = target.pid
        self.command = target.command
        self.interval = interval
        self._clock = clock
        self._t0 = clock()
        attach_wall = time.time()
        self._process = psutil.Process(self.pid)
        self._client = None if target.job is None else JobClient(target.job.socket)
        self.hostname = socket.gethostname() if self._client is None else self._client.hello.hostname
        self.rank = job_rank(self._process)
        self.watched = self._client is not None
        self._fold = None if self._client is None else MessageFold(self._client.hello.started, attach_wall)
        self._leak = LeakDetector(leak)
        self._gpu = gpu if gpu is not None else GpuProbe()
        self._samples: list[tuple[float, ProbeSample]] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._close_lock = threading.Lock()
        self._start = 0.0  # attach-relative start of the interval being gathered
        self._workers: tuple[int, ...] = ()
        self._lost: str | None = None  # why the job's socket stopped while the job runs on
        self._ended_why: str | None = None
        self._interval = Interval()  # what the job said since the last snapshot
        tick = min(1.0, interval)
        self._probes = Probes(  # the job's own cgroup, not loadertop's, bounds what its workers can take
            self._on_sample,
            self._gpu,
            interval=tick,
            full_info_every=tick,
            proc_cgroup=Path(f"/proc/{self.pid}/cgroup"),
        )
        try:
            self._update_workers()
        except BaseException:
            self.close()
            raise
        self._probes.start()

    def _now(self) -> float:
        return self._clock() - self._t0

    def _on_sample(self, sample: ProbeSample) -> None:
        with self._lock:
            self._samples.append((self._now(), sample))

    def _update_workers(self) -> None:
        """Tell the probes which workers to read: the job's own list when it publishes one, else psutil's."""
        if self._fold is not None and self._lost is None and self._fold.worker_pids:
            workers = self._fold.workers()
        else:  # not watched, the socket lost, or no JobWorkers yet
            workers = tuple(dataloader_workers(self._process))
        if workers != self._workers or not self._probes.running:
            self._workers = workers
            self._probes.watch(None, self.pid, workers)

    # -- the stream of snapshots ---------------------------------------------------------------------------

    def snapshots(self) -> Iterator[LiveSnapshot]:
        """One LiveSnapshot per interval (blocking); the last one has `ended` set. Returns early after close()."""
        # new workers reach the probes within PUMP_S, not at the interval's end
        return paced(self.interval, self._closed, self._now, self._pump, self._build, self.close)

    def _ended(self) -> str | None:
        if not _alive(self.pid):
            return "the job exited"
        client = self._client
        if client is None or client.ended is None or self._lost is not None:
            return None
        if client.bye is not None:
            return client.ended
        self._lost = client.ended  # the socket went away but the job runs on: carry on with psutil only
        self._update_workers()
        return None

    def pump(self) -> None:
        """Between snapshots: fold what the job said so far (engine/live/ranks.py drives many sessions so)."""
        self._pump()

    def build(self) -> LiveSnapshot:
        """The snapshot of the interval since the last one, now (for a caller that keeps its own time)."""
        return self._build()

    def messages_received(self) -> int:
        """How many messages the job has sent this view since its hello (0 for a job that does not publish)."""
        return self._client.received if self._client is not None else 0

    def _pump(self) -> None:
        """Fold what the job said so far into the interval, and follow its workers."""
        if self._client is not None and self._fold is not None:
            self._fold.fold((m for _, m in self._client.drain()), self._interval)
        if self._ended_why is None:
            self._update_workers()

    def _build(self) -> LiveSnapshot:
        self._ended_why = self._ended()
        ended = self._ended_why
        self._pump()
        now = self._now()
        interval, self._interval = self._interval, Interval()
        start, self._start = self._start, now
        with self._lock:
            samples = [s for _, s in self._samples]
            self._samples.clear()
        seen = {w.pid for s in samples for w in s.workers}
        if ended is None and not set(self._workers) <= seen:  # workers that started after the last probe tick
            samples.append(self._probes.sample_once())
        return self._snapshot(now, now - start, interval, samples, ended)

    def _snapshot(
        self, now: float, seconds: float, interval: Interval, samples: list[ProbeSample], ended: str | None
    ) -> LiveSnapshot:
        for sample in samples:
            known = {w.pid: w.uss_mb for w in sample.workers}
            self._leak.add(sample.t, {pid: known.get(pid) for pid in self._workers})
        last = samples[-1] if samples else None
        available = read_free_mb() if last is None else free_mb(last.mem_available_mb, last.cgroup_mem_headroom_mb)
        job_seconds = None if self._fold is None or self._lost is not None else self._fold.job_seconds(interval)
        samples_per_s, batches_per_s, stall, step_ms = interval.rates(seconds if job_seconds is None else job_seconds)
        wait_p50, wait_p95, wait_p99, wait_max = interval.wait_tails()
        gpus, gpu_why = job_gpus(self._gpu, {self.pid, *self._workers})
        leak = self._leak.warning(available)
        warnings = [leak] if leak else []
        if interval.dropped:
            warnings.append(f"{interval.dropped} step records were dropped by the job (its buffer was full)")
        missing = []
        if self._lost is not None:
            missing.append(f"throughput and stall: {self._lost}")
        elif self._fold is None:
            missing.append(NOT_WATCHED)
        return LiveSnapshot(
            t=round(now, 3),
            pid=self.pid,
            watched=self._fold is not None and self._lost is None,
            samples_per_s=samples_per_s,
            batches_per_s=batches_per_s,
            stall_fraction=stall,
            wait_ms_p95=wait_p95,
            step_ms=step_ms,
            epoch=None if self._fold is None else self._fold.epoch,
            epoch_ends=tuple(interval.epoch_ends),
            workers=self._live_workers(samples),
            main_cpu_percent=mean_of(s.main_cpu_percent for s in samples),
            main_rss_mb=None if last is None else last.main_rss_mb,
            total_pss_mb=None if last is None else last.total_pss_mb,
            gpu_util=gpu_util(samples, gpus),
            gpu_unavailable=gpu_why,
            mem_available_mb=available,
            warnings=tuple(warnings),
            leak=leak,
            wait_ms_p50=wait_p50,
            wait_ms_max=wait_max,
            wait_ms_p99=wait_p99,
            wait_ms_mean=interval.wait_mean_ms(),
            missing=tuple(missing),
            notes=tuple(interval.notes),
            ended=ended,
            rank=self.rank,
            batches=interval.batches,
        )

    def _live_workers(self, samples: list[ProbeSample]) -> tuple[LiveWorker, ...]:
        """The workers the last samples could read, in the job's order, with the interval's mean CPU."""
        seen: dict[int, list[WorkerSample]] = {}
        for sample in samples:
            for worker in sample.workers:
                seen.setdefault(worker.pid, []).append(worker)
        workers = []
        growing = self._leak.growing()
        for pid in self._workers:
            readings = seen.get(pid)
            if not readings:
                continue
            last = readings[-1]
            fit = self._leak.fit(pid)
            workers.append(
                LiveWorker(
                    pid=pid,
                    uss_mb=last.uss_mb,
                    pss_mb=last.pss_mb,
                    cpu_percent=mean_of([w.cpu_percent for w in readings]),
                    uss_slope_mb_per_min=None if fit is None else fit.slope_mb_per_min,
                    uss_slope_err_mb_per_min=None if fit is None else fit.stderr_mb_per_min,
                    leaking=pid in growing,
                )
            )
        return tuple(workers)

    def close(self) -> None:
        """Idempotent and thread-safe: stops the probes thread and the socket reader, and shuts NVML."""
        with self._close_lock:
            if self._closed.is_set():
                return
            self._closed.set()
        self._probes.stop(2.0)
        if self._client is not None:
            self._client.close()
        self._gpu.close()

    def __enter__(self) -> LiveSession:
        return self

    def __exit__(self, *_exc_info: object) -> None:
        self.close()
