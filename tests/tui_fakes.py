"""A deterministic sweep for the TUI tests: the same events every run, and it honours cancel, stop and
pause the way the engine promises, so pressing those keys in a test means something.

Seven trials (0,1,2,3,4,6,8 workers) on a 2-CPU machine with a knee at 4; 8 workers fails (/dev/shm);
the last worker of each trial grows its USS steadily; `repeat` measures some worker counts again at the end, as
the engine repeats its finalists. A row rerun (`only` with `previous`) ends with the whole merged result, as the
engine's does. Each trial's workers exit before its TrialFinished: a late probe tick then sees none. Sweep time
advances 1.5 s per block, not wall time, so what the screen shows does not depend on how fast the machine is.
"""

from __future__ import annotations

import asyncio
import functools
import math
import statistics
import threading
import time
from collections.abc import Callable, Coroutine, Generator, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ParamSpec

from textual.pilot import Pilot

from loadertop.core.engine.verdict.memory import live_figures, window_figures
from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.events import (
    Event,
    GpuSample,
    Notice,
    ProbeSample,
    SweepFinished,
    SweepStarted,
    TrialFinished,
    TrialLaunched,
    TrialProgress,
    TrialStarted,
    UssFigures,
    WorkerSample,
)
from loadertop.core.model.results import GpuInfo, Knee, MachineInfo, Recommendation, SweepResult, TrialResult
from loadertop.faces.tui.state import SweepState

WORKERS = (0, 1, 2, 3, 4, 6, 8)
SETTINGS = Settings(workers=WORKERS, batch_sizes=(32,), start_methods=("fork",), trial_seconds=8.0)
BASE_SPS = {0: 820.0, 1: 1540.0, 2: 2710.0, 3: 3590.0, 4: 4310.0, 6: 4380.0, 8: 4400.0, 12: 4390.0, 16: 4350.0}
FAILS = {8: "RuntimeError: DataLoader worker (pid 10805) is killed by signal: Bus error (/dev/shm too small?)"}
BLOCKS = 8
BLOCK_T = 1.5  # sweep seconds per block
KNEE = 4

NO_GPU_MACHINE = MachineInfo(
    hostname="testbox",
    platform="Linux-6.8-x86_64",
    python="3.11.9",
    torch="2.4.0",
    logical_cpus=2,
    usable_cpus=2,
    cpu_quota=None,
    mem_total_mb=7936.0,
    mem_available_mb=5120.0,
    cgroup_mem_headroom_mb=None,
    shm_free_mb=3968.0,
    default_start_method="fork",
    gpus=(),
    gpu_unavailable="NVML library not found",
)

GPU_MACHINE = replace(
    NO_GPU_MACHINE,
    hostname="gpubox",
    gpus=(GpuInfo(0, "NVIDIA A100-SXM4-40GB", 40960.0), GpuInfo(1, "NVIDIA A100-SXM4-40GB", 40960.0)),
    gpu_unavailable=None,
)


def snippet(config: TrialConfig) -> str:
    return (
        f"DataLoader(dataset, batch_size={config.batch_size}, num_workers={config.num_workers}, "
        f"prefetch_factor={config.prefetch_factor}, multiprocessing_context='{config.start_method}')"
    )


class FakeSweep:
    def __init__(
        self,
        settings: Settings,
        previous: SweepResult | None,
        only: Sequence[TrialConfig] | None,
        *,
        machine: MachineInfo,
        run_dir: Path,
        factor: float = 1.0,
        hold_at: int | None = None,
        event_delay: float = 0.0,
        repeat: tuple[int, ...] = (),
    ) -> None:
        self.settings = settings
        self.repeat = repeat
        self.previous = previous
        self.only = list(only) if only else None
        self.machine = machine
        self.run_dir = run_dir
        self.factor = factor  # a rerun pretends the user's dataset change made it faster
        self.hold_at = hold_at  # hold before this trial's TrialFinished until release() or cancel()
        self.event_delay = event_delay
        self.result: SweepResult | None = None
        self.calls: list[str] = []
        self.started = threading.Event()
        self.held = threading.Event()  # set while holding at `hold_at`
        self._cancel = threading.Event()
        self._stop = threading.Event()
        self._release = threading.Event()
        self._running = threading.Event()
        self._running.set()

    # ---- the control surface the app uses --------------------------------------------------------

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    def cancel(self) -> None:
        self.calls.append("cancel")
        self._cancel.set()
        self._running.set()

    def stop_after_current(self) -> None:
        self.calls.append("stop")
        self._stop.set()

    def pause(self) -> None:
        self.calls.append("pause")
        self._running.clear()

    def resume(self) -> None:
        self.calls.append("resume")
        self._running.set()

    def release(self) -> None:
        """Tests: let a sweep held at `hold_at` go on."""
        self._release.set()

    # ---- the stream ------------------------------------------------------------------------------

    def _gate(self) -> bool:
        """Wait while paused; False once cancelled."""
        while not self._running.wait(0.02):
            pass
        if self.event_delay:
            time.sleep(self.event_delay)
        return not self._cancel.is_set()

    def events(self) -> Iterator[Event]:
        self.started.set()
        configs = self.only or self.settings.trial_configs()
        configs = [*configs, *(c for n in self.repeat for c in configs if c.num_workers == n)]
        yield SweepStarted(str(self.run_dir), self.machine, self.settings, tuple(configs), self.previous)
        t = 0.0
        done: list[TrialResult] = []
        for index, config in enumerate(configs):
            if not self._gate():
                break
            if config.num_workers in FAILS:
                yield Notice("warning", "/dev/shm has 3.9 GB free: 8 workers may not fit", index)
            t += 0.8
            trial, t = yield from self._trial(index, len(configs), config, t)
            if trial is None:
                break
            done.append(trial)
            yield self._late_probe(index, t)  # the probes' tick after the workers exited: smaller, and stale
            yield TrialFinished(trial)
            yield self._late_probe(index, t)
            if self._stop.is_set():
                break
        interrupted = self._cancel.is_set() or self._stop.is_set()
        self.result = self._result(done, interrupted, t)
        yield SweepFinished(self.result)

    def _trial(
        self, index: int, total: int, config: TrialConfig, t: float
    ) -> Generator[Event, None, tuple[TrialResult | None, float]]:
        nw = config.num_workers
        pid = 10000 + 100 * index
        wpids = tuple(pid + k + 1 for k in range(nw))
        first = 0.12 + 0.05 * nw
        yield TrialLaunched(index, total, config, pid)
        yield TrialStarted(index, total, config, pid, wpids, first)
        if nw in FAILS:
            return TrialResult(index, config, "failed", error=FAILS[nw], first_batch_s=first), t
        sps = BASE_SPS.get(nw, 4300.0) * self.factor * (config.batch_size / 32) ** 0.3
        stall = max(0.02, 1.0 - sps / (4400.0 * self.factor))
        start_t = t
        uss: tuple[float, ...] = ()
        window: list[ProbeSample] = []
        rates: list[float] = []
        for block in range(BLOCKS):
            if not self._gate():
                return None, t
            t += BLOCK_T
            since = t - start_t
            uss = tuple(140.0 + 3.0 * k + since * (2.0 if k == nw - 1 else 0.01) for k in range(nw))
            window.append(self._probe(index, t, config, wpids, uss, stall))
            yield replace(window[-1], uss=live_figures(window[-1], window, wpids))  # as the engine's driver does
            wiggle = 1.0 + 0.03 * math.sin(1.7 * block + nw)
            rates.append(sps * wiggle)
            yield TrialProgress(
                index=index,
                block=block,
                batches_per_s=sps * wiggle / config.batch_size,
                samples_per_s=sps * wiggle,
                stall_fraction=stall,
                elapsed_s=since + first,
                spread=0.021 + 0.002 * nw if block >= 2 else None,
                median_samples_per_s=statistics.median(rates),  # as the engine's trial watch says it
            )
        if index == self.hold_at:
            self.held.set()
            while not (self._release.wait(0.02) or self._cancel.is_set()):
                pass
            self.held.clear()
            if self._cancel.is_set():
                return None, t
        return self._ok(index, config, sps, stall, first, uss, window_figures(window, wpids)), t

    def _ok(
        self,
        index: int,
        config: TrialConfig,
        sps: float,
        stall: float,
        first: float,
        uss: tuple[float, ...],
        figures: UssFigures,
    ) -> TrialResult:
        nw = config.num_workers
        pss, rss = self._memory(nw, uss)
        return TrialResult(
            index=index,
            config=config,
            status="ok",
            samples_per_s=sps,
            batches_per_s=sps / config.batch_size,
            spread=0.021 + 0.002 * nw,
            first_batch_s=first,
            stall_fraction=stall,
            worker_uss_mb=uss,
            worker_uss_slope_mb_per_min=tuple(w.slope_mb_per_min for w in figures.workers),  # 120.0 and 0.6 MB/min
            worker_uss_climbing=tuple(w.climbing for w in figures.workers),
            leak=figures.leak,
            total_pss_mb=pss,
            rss_mb=rss,
            cpu_percent=min(200.0, 60.0 + 45.0 * nw),
            main_cpu_percent=60.0,
            gpu_util=self._gpu_util(stall, 0) if self.machine.gpus else None,
            gpu_mem_mb=2100.0 if self.machine.gpus else None,
            blocks=BLOCKS,
            measured_s=BLOCKS * BLOCK_T,
            warmup_batches=(config.prefetch_factor or 0) * nw + nw,
            stable=nw != 1,
            # the mean wait per batch as median, and a tail that grows with the stall
            wait_ms_p50=round(1000.0 * config.batch_size / sps * stall, 1),
            wait_ms_p99=round(1000.0 * config.batch_size / sps * (stall * 4 + 0.5), 1),
        )

    @staticmethod
    def _memory(nw: int, uss: tuple[float, ...]) -> tuple[float, float]:
        pss = 420.0 + sum(uss) + 30.0 * nw
        rss = 900.0 + sum(u + 600.0 for u in uss)  # counts the pages shared with the parent once per worker
        return pss, rss

    @staticmethod
    def _gpu_util(stall: float, gpu: int) -> float:
        return round(95.0 * (1.0 - stall) * (1.0 - 0.1 * gpu), 1)

    def _probe(
        self, index: int, t: float, config: TrialConfig, wpids: tuple[int, ...], uss: tuple[float, ...], stall: float
    ) -> ProbeSample:
        nw = config.num_workers
        pss, rss = self._memory(nw, uss)
        workers = tuple(WorkerSample(p, u + 600.0, 90.0, u) for p, u in zip(wpids, uss, strict=True))
        gpus = tuple(GpuSample(g.index, self._gpu_util(stall, g.index), 2100.0) for g in self.machine.gpus)
        return ProbeSample(
            index=index,
            t=t,
            workers=workers,
            main_rss_mb=900.0,
            main_cpu_percent=60.0,
            total_pss_mb=pss,
            rss_mb=rss,
            cpu_percent=min(200.0, 60.0 + 45.0 * nw),
            mem_available_mb=5120.0 - pss,
            cgroup_mem_headroom_mb=None,
            shm_free_mb=3968.0,
            gpus=gpus,
            gpu_unavailable=self.machine.gpu_unavailable,
        )

    @staticmethod
    def _late_probe(index: int, t: float) -> ProbeSample:
        return ProbeSample(index, t + 0.1, (), 60.0, 0.0, 60.0, 60.0, 0.0, 5000.0, None, 3968.0)

    def _result(self, done: list[TrialResult], interrupted: bool, t: float) -> SweepResult:
        knee = rec = None
        settings = self.settings
        if self.only and self.previous is not None:  # the engine merges a row rerun into the run it reruns
            again = {r.config for r in done}
            done = [*(r for r in self.previous.trials if r.config not in again), *done]
            settings = self.previous.settings
        best = next((r for r in done if r.config.num_workers == KNEE and r.status == "ok"), None)
        if best is not None and not interrupted:
            knee = Knee(KNEE, "kneedle", "within 5% of the best throughput from 4 workers on")
            rec = Recommendation(
                config=best.config,
                samples_per_s=best.samples_per_s or 0.0,
                reason="CPU-bound: both usable cores busy from 4 workers on; more workers only add memory.",
                snippet=snippet(best.config),
                trial_index=best.index,
            )
        return SweepResult(
            machine=self.machine,
            settings=settings,
            trials=tuple(done),
            knee=knee,
            recommendation=rec,
            run_dir=str(self.run_dir),
            interrupted=interrupted,
            wall_s=t,
        )


class FakeSweepFactory:
    """The app's `sweep_factory`: records what it was asked for; each later sweep is 8% faster."""

    def __init__(
        self,
        root: Path,
        *,
        machine: MachineInfo = NO_GPU_MACHINE,
        hold_at: int | None = None,
        event_delay: float = 0.0,
        repeat: tuple[int, ...] = (),
    ) -> None:
        self.root = root
        self.repeat = repeat
        self.machine = machine
        self.hold_at = hold_at
        self.event_delay = event_delay
        self.sweeps: list[FakeSweep] = []
        self.calls: list[tuple[Settings, SweepResult | None, list[TrialConfig] | None]] = []

    def __call__(
        self, settings: Settings, previous: SweepResult | None, only: Sequence[TrialConfig] | None
    ) -> FakeSweep:
        n = len(self.sweeps)
        run_dir = self.root / f"run-{n + 1:03d}"
        run_dir.mkdir(parents=True, exist_ok=True)
        self.calls.append((settings, previous, list(only) if only else None))
        sweep = FakeSweep(
            settings,
            previous,
            only,
            machine=self.machine,
            run_dir=run_dir,
            factor=1.0 + 0.08 * n,
            hold_at=self.hold_at if n == 0 else None,
            event_delay=self.event_delay,
            repeat=self.repeat if n == 0 else (),
        )
        self.sweeps.append(sweep)
        return sweep

    @property
    def last(self) -> FakeSweep:
        return self.sweeps[-1]


async def wait_until(pilot: Pilot, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    """Let the app process messages until `predicate()` holds (the fake runs in a thread)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {predicate}")
        await pilot.pause(0.01)
    await pilot.pause()


P = ParamSpec("P")


def sync(test: Callable[P, Coroutine[Any, Any, None]]) -> Callable[P, None]:
    """Run an async test in its own event loop (no pytest-asyncio here); fixtures still resolve."""

    @functools.wraps(test)
    def run(*args: P.args, **kwargs: P.kwargs) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


def change_of(state: SweepState, index: int) -> float | None:
    """Δ as the results table shows it: from the engine's report, not a formula of the TUI's."""
    report = state.report()
    row = report.row_for(state.rows[index].config) if report is not None else None
    return row.change if row is not None else None


def knee_rows(state: SweepState) -> list[TrialConfig]:
    report = state.report()
    return [row.config for row in report.rows if row.knee] if report is not None else []


def cell(table: Any, row: int, key: str) -> str:
    """A results-table cell by its column key (the report's), not by position."""
    keys = [str(column.key.value) for column in table.ordered_columns]
    return str(table.get_row_at(row)[keys.index(key)])
