"""Guards that keep a sweep from hurting the machine: the memory floor, /dev/shm space, the open-file limit.

The memory guard acts twice. Before each trial it predicts the trial's footprint from what the trials so
far used (peak per-worker USS and main-process PSS from the probes) and skips the trial when it would take
free memory below the floor. While a trial runs, a watcher thread reads MemAvailable (and the cgroup
headroom) every 50 ms and kills the trial's process group when free memory, extrapolated at its current
rate of fall to the next check, would cross the floor. The 0.5 s probe tick alone is too slow: a worker
that touches pages at 5 GB/s eats 2.5 GB between ticks. The kernel's OOM killer must never be the one
to act; if it does anyway, `trial.procs.prefer_oom_kill` has made our trial processes its first choice.

Free memory is read by free_memory.py. Memory figures are MiB throughout ("MB" in names, as elsewhere).
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil

from loadertop.core.machine.free_memory import FreeMemory, cgroup_memory_limit_mb, free_mb
from loadertop.core.model.config import TrialConfig, UsageError
from loadertop.core.model.events import ProbeSample
from loadertop.core.model.figures import MB
from loadertop.core.model.results import TrialResult

GUARD_PERIOD_S = 0.05  # the watcher's check interval while a trial runs
KILL_LATENCY_S = 0.05  # from the decision to the kernel stopping the processes, counted in the projection
SHM_WARN_MB = 1024.0  # below this /dev/shm is a likely "Bus error" for multi-worker loaders
FD_RESERVE = 64  # descriptors the trial's main process holds besides the batches in flight

_UNITS = {"": None, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
_SHARE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")


# -- the floor ---------------------------------------------------------------------------------------------


def memory_total_mb() -> float:
    """The memory this job may use: RAM, or the cgroup limit when a container sets a smaller one."""
    ram = psutil.virtual_memory().total / MB
    limit = cgroup_memory_limit_mb()
    return min(ram, limit) if limit is not None else ram


def default_floor_mb(total_mb: float) -> float:
    """The larger of 10% of memory and 2 GiB; in a small container (under 8 GiB) at most a quarter of it,
    so that a 2 GiB container can still run anything at all."""
    return max(0.10 * total_mb, min(2048.0, 0.25 * total_mb))


def parse_mem_floor(text: str, total_mb: float) -> float:
    """`4GiB`, `512MiB`, `2G`, `10%` or `0` (guard off) into MiB; UsageError naming the problem otherwise.

    Sizes are binary: 4G, 4GB and 4GiB are all 4 × 2**30 bytes. An empty string is the default floor."""
    if not text.strip():
        return default_floor_mb(total_mb)
    if share := _SHARE.match(text):
        value = float(share.group(1))
        if value >= 100:
            raise UsageError(f"--mem-floor {text!r}: a share must be below 100%")
        return total_mb * value / 100
    size = _SIZE.match(text)
    if size is None:
        raise UsageError(f"--mem-floor {text!r}: expected a size such as 4GiB or 512MiB, or a share such as 10%")
    value, unit = float(size.group(1)), _UNITS[size.group(2).lower()]
    if unit is None:
        if value != 0:
            raise UsageError(f"--mem-floor {text!r}: give a unit (4GiB, 512MiB) or a share (10%)")
        return 0.0
    floor = value * unit / MB
    if floor >= total_mb:
        raise UsageError(f"--mem-floor {text!r}: at or above the {total_mb / 1024:.1f} GiB this job may use")
    return floor


# -- the memory guard ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrialMemory:
    """What the guard saw during one trial (MiB)."""

    free_before_mb: float
    lowest_mb: float
    floor_mb: float
    stopped: bool  # the guard killed the trial
    why: str = ""  # the reading that made it act

    def describe(self) -> str:
        return (
            f"stopped by the memory guard: {self.why}; free memory {self.free_before_mb:,.0f} MiB before the trial, "
            f"lowest seen {self.lowest_mb:,.0f} MiB, floor {self.floor_mb:,.0f} MiB (--mem-floor)"
        )


class MemoryGuard:
    """Predicts trial footprints, skips trials that would not fit, and stops trials that grow past the floor.

    `kill` is called (from the watcher or probe thread) to SIGKILL the running trial's process group.
    `read_free` returns free memory in MiB and `clock` the time in seconds; tests may pass their own.
    """

    def __init__(
        self,
        floor_mb: float,
        kill: Callable[[], None],
        *,
        read_free: Callable[[], float] | None = None,
        period: float = GUARD_PERIOD_S,
        clock: Callable[[], float] = time.monotonic,
        ranks: int = 1,
    ) -> None:
        self.floor_mb = floor_mb
        # With --ranks R every trial runs R copies of (main + workers); the probes list the other ranks' mains
        # beside the workers, so the per-worker peak may be a rank's main: an overestimate, on the safe side.
        self.ranks = ranks
        self._kill = kill
        self._read_free = read_free or FreeMemory()
        self._clock = clock
        self.period = period
        self._lock = threading.Lock()
        self._armed = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # the running trial
        self._index: int | None = None
        self._workers = 0
        self._free_before = 0.0
        self._lowest = 0.0
        self._last: tuple[float, float] | None = None  # (monotonic time, free MiB) where the rate was last taken
        self._rate = 0.0  # MiB/s free memory fell by, over the last period or more
        self._why: str | None = None
        self._main_peak: float | None = None
        self._worker_peak: float | None = None
        # learned from the trials so far
        self._main_no_workers: float | None = None  # main-process PSS with 0 workers (it does the loading)
        self._main_with_workers: float | None = None
        self._per_worker: float | None = None  # peak USS of one worker
        # A worker holds prefetch_factor batches in flight and builds one more: with the batch's size known, its
        # peak splits into a base and those batches, so a bigger batch or prefetch predicts a bigger worker.
        self._worker_base: float | None = None
        self._sample_mb: float | None = None  # MiB per sample of a batch (its tensors and arrays)
        self._config: TrialConfig | None = None
        self._batch_mb: float | None = None
        self._stopped_workers: list[int] = []  # worker counts of trials the guard stopped
        self._stopped_per_process = 0.0  # memory those trials took per process before they were stopped

    # -- the watcher thread --------------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is None and self.floor_mb > 0:
            self._thread = threading.Thread(target=self._watch, name="loadertop-memory-guard", daemon=True)
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._armed.set()
        if self._thread is not None:
            self._thread.join(1.0)

    def _watch(self) -> None:
        while not self._stop.is_set():
            if not self._armed.wait(0.5):
                continue
            with contextlib.suppress(Exception):  # a failed read must not end the watch
                self._check(self._read_free(), self._clock())
            self._stop.wait(self.period)

    # -- one trial -----------------------------------------------------------------------------------------

    def arm(self, index: int, config: TrialConfig) -> None:
        """A trial process exists: watch it until `disarm`."""
        free = self._read_free()
        with self._lock:
            self._index, self._workers, self._config, self._batch_mb = index, config.num_workers, config, None
            self._free_before = self._lowest = free
            self._last, self._rate, self._why = None, 0.0, None
            self._main_peak = self._worker_peak = None
        self._armed.set()

    def note_batch(self, mb: float | None) -> None:
        """The running trial's first batch holds `mb` MiB of tensors (the trial reports it with its first batch)."""
        with self._lock:
            self._batch_mb = mb if mb and mb > 0 else None

    @property
    def tripped(self) -> bool:
        return self._why is not None

    def disarm(self) -> TrialMemory | None:
        """The trial is over: learn from it and say what was seen (None when no trial was armed)."""
        self._armed.clear()
        with self._lock:
            if self._index is None:
                return None
            seen = TrialMemory(self._free_before, self._lowest, self.floor_mb, self._why is not None, self._why or "")
            if self._workers == 0:
                self._main_no_workers = _max(self._main_no_workers, self._main_peak)
            else:
                self._main_with_workers = _max(self._main_with_workers, self._main_peak)
                self._per_worker = _max(self._per_worker, self._worker_peak)
                config = self._config
                if self._batch_mb is not None and self._worker_peak is not None and config is not None:
                    in_flight = _in_flight(config) * self._batch_mb
                    self._worker_base = _max(self._worker_base, max(0.0, self._worker_peak - in_flight))
                    self._sample_mb = _max(self._sample_mb, self._batch_mb / config.batch_size)
            if seen.stopped:
                self._stopped_workers.append(self._workers)
                taken = max(0.0, seen.free_before_mb - seen.lowest_mb) / (self.ranks * (self._workers + 1))
                self._stopped_per_process = max(self._stopped_per_process, taken)
            self._index = None
        return seen

    def observe(self, sample: ProbeSample) -> None:
        """A probe tick: the same live check (cgroup included) and the peaks the predictions learn from."""
        if sample.index is None or sample.index != self._index:
            return
        self._check(free_mb(sample.mem_available_mb, sample.cgroup_mem_headroom_mb), self._clock())
        uss = [w.uss_mb for w in sample.workers if w.uss_mb is not None]
        with self._lock:
            if uss:
                self._worker_peak = _max(self._worker_peak, max(uss))
            if sample.total_pss_mb is not None and len(uss) == len(sample.workers):
                # Workers' PSS is at least their USS, so this slightly overstates the main process: safe side.
                self._main_peak = _max(self._main_peak, sample.total_pss_mb - sum(uss))

    def _check(self, free: float, now: float) -> None:
        with self._lock:
            if self._index is None:
                return
            self._lowest = min(self._lowest, free)
            # The rate is taken over at least one period: the guard's own poll and the probe's ticks can land
            # milliseconds apart, and a burst read over such a span (a worker filling 800 MiB: 37 GiB/s over a
            # few ms) projected over a whole period stopped a trial 2.5 GiB above its floor.
            if self._last is None:
                self._last = (now, free)
            elif now - self._last[0] >= self.period:
                self._rate = max(0.0, (self._last[1] - free) / (now - self._last[0]))
                self._last = (now, free)
            if self._why is not None or self.floor_mb <= 0:
                return
            rate = self._rate
            projected = free - rate * (self.period + KILL_LATENCY_S)
            if projected >= self.floor_mb:
                return
            if free < self.floor_mb:
                self._why = f"free memory fell to {free:,.0f} MiB"
            else:
                self._why = f"free memory {free:,.0f} MiB, falling {rate:,.0f} MiB/s, was about to cross the floor"
        self._kill()

    # -- before a trial -------------------------------------------------------------------------------------

    def learn(self, trial: TrialResult) -> None:
        """A trial measured earlier (a resumed run): its steady-window memory feeds the predictions."""
        if trial.status != "ok" or trial.total_pss_mb is None:
            return
        workers = sum(trial.worker_uss_mb)
        with self._lock:
            if trial.config.num_workers == 0:
                self._main_no_workers = _max(self._main_no_workers, trial.total_pss_mb)
            elif trial.worker_uss_mb:
                self._main_with_workers = _max(self._main_with_workers, trial.total_pss_mb - workers)
                self._per_worker = _max(self._per_worker, max(trial.worker_uss_mb))

    def predict_mb(self, config: TrialConfig) -> tuple[float, str] | None:
        """The trial's expected footprint and how it was reckoned; None before anything was measured."""
        n = config.num_workers
        with self._lock:
            main0, main_n, worker = self._main_no_workers, self._main_with_workers, self._per_worker
            base, sample = self._worker_base, self._sample_mb
            stopped = self._stopped_per_process
        if n == 0:
            if main0 is not None:
                need, how = main0, f"the main process took {main0:,.0f} MiB with 0 workers"
            elif main_n is not None and worker is not None:
                need, how = main_n + worker, "the main process plus one worker's load"
            else:
                need, how = 0.0, ""
        else:
            main = main_n if main_n is not None else main0
            # Before any trial with workers, a worker is assumed to hold what the lone main process held.
            per = worker if worker is not None else main0
            split = ""
            if base is not None and sample is not None:
                scaled = base + _in_flight(config) * sample * config.batch_size
                if per is None or abs(scaled - per) >= 1.0:  # another batch size or prefetch than measured: say how
                    split = f" ({base:,.0f} + {_in_flight(config)} batches of {sample * config.batch_size:,.1f} MiB)"
                per = scaled
            if main is None or per is None:
                need, how = 0.0, ""
            else:
                need, how = main + n * per, f"main {main:,.0f} MiB + {n} × {per:,.0f} MiB per worker{split}"
        if how and self.ranks > 1:
            need, how = self.ranks * need, f"{self.ranks} ranks × ({how})"
        processes = self.ranks * (n + 1)
        if stopped * processes > need:
            need, how = stopped * processes, f"{stopped:,.0f} MiB per process, as taken by a trial the guard stopped"
        return (need, how) if how else None

    def check_before(self, config: TrialConfig) -> str | None:
        """The reason to skip this trial, or None to run it."""
        if self.floor_mb <= 0:
            return None
        free = self._read_free()
        if free < self.floor_mb:
            return (
                f"memory guard: free memory {free:,.0f} MiB is already below the floor {self.floor_mb:,.0f} MiB "
                f"(--mem-floor)"
            )
        with self._lock:
            stopped = [n for n in self._stopped_workers if n <= config.num_workers]
        if stopped:
            return (
                f"memory guard: a trial with {min(stopped)} workers was stopped for memory; "
                f"{config.num_workers} workers would need more"
            )
        prediction = self.predict_mb(config)
        if prediction is not None and free - prediction[0] < self.floor_mb:
            need, how = prediction
            return (
                f"memory guard: predicted {need:,.0f} MiB ({how}) would leave {free - need:,.0f} of "
                f"{free:,.0f} MiB free, below the floor {self.floor_mb:,.0f} MiB (--mem-floor)"
            )
        return None


def _in_flight(config: TrialConfig) -> int:
    """Batches a worker holds at once: prefetch_factor queued and one being built."""
    return (config.prefetch_factor or 2) + 1


def _max(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else max(a, b)


# -- /dev/shm and open files ---------------------------------------------------------------------------------


def shm_problem(free: float | None, threshold: float = SHM_WARN_MB) -> str | None:
    """A warning when /dev/shm is small (Docker's default is 64 MB); None when it is fine or absent."""
    if free is None or free >= threshold:
        return None
    return (
        f"/dev/shm has only {free:,.0f} MiB free: DataLoader workers hand every batch over through it, and "
        f"when it fills they die with 'Bus error'. In Docker run with --shm-size=8g (or --ipc=host); "
        f"on Kubernetes mount an emptyDir with medium: Memory at /dev/shm"
    )


def shm_hint(error: str, free: float | None) -> str:
    """Append what /dev/shm looks like to a failure that smells of it (SIGBUS, 'shared memory')."""
    lowered = error.lower()
    if "bus error" not in lowered and "sigbus" not in lowered and "shared memory" not in lowered:
        return error
    where = "" if free is None else f", {free:,.0f} MiB free now"
    return f"{error} (/dev/shm is where workers put batches{where}; a full /dev/shm kills them with SIGBUS)"


def open_files_limit() -> int | None:
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY else int(soft)


def fd_problem(config: TrialConfig, files_per_sample: int, limit: int | None) -> str | None:
    """Warn when the batches in flight could hold more descriptors than `ulimit -n` allows.

    With torch's default `file_descriptor` sharing strategy every shared tensor in flight is an open file
    in the main process; in the worst case (a collate that keeps per-sample tensors, or a dataset that
    returns open files) that is workers × prefetch × batch size × files per sample."""
    if limit is None or config.num_workers == 0:
        return None
    prefetch = config.prefetch_factor or 2
    need = config.num_workers * prefetch * config.batch_size * files_per_sample
    if need + FD_RESERVE <= limit:
        return None
    return (
        f"{config.label()}: up to {config.num_workers} × {prefetch} × {config.batch_size} × {files_per_sample} = "
        f"{need:,} open files in flight could pass ulimit -n {limit:,}, and workers would fail with "
        f"'Too many open files'; raise it (ulimit -n {max(need * 2, 65536)}) or call "
        f"torch.multiprocessing.set_sharing_strategy('file_system')"
    )
