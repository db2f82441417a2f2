"""The driver: runs the planned trials through one runner process and turns its lines into events.

    sweep = Sweep(settings)
    for event in sweep.events():   # blocking; ends after SweepFinished
        ...

The driver thread and the probes thread both feed one queue; `events()` drains it in order. Control
methods (`cancel`, `stop_after_current`, `pause`, `resume`) are safe to call from any thread.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from loadertop.core.engine.ceilings import describe as describe_ceilings
from loadertop.core.engine.ceilings import measure_ceilings
from loadertop.core.engine.outcome import conclude
from loadertop.core.engine.runfolder import LOG, SETTINGS, append_trial, new_run_dir, write_json, write_result
from loadertop.core.engine.search import make_planner
from loadertop.core.machine.facts import machine_info, shm_free_mb
from loadertop.core.machine.gpu import GpuProbe
from loadertop.core.machine.guards import (
    MemoryGuard,
    fd_problem,
    memory_total_mb,
    open_files_limit,
    parse_mem_floor,
    shm_hint,
    shm_problem,
)
from loadertop.core.machine.probes import Probes, summarize_window
from loadertop.core.model.config import Settings, TrialConfig, UsageError
from loadertop.core.model.events import (
    Event,
    Notice,
    ProbeSample,
    SweepFinished,
    SweepStarted,
    TrialFinished,
    TrialProgress,
    TrialStarted,
)
from loadertop.core.model.results import Ceiling, MachineInfo, SweepResult, TrialResult

RUNNER_START_TIMEOUT = 120.0  # importing torch on a cold, busy machine can take a while
# What a signal that killed the trial's main process most likely means (the memory guard names itself).
_SIGNAL_HINTS = {
    signal.SIGKILL: " (not by loadertop: the kernel's OOM killer, or another user?)",
    signal.SIGSEGV: " (a crash in native code, such as a C extension the dataset uses; Python stack in runner.log)",
}  # SIGBUS gets the /dev/shm hint that every failure mentioning it gets


class _Cancelled(Exception):
    pass


class RunnerProcess:
    """The exec'd runner: one per sweep, in its own session so terminal signals never reach workers."""

    def __init__(self, log_path: Path) -> None:
        self._log = open(log_path, "ab")  # noqa: SIM115 (lives as long as the runner)
        # The runner imports what the caller can import (as multiprocessing's spawn does with sys.path).
        path = os.pathsep.join(p for p in [*sys.path, os.environ.get("PYTHONPATH", "")] if p)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "loadertop.core.trial.runner"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            start_new_session=True,
            env=env,
        )
        self.lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, name="loadertop-runner-reader", daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                self.lines.put(json.loads(raw))
            except ValueError:
                continue
        self.lines.put(None)  # EOF: the runner is gone

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()

    def close(self, grace: float = 1.0) -> None:
        """Closing stdin tells the runner to kill any running trial and exit; SIGKILL if it dawdles."""
        with contextlib.suppress(OSError):
            if self.proc.stdin:
                self.proc.stdin.close()
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._log.close()


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def log_tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text[-lines:])


class Sweep:
    def __init__(
        self,
        settings: Settings,
        *,
        out_dir: Path | None = None,
        previous: SweepResult | None = None,
        only: Sequence[TrialConfig] | None = None,
        gpu: GpuProbe | None = None,
        resume: Sequence[TrialResult] = (),
    ) -> None:
        self.settings = settings
        self.previous = previous
        self.planner = make_planner(settings, only)
        if not self.planner.planned():
            raise UsageError("the sweep has no configurations to run")
        # Trials finished in a run being resumed: reused when the planner asks for their configuration.
        self._kept = {t.config: t for t in resume if t.status in ("ok", "failed")}
        # 0-worker combinations the DataLoader rejects: reported as skipped at the end, never run.
        self._skipped = [] if only else settings.skipped_configs()
        self._iterable = False  # the dataset is an IterableDataset (from the runner's check)
        self.checked = threading.Event()  # set once the dataset spec loaded: faces may hold output until then
        self._fd_warned = False
        self.guard = MemoryGuard(
            parse_mem_floor(settings.mem_floor, memory_total_mb()), self._guard_kill, ranks=settings.ranks
        )
        self.run_dir = new_run_dir(out_dir)
        write_json(self.run_dir / SETTINGS, settings.to_dict())
        self.result: SweepResult | None = None
        self._ceilings: tuple[Ceiling, ...] = ()
        self._gpu = gpu
        self._queue: queue.Queue[Event | BaseException] = queue.Queue()
        self._cancel = threading.Event()
        self._stop_after = threading.Event()
        self._resumed = threading.Event()
        self._resumed.set()
        self._lock = threading.Lock()
        self._trial_pgid: int | None = None
        self._thread: threading.Thread | None = None
        self._window: list[ProbeSample] | None = None
        self._window_index: int | None = None
        self._probes: Probes | None = None

    @property
    def planned(self) -> tuple[TrialConfig, ...]:
        return self.planner.planned()

    # -- control (any thread) ---------------------------------------------------------------------------

    @property
    def paused(self) -> bool:
        return not self._resumed.is_set()

    def cancel(self) -> None:
        """Stop now: the running trial's process group is killed; finished trials are kept."""
        self._cancel.set()
        self._resumed.set()
        self._signal_trial(signal.SIGKILL)

    def stop_after_current(self) -> None:
        self._stop_after.set()

    def pause(self) -> None:
        with self._lock:
            if self._resumed.is_set():
                self._resumed.clear()
                self._signal_trial(signal.SIGSTOP)

    def resume(self) -> None:
        with self._lock:
            if not self._resumed.is_set():
                self._signal_trial(signal.SIGCONT)
                self._resumed.set()

    def _signal_trial(self, sig: int) -> None:
        pgid = self._trial_pgid
        if pgid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)

    def _guard_kill(self) -> None:
        """The memory guard's verdict (watcher or probe thread): the whole trial group goes at once."""
        self._signal_trial(signal.SIGKILL)

    # -- the stream -------------------------------------------------------------------------------------

    def events(self) -> Iterator[Event]:
        """Start the sweep (once) and yield its events. Raises UsageError for a bad dataset spec."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._drive_safely, name="loadertop-driver", daemon=True)
            self._thread.start()
        finished = False
        try:
            while True:
                item = self._queue.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
                if isinstance(item, SweepFinished):
                    finished = True
                    return
        finally:
            if not finished:  # the consumer walked away (or we raised): leave nothing running
                self.cancel()
                self._thread.join(3)

    def run(self) -> SweepResult:
        """Run to the end without looking at events; returns the result."""
        for _ in self.events():
            pass
        assert self.result is not None
        return self.result

    def _emit(self, event: Event) -> None:
        self._queue.put(event)

    def _on_probe(self, sample: ProbeSample) -> None:
        self.guard.observe(sample)  # the live check (cgroup headroom included); kills the trial below the floor
        window = self._window
        if window is not None and sample.index == self._window_index:
            window.append(sample)
        self._emit(sample)

    # -- the driver thread ------------------------------------------------------------------------------

    def _drive_safely(self) -> None:
        try:
            self._drive()
        except BaseException as exc:  # a bug or a bad spec: hand it to the consumer, never die silently
            import traceback

            with open(self.run_dir / LOG, "a") as log:
                traceback.print_exc(file=log)
            self._queue.put(exc)

    def _drive(self) -> None:
        started = time.monotonic()
        gpu = self._gpu or GpuProbe()
        machine = machine_info(gpu)
        write_json(self.run_dir / "machine.json", dataclasses.asdict(machine))
        self._emit(SweepStarted(str(self.run_dir), machine, self.settings, self.planner.planned(), self.previous))
        if machine.gpu_unavailable:
            self._emit(Notice("info", f"GPU {machine.gpu_unavailable}"))
        if shm := shm_problem(machine.shm_free_mb):
            self._emit(Notice("warning", shm))
        if self._kept:
            self._emit(Notice("info", f"resuming: {len(self._kept)} finished trials are kept, not measured again"))
        for kept in self._kept.values():
            self.guard.learn(kept)
        probes = self._probes = Probes(self._on_probe, gpu, interval=self.settings.interval)
        runner: RunnerProcess | None = None
        trials: list[TrialResult] = []
        try:
            probes.start()
            self.guard.start()
            runner = self._start_runner()
            self._check_dataset(runner)
            if self._skipped:
                self._emit(Notice("info", f"{len(self._skipped)} combinations with 0 workers are not run (the "
                                  "DataLoader rejects their knobs there); they show as skipped"))  # fmt: skip
            self._ceilings = self._measure_ceilings(runner)
            self._emit(Notice("info", describe_ceilings(self._ceilings)))
            self.planner.setup(machine, self._ceilings)
            while (config := self._next_config(trials)) is not None:
                if self._cancel.is_set() or self._stop_after.is_set():
                    break
                index = len(trials)
                self._resumed.wait()
                trial = self._kept_or_skipped(index, config)
                if trial is None:
                    if runner.proc.poll() is not None:  # it died with a trial: start afresh
                        runner.close()
                        runner = self._start_runner()
                    trial = self._run_trial(runner, index, config, machine)
                if trial is None or (trial.status == "failed" and self._cancel.is_set()):
                    break  # cancelled mid-trial (its SIGKILL was ours, not a failure): nothing finished to keep
                trials.append(trial)
                append_trial(self.run_dir, trial)
                self._emit(TrialFinished(trial))
        except _Cancelled:
            pass
        finally:
            self.guard.close()
            probes.stop()
            if runner is not None:
                runner.close()
            if self._gpu is None:
                gpu.close()
        for config, why in self._skipped:
            skipped = TrialResult(len(trials), config, "skipped", error=why)
            trials.append(skipped)
            append_trial(self.run_dir, skipped)
            self._emit(TrialFinished(skipped))
        self._finish(machine, trials, time.monotonic() - started)

    def _finish(self, machine: MachineInfo, trials: list[TrialResult], wall_s: float) -> None:
        conclusion = conclude(
            trials,
            self.settings,
            machine,
            ceilings=self._ceilings,
            search_trace=tuple(self.planner.trace),
            iterable=self._iterable,
            rerun_of=self.previous if self.planner.reruns_rows else None,  # a plain previous is only a baseline
        )
        for note in conclusion.notes:
            self._emit(Notice("info", note))
        self.result = dataclasses.replace(
            conclusion.result,
            run_dir=str(self.run_dir),
            interrupted=self._cancel.is_set() or self._stop_after.is_set(),
            wall_s=wall_s,
        )
        write_result(self.run_dir, self.result)
        self._emit(SweepFinished(self.result))

    def _measure_ceilings(self, runner: RunnerProcess) -> tuple[Ceiling, ...]:
        """The consumer alone on a cached batch, before the first trial (ceiling.py)."""
        return measure_ceilings(runner.send, lambda limit, doing: self._next_line(runner, limit, doing), self.settings)

    def _next_config(self, trials: list[TrialResult]) -> TrialConfig | None:
        """The planner's next configuration; each of its decisions goes into the event stream as a Notice."""
        config = self.planner.next(trials)
        for step in self.planner.take_notes():
            self._emit(Notice("info", f"search ({step.phase}): {step.message}", len(trials) if config else None))
        return config

    def _kept_or_skipped(self, index: int, config: TrialConfig) -> TrialResult | None:
        """A trial that needs no measuring: kept from the resumed run, or skipped by the memory guard."""
        kept = self._kept.pop(config, None)
        if kept is not None:
            return dataclasses.replace(kept, index=index)
        if not self._fd_warned and (fds := fd_problem(config, self.settings.files_per_sample, open_files_limit())):
            self._fd_warned = True
            self._emit(Notice("warning", fds, index))
        reason = self.guard.check_before(config)
        return None if reason is None else TrialResult(index, config, "skipped", error=reason)

    def _start_runner(self) -> RunnerProcess:
        runner = RunnerProcess(self.run_dir / LOG)
        message = self._next_line(runner, RUNNER_START_TIMEOUT, "start the runner (import torch)")
        if message.get("type") != "ready":
            raise RuntimeError(f"runner said {message!r} instead of ready")
        return runner

    def _check_dataset(self, runner: RunnerProcess) -> None:
        runner.send(
            {
                "type": "check",
                "dataset": self.settings.dataset,
                "dataset_args": dict(self.settings.dataset_args),
                "start_methods": sorted({c.start_method for c in self.planner.planned() if c.start_method}),
                "settings": self.settings.to_dict(),  # the consumer and knobs are checked with it
            }
        )
        message = self._next_line(runner, RUNNER_START_TIMEOUT, "load the dataset")
        if not message.get("ok"):
            raise UsageError(message.get("error", "the dataset could not be loaded"))
        self._iterable = bool(message.get("iterable"))
        self.checked.set()
        if message.get("summary"):
            self._emit(Notice("info", message["summary"]))

    def _next_line(self, runner: RunnerProcess, timeout: float, doing: str) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            if self._cancel.is_set():
                raise _Cancelled
            try:
                message = runner.lines.get(timeout=0.1)
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the runner did not {doing} within {timeout:.0f} s") from None
                continue
            if message is None:
                tail = log_tail(self.run_dir / LOG)
                raise RuntimeError(f"the runner exited while trying to {doing}: {tail}")
            return message

    def _run_trial(
        self, runner: RunnerProcess, index: int, config: TrialConfig, machine: MachineInfo
    ) -> TrialResult | None:
        settings = self.settings
        runner.send({"type": "trial", "index": index, "config": config.to_dict(), "settings": settings.to_dict()})
        total = max(len(self.planner.planned()), index + 1)
        pid: int | None = None
        worker_pids: tuple[int, ...] = ()
        rank_pids: tuple[int, ...] = ()
        finished: dict[str, Any] | None = None
        error: str | None = None
        last_what = "starting"
        last_activity = time.monotonic()
        timeout = settings.trial_timeout
        self._window, self._window_index = None, index
        probes_watch = self._probes_watch
        try:
            while True:
                if self._cancel.is_set():
                    self._drain_until_exit(runner)
                    return None
                if not self._resumed.is_set():
                    last_activity = time.monotonic()  # a frozen trial is not a hung one
                elif error is None and time.monotonic() - last_activity > timeout:
                    error = f"no batch for {timeout:.0f} s (last: {last_what})"
                    self._signal_trial(signal.SIGKILL)
                try:
                    message = runner.lines.get(timeout=0.1)
                except queue.Empty:
                    continue
                if message is None:
                    error = error or f"the runner died: {log_tail(self.run_dir / LOG)}"
                    break
                kind = message.get("type")
                last_activity = time.monotonic()
                if kind == "measuring" or (kind == "block" and self._window is None):
                    # The steady window opens with the first measured block (again, when the trial finds its
                    # epochs short and starts over with whole-epoch blocks).
                    self._window = []
                    if self._probes is not None:
                        self._probes.refresh_memory()  # so even a short window has a USS/PSS reading
                if kind == "forked":
                    pid = message["pid"]
                    with self._lock:
                        self._trial_pgid = pid
                        if not self._resumed.is_set():  # paused while we were forking
                            self._signal_trial(signal.SIGSTOP)
                    self.guard.arm(index, config)
                    probes_watch(index, pid, ())
                elif kind == "workers":
                    worker_pids = tuple(message["worker_pids"])
                    rank_pids = tuple(message.get("rank_pids", rank_pids))  # --ranks: the other ranks' mains
                    probes_watch(index, pid, rank_pids + worker_pids)
                    last_what = f"started {len(worker_pids)} workers" if worker_pids else "built the loader"
                elif kind == "started":
                    worker_pids = tuple(message["worker_pids"])
                    rank_pids = tuple(message.get("rank_pids", rank_pids))
                    probes_watch(index, pid, rank_pids + worker_pids)
                    last_what = "got the first batch"
                    self.guard.note_batch(message.get("batch_mb"))
                    assert pid is not None
                    self._emit(TrialStarted(index, total, config, pid, worker_pids, float(message["first_batch_s"])))
                elif kind == "block":
                    last_what = f"measured block {message['block']}"
                    self._emit(
                        TrialProgress(
                            index,
                            int(message["block"]),
                            float(message["batches_per_s"]),
                            float(message["samples_per_s"]),
                            float(message["stall_fraction"]),
                            float(message["elapsed_s"]),
                            message.get("spread"),
                        )
                    )
                elif kind == "finished":
                    finished = message
                    self._window_index = None  # freeze the window
                elif kind == "epoch" and finished is not None and message.get("epoch_restart_s") is not None:
                    finished = {**finished, "epoch_restart_s": message["epoch_restart_s"]}  # measured after the window
                elif kind == "notice":
                    self._emit(Notice(message.get("level", "warning"), message["message"], index))
                elif kind == "failed":
                    error = error or message["error"]
                elif kind == "exited":
                    if finished is None and error is None:
                        if message.get("signal"):
                            error = f"trial process killed by {signal_name(message['signal'])}"
                            error += _SIGNAL_HINTS.get(message["signal"], "")
                        else:
                            error = f"trial process exited with code {message.get('returncode')}"
                    break
        finally:
            if error is not None:  # whatever is left of a failed trial goes with it
                self._signal_trial(signal.SIGKILL)
            memory = self.guard.disarm()
            with self._lock:
                self._trial_pgid = None
            probes_watch(None, None, ())
        if self._cancel.is_set() and finished is None:
            return None  # our own kill raced the loop's check: a cancelled trial, not a failed one
        if memory is not None and memory.stopped:
            if finished is None:
                error = memory.describe()  # whatever the dying trial said, this is why it died
            else:
                self._emit(Notice("warning", f"after trial {index + 1} had finished, {memory.describe()}", index))
        if error is not None:
            error = shm_hint(error, shm_free_mb())
        window, self._window = self._window or [], None
        if finished is None or error is not None:
            return TrialResult(index, config, "failed", error=error or "unknown failure")
        stats = summarize_window(window, worker_pids)
        return TrialResult(
            index=index,
            config=config,
            status="ok",
            samples_per_s=finished["samples_per_s"],
            batches_per_s=finished["batches_per_s"],
            spread=finished["spread"],
            first_batch_s=finished["first_batch_s"],
            stall_fraction=finished["stall_fraction"],
            worker_uss_mb=stats.worker_uss_mb,
            worker_uss_slope_mb_per_min=stats.worker_uss_slope_mb_per_min,
            total_pss_mb=stats.total_pss_mb,
            rss_mb=stats.rss_mb,
            cpu_percent=stats.cpu_percent,
            main_cpu_percent=stats.main_cpu_percent,
            gpu_util=stats.gpu_util,
            gpu_mem_mb=stats.gpu_mem_mb,
            blocks=finished["blocks"],
            measured_s=finished["measured_s"],
            warmup_batches=finished["warmup_batches"],
            stable=finished["stable"],
            epoch_restart_s=finished.get("epoch_restart_s"),
            epoch_batches=finished.get("epoch_batches"),
            ranks=finished.get("ranks", 1),
            rank_samples_per_s=tuple(finished.get("rank_samples_per_s", ())),
            warnings=tuple(finished.get("warnings", ())),
        )

    def _drain_until_exit(self, runner: RunnerProcess, timeout: float = 2.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                message = runner.lines.get(timeout=0.05)
            except queue.Empty:
                continue
            if message is None or message.get("type") == "exited":
                return
            if message.get("type") == "forked":  # cancelled as it was forked: its group was not known yet
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(message["pid"], signal.SIGKILL)

    def _probes_watch(self, index: int | None, pid: int | None, workers: tuple[int, ...]) -> None:
        probes = self._probes
        if probes is not None:
            probes.watch(index, pid, workers)
