"""One trial as the driver sees it, from its request to its exit: each kind of runner message in its own method, and
the TrialResult built from the Finished message in one place.

The sweep is the watch's host (`TrialHost`): it owns the trial's process group (pause, resume, kill), the memory
guard, the probes and the window (the steady part of the trial the probes summarise); events go to `emit`.
"""

from __future__ import annotations

import queue
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

from loadertop.core.engine.drive.runner_link import RunnerProcess as RunnerLink
from loadertop.core.engine.drive.runner_link import log_tail
from loadertop.core.engine.verdict.memory import live_figures, window_figures
from loadertop.core.machine.facts import shm_free_mb
from loadertop.core.machine.guards import TrialMemory, shm_hint
from loadertop.core.machine.probes import measured_pids, summarize_window
from loadertop.core.model.config import TrialConfig
from loadertop.core.model.events import Event, Notice, ProbeSample, TrialLaunched, TrialProgress, TrialStarted
from loadertop.core.model.figures import median_of, per_epoch
from loadertop.core.model.protocol import (
    Block,
    Epoch,
    Exited,
    Failed,
    Finished,
    Forked,
    Measuring,
    Reply,
    Started,
    TrialNotice,
    Workers,
)
from loadertop.core.model.results import TrialResult

# What a signal that killed the trial's main process most likely means (the memory guard names itself).
_SIGNAL_HINTS: dict[int, str] = {  # keyed by Signals, looked up by the int the runner reports
    signal.SIGKILL: " (not by loadertop: the kernel's OOM killer, or another user?)",
    signal.SIGSEGV: " (a crash in native code, such as a C extension the dataset uses; Python stack in runner.log)",
}  # SIGBUS gets the /dev/shm hint that every failure mentioning it gets

# After our SIGKILL the runner reaps the trial and says so within about a second (it waits up to 1 s for stragglers).
# Past this, the runner itself is stuck: the trial is given up and the driver starts a fresh runner.
EXIT_GRACE_S = 10.0


class TrialHost(Protocol):
    """What a trial needs from its sweep."""

    def launched(self, index: int, config: TrialConfig, pid: int) -> None: ...  # its group is known: arm, follow
    def follow(self, index: int, pid: int | None, pids: tuple[int, ...]) -> None: ...  # the probes watch these
    def note_batch(self, batch_mb: float) -> None: ...  # the memory guard learns what a batch in flight holds
    def window_open(self) -> bool: ...
    def open_window(self) -> None: ...
    def freeze_window(self) -> None: ...


class TrialWatch:
    """The runner's messages about one trial, one method per kind (`handle` dispatches on the message's class)."""

    def __init__(
        self, host: TrialHost, emit: Callable[[Event], None], index: int, total: int, config: TrialConfig
    ) -> None:
        self.host = host
        self.emit = emit  # the sweep's event stream
        self.index = index
        self.total = total  # trials planned so far, this one included
        self.config = config
        self.pid: int | None = None
        self.worker_pids: tuple[int, ...] = ()
        self.rank_pids: tuple[int, ...] = ()  # --ranks: the other ranks' main processes
        self.finished: Finished | None = None
        self.error: str | None = None
        self.raised: str | None = None  # what the trial's own code raised (its Failed message), if it did
        self.exited = False
        self.killed_at: float | None = None  # when hung() had the trial killed
        self.abandoned = False  # the runner never reported the killed trial's exit: it must be replaced
        self.last_what = "starting"  # what the trial did last, for the message when it hangs
        self.last_activity = time.monotonic()
        self.rates: list[float] = []  # the blocks' samples/s so far, for the running median the faces show

    # -- the loop's side ------------------------------------------------------------------------------------------

    def follow(
        self,
        runner: RunnerLink,
        timeout: float,
        cancelled: threading.Event,
        resumed: threading.Event,
        kill: Callable[[], None],
    ) -> bool:
        """Handle the runner's messages until the trial exits; False when cancelled. A paused trial is not hung;
        one silent past `timeout` is killed (`kill`: SIGKILL to its process group), and if the runner then never
        reports its exit, the trial is given up (`abandoned`) rather than waited for forever."""
        while not self.exited:
            if cancelled.is_set():
                runner.drain_until_exit()
                return False
            if not resumed.is_set():
                self.touch()
            elif self.hung(timeout):
                kill()
            elif self.unanswered():
                return True
            try:
                message = runner.get(timeout=0.1)
            except queue.Empty:
                continue
            if message is None:
                self.runner_died(log_tail(runner.log_path))
            else:
                self.handle(message)
        return True

    def touch(self) -> None:
        """A frozen trial is not a hung one: paused time does not count towards --trial-timeout."""
        self.last_activity = time.monotonic()

    def hung(self, timeout: float) -> bool:
        """True once, when no message came for `timeout` seconds: the trial is hung, to be killed. Its error is set
        unless it already said why it failed (a trial that sent Failed and then never exited is killed too)."""
        if self.killed_at is not None or time.monotonic() - self.last_activity <= timeout:
            return False
        self.killed_at = time.monotonic()
        self.error = self.error or f"no batch for {timeout:.0f} s (last: {self.last_what})"
        return True

    def unanswered(self) -> bool:
        """True once the trial was killed EXIT_GRACE_S ago and the runner has still not reported its exit."""
        if self.killed_at is None or time.monotonic() - self.killed_at <= EXIT_GRACE_S:
            return False
        self.abandoned = True
        self.error = f"{self.error}; the runner did not report its exit {EXIT_GRACE_S:.0f} s after SIGKILL"
        return True

    def with_figures(self, sample: ProbeSample, window: list[ProbeSample]) -> ProbeSample:
        """A probe tick of this trial, with the engine's figures for its own workers (engine/verdict/memory.py);
        called on the probe thread, with the window so far (frozen once the trial finished)."""
        if self.finished is not None:  # the window is closed: the figures its result will carry
            return replace(sample, uss=window_figures(window, measured_pids(window, self.worker_pids)))
        return replace(sample, uss=live_figures(sample, list(window), self.worker_pids))

    def runner_died(self, tail: str) -> None:
        self.error = self.error or f"the runner died: {tail}"
        self.exited = True

    def handle(self, message: Reply) -> None:
        self.last_activity = time.monotonic()
        if isinstance(message, Measuring) or (isinstance(message, Block) and not self.host.window_open()):
            # The window opens with the first measured block (again, when the trial finds its epochs short and
            # starts over with blocks of whole epochs).
            self.host.open_window()
        handler = _HANDLERS.get(type(message))
        if handler is not None:  # anything else (a Measuring) says nothing more
            handler(self, message)

    # -- one method per message kind ------------------------------------------------------------------------------

    def _forked(self, message: Forked) -> None:
        self.pid = message.pid
        self.host.launched(self.index, self.config, message.pid)
        self.emit(TrialLaunched(self.index, self.total, self.config, message.pid))

    def _workers(self, message: Workers) -> None:
        self._set_pids(message.worker_pids, message.rank_pids)
        self.last_what = f"started {len(self.worker_pids)} workers" if self.worker_pids else "built the loader"

    def _started(self, message: Started) -> None:
        self._set_pids(message.worker_pids, message.rank_pids)
        self.last_what = "got the first batch"
        self.host.note_batch(message.batch_mb)
        assert self.pid is not None
        self.emit(TrialStarted(self.index, self.total, self.config, self.pid, self.worker_pids, message.first_batch_s))

    def _block(self, message: Block) -> None:
        self.last_what = f"measured block {message.block}"
        if message.block <= len(self.rates):  # the trial started its blocks over (blocks of whole epochs)
            self.rates.clear()
        self.rates.append(message.samples_per_s)
        self.emit(
            TrialProgress(
                self.index,
                message.block,
                message.batches_per_s,
                message.samples_per_s,
                message.stall_fraction,
                message.elapsed_s,
                message.spread,
                median_of(self.rates),
            )
        )

    def _finished(self, message: Finished) -> None:
        self.finished = message
        self.host.freeze_window()

    def _epoch(self, message: Epoch) -> None:
        if self.finished is not None and message.epoch_restart_s is not None:  # measured after the window
            self.finished = with_boundary(self.finished, message.epoch_restart_s)

    def _notice(self, message: TrialNotice) -> None:
        self.emit(Notice(message.level, message.message, self.index))

    def _failed(self, message: Failed) -> None:
        self.error = self.error or message.error
        self.raised = message.error if message.data else None

    def _exited(self, message: Exited) -> None:
        self.exited = True
        if self.finished is not None or self.error is not None:
            return
        if message.parked:
            self.error = "trial parked its workers without a measurement"
            return
        if message.signal:
            self.error = f"trial process killed by {signal_name(message.signal)}"
            self.error += _SIGNAL_HINTS.get(message.signal, "")
        else:
            self.error = f"trial process exited with code {message.returncode}"

    def _set_pids(self, worker_pids: tuple[int, ...], rank_pids: tuple[int, ...]) -> None:
        self.worker_pids, self.rank_pids = worker_pids, rank_pids
        self.host.follow(self.index, self.pid, rank_pids + worker_pids)

    # -- the outcome ----------------------------------------------------------------------------------------------

    def result(self, memory: TrialMemory | None, window: list[ProbeSample]) -> TrialResult:
        """The trial's result: failed with the most telling reason, or measured from Finished and the window."""
        error = self.error
        if memory is not None and memory.stopped:
            if self.finished is None:
                error = memory.describe()  # whatever the dying trial said, this is why it died
            else:
                self.emit(
                    Notice("warning", f"after trial {self.index + 1} had finished, {memory.describe()}", self.index)
                )
        if error is not None:
            error = shm_hint(error, shm_free_mb())
        if self.finished is None or error is not None:
            return TrialResult(self.index, self.config, "failed", error=error or "unknown failure")
        return measured(self.index, self.config, self.finished, window, self.worker_pids)


def with_boundary(finished: Finished, boundary_s: float) -> Finished:
    """The trial's figures as a training loop over whole epochs reads them: blocks inside one epoch leave the
    boundary out, and training pays it once an epoch (figures.per_epoch); blocks of whole epochs have it already."""
    finished = replace(finished, epoch_restart_s=boundary_s)
    if finished.whole_epochs or not finished.epoch_batches or not finished.batches_per_s:
        return finished
    share = per_epoch(finished.batches_per_s, finished.epoch_batches, boundary_s) / finished.batches_per_s
    return replace(
        finished,
        batches_per_s=finished.batches_per_s * share,
        samples_per_s=finished.samples_per_s * share,
        rank_samples_per_s=tuple(x * share for x in finished.rank_samples_per_s),  # each rank pays it too
    )


def measured(
    index: int, config: TrialConfig, finished: Finished, window: list[ProbeSample], worker_pids: tuple[int, ...]
) -> TrialResult:
    """The one place a Finished message becomes a TrialResult (with the probes' summary of the window)."""
    stats = summarize_window(window, worker_pids)
    figures = window_figures(window, stats.worker_pids)  # the same judgement the faces showed live
    return TrialResult(
        index=index,
        config=config,
        status="ok",
        samples_per_s=finished.samples_per_s,
        batches_per_s=finished.batches_per_s,
        spread=finished.spread,
        first_batch_s=finished.first_batch_s,
        workers_start_s=finished.workers_start_s,
        stall_fraction=finished.stall_fraction,
        worker_uss_mb=stats.worker_uss_mb,
        worker_uss_slope_mb_per_min=tuple(w.slope_mb_per_min for w in figures.workers),
        worker_uss_climbing=tuple(w.climbing for w in figures.workers),
        leak=figures.leak,
        total_pss_mb=stats.total_pss_mb,
        parked_beside=stats.parked_beside,
        rss_mb=stats.rss_mb,
        cpu_percent=stats.cpu_percent,
        main_cpu_percent=stats.main_cpu_percent,
        worker_processes=len(worker_pids),
        machine_cpu_percent=stats.machine_cpu_percent,
        gpu_util=stats.gpu_util,
        gpu_mem_mb=stats.gpu_mem_mb,
        blocks=finished.blocks,
        measured_s=finished.measured_s,
        warmup_batches=finished.warmup_batches,
        stable=finished.stable,
        decided=finished.decided,
        warm=finished.warm,
        epoch_restart_s=finished.epoch_restart_s,
        epoch_batches=finished.epoch_batches,
        ranks=finished.ranks,
        rank_samples_per_s=finished.rank_samples_per_s,
        warnings=finished.warnings,
        wait_ms_p50=finished.wait_ms_p50,
        wait_ms_p95=finished.wait_ms_p95,
        wait_ms_p99=finished.wait_ms_p99,
        boundary_wait_ms=finished.boundary_wait_ms,
        rank_wait_ms_p99=finished.rank_wait_ms_p99,
        main_threads=finished.main_threads,
    )


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


_HANDLERS: dict[type[Any], Callable[[TrialWatch, Any], None]] = {
    Forked: TrialWatch._forked,
    Workers: TrialWatch._workers,
    Started: TrialWatch._started,
    Block: TrialWatch._block,
    Finished: TrialWatch._finished,
    Epoch: TrialWatch._epoch,
    TrialNotice: TrialWatch._notice,
    Failed: TrialWatch._failed,
    Exited: TrialWatch._exited,
}
