"""The driver: runs the planned trials through one runner process and turns its messages into events.

    for event in Sweep(settings).events():   # blocking; ends after SweepFinished

The driver thread and the probes thread both feed one queue; `events()` drains it in order. Control
methods (`cancel`, `stop_after_current`, `pause`, `resume`) are safe to call from any thread. The runner's
messages (model/protocol.py) come through engine/drive/runner_link.py; each trial's are handled by
engine/drive/trial_watch.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import queue
import shutil
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from loadertop.core.engine.drive.ceiling_requests import describe as describe_ceilings
from loadertop.core.engine.drive.ceiling_requests import measure_ceilings
from loadertop.core.engine.drive.data_stop import SameFailure
from loadertop.core.engine.drive.dataset_check import DatasetCheck, check_dataset
from loadertop.core.engine.drive.preflight_run import PreflightRun
from loadertop.core.engine.drive.request import SweepRequest
from loadertop.core.engine.drive.runner_link import Cancelled, RunnerProcess, start_runner
from loadertop.core.engine.drive.runner_start import keep_warm
from loadertop.core.engine.drive.stages_step import StagesOutcome, measure_stages, plan_for
from loadertop.core.engine.drive.trial_watch import TrialWatch
from loadertop.core.engine.nodes.node_link import NodeLink, OneNode
from loadertop.core.engine.report.runfolder import LOG, SETTINGS, append_trial, new_run_dir, write_json, write_result
from loadertop.core.engine.search.adaptive import make_planner
from loadertop.core.engine.verdict.outcome import DatasetFacts, conclude
from loadertop.core.machine.facts import machine_info
from loadertop.core.machine.gpu import GpuProbe
from loadertop.core.machine.guards import (
    MemoryGuard,
    fd_problem,
    memory_total_mb,
    open_files_limit,
    parse_mem_floor,
    shm_problem,
)
from loadertop.core.machine.probes import Probes
from loadertop.core.model.config import Settings, TrialConfig, UsageError
from loadertop.core.model.events import Event, Notice, ProbeSample, SweepFinished, SweepStarted, TrialFinished
from loadertop.core.model.protocol import Checked, TrialRequest
from loadertop.core.model.results import Ceiling, MachineInfo, SweepResult, TrialResult


class Sweep:
    @classmethod
    def of(cls, request: SweepRequest) -> Sweep:
        """The sweep a face was asked for (drive/request.py)."""
        return cls(request.settings, out_dir=request.out_dir, previous=request.previous, resume=request.resume,
                   nodes=request.nodes)  # fmt: skip

    def __init__(
        self,
        settings: Settings,
        *,
        out_dir: Path | None = None,
        previous: SweepResult | None = None,
        only: Sequence[TrialConfig] | None = None,
        gpu: GpuProbe | None = None,
        resume: Sequence[TrialResult] = (),
        nodes: NodeLink | None = None,
    ) -> None:
        self.settings = settings
        # This node's link (nodes/node_link.py): on many nodes node 0 plans and the others follow; one node is OneNode
        self._nodes: NodeLink = nodes if nodes is not None else OneNode()
        self.node_break: str | None = None  # why the many-node sweep stopped here (a node lost, node 0 said stop)
        self.previous = previous
        self.planner = make_planner(settings, only)
        if not self.planner.planned():
            raise UsageError("the sweep has no configurations to run")
        # Trials finished in a run being resumed: reused when the planner asks for their configuration.
        self._kept = {t.config: t for t in resume if t.status in ("ok", "failed")}
        # 0-worker combinations the DataLoader rejects: reported as skipped at the end, never run.
        self._skipped = [] if only else settings.skipped_configs()
        # The runner's check: the dataset's kind, the factory's DataLoader arguments (the snippet keeps them), a
        # torchdata.nodes graph's swept nodes, what was built, and whether every trial is forked from that build.
        self._check: DatasetCheck | None = None
        self._same = SameFailure()  # every configuration failing the same way on the data stops the sweep
        self._raised: str | None = None  # what the last trial's own code raised
        self.checked = threading.Event()  # set once the dataset spec loaded: faces may hold output until then
        self._fd_warned = False
        self._preflight = PreflightRun(settings, self._emit)
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
        self._watch: TrialWatch | None = None  # the running trial: its probe ticks carry its memory figures
        self._probes: Probes | None = None

    @property
    def planned(self) -> tuple[TrialConfig, ...]:
        return self.planner.planned()

    # -- control (any thread) ---------------------------------------------------------------------------

    @property
    def paused(self) -> bool:
        return not self._resumed.is_set()

    def cancel(self) -> None:
        """Stop now: the running trial's process group is killed; finished trials are kept (node 0 of a
        many-node sweep stops every node)."""
        self._cancel.set()
        self._nodes.stop()
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

    def _on_node_break(self, reason: str) -> None:
        """The link's verdict (any thread): a node was lost or node 0 stopped the sweep; stop here too."""
        if self.node_break is None:
            self.node_break = reason
            self._emit(Notice("error", reason))
        self.cancel()

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
        watch = self._watch
        if watch is not None and sample.index == watch.index:
            sample = watch.with_figures(sample, window or [])
        self._emit(sample)

    # -- the driver thread ------------------------------------------------------------------------------

    def _drive_safely(self) -> None:
        try:
            self._drive()
        except UsageError as exc:  # bad input: one line and exit 2, and no run folder left behind
            shutil.rmtree(self.run_dir, ignore_errors=True)
            self._queue.put(exc)
        except BaseException as exc:  # a bug: hand it to the consumer, never die silently
            import traceback

            with open(self.run_dir / LOG, "a") as log:
                traceback.print_exc(file=log)
            self._queue.put(exc)

    def _live(self, runner: RunnerProcess) -> RunnerProcess:
        """The runner, or a fresh one when it died with a trial (its dataset built again when trials share it)."""
        if runner.proc.poll() is None:
            return runner
        runner.close()
        fresh = start_runner(self.run_dir / LOG, self._cancel)
        return self._check_dataset(fresh, quiet=True) if self._check and self._check.shared else fresh

    def _drive(self) -> None:
        started = time.monotonic()
        gpu = self._gpu or GpuProbe()
        machine = machine_info(gpu)
        write_json(self.run_dir / "machine.json", dataclasses.asdict(machine))
        self._emit(SweepStarted(str(self.run_dir), machine, self.settings, self.planner.planned(), self.previous))
        self._opening(machine)
        probes = self._probes = Probes(self._on_probe, gpu, interval=self.settings.interval)
        runner: RunnerProcess | None = None
        trials: list[TrialResult] = []
        try:
            probes.start()
            self.guard.start()
            runner = start_runner(self.run_dir / LOG, self._cancel)
            runner = self._check_dataset(runner)
            machine = self._after_check(machine)
            self._ceilings = self._measure_ceilings(runner)
            self._emit(Notice("info", describe_ceilings(self._ceilings)))
            self._same.ceilings(self._ceilings)
            self.planner.setup(machine, self._ceilings)
            while (config := self._next_config(trials)) is not None:
                if self._cancel.is_set() or self._stop_after.is_set():
                    break
                index = len(trials)
                self._resumed.wait()
                trial, self._raised = self._kept_or_skipped(index, config), None
                if trial is None:
                    runner = self._live(runner)
                    if self.settings.stages != "off":
                        keep_warm()  # the stages child at the end is forked from the template, torch imported
                    trial = self._run_trial(runner, index, config)
                trial = self._node_share(index, config, trial)
                if trial is None or (trial.status == "failed" and self._cancel.is_set() and not self.node_break):
                    break  # cancelled mid-trial (its SIGKILL was ours, not a failure): nothing finished to keep
                trials.append(trial)
                append_trial(self.run_dir, trial)
                self._emit(TrialFinished(trial))
                self._preflight.forecast(trials, self.planner.planned(), machine.usable_cpus)
                if not self._nodes.many:  # many nodes: node 0's verdict goes through the link, as any stop
                    self._same.trial(trial, self._raised)
        except Cancelled:
            pass
        finally:
            self.guard.close()
            probes.stop()
            if runner is not None:
                runner.close()
            if self._gpu is None:
                gpu.close()
            self._nodes.close()
        for config, why in self._skipped:
            skipped = TrialResult(len(trials), config, "skipped", error=why)
            trials.append(skipped)
            append_trial(self.run_dir, skipped)
            self._emit(TrialFinished(skipped))
        stages = self._stages(machine, trials, time.monotonic() - started)
        self._finish(machine, trials, time.monotonic() - started, stages)

    def _stages(self, machine: MachineInfo, trials: list[TrialResult], sweep_s: float) -> StagesOutcome:
        """Where a sample's time goes, once the runner and every trial are gone (stages_step.py); a row rerun keeps
        the previous result's."""
        if self.previous is not None and self.planner.reruns_rows:
            return StagesOutcome(self.previous.stages, self.previous.stages_note)
        if self._cancel.is_set() or self._stop_after.is_set():
            return StagesOutcome(None, "not measured: the sweep was stopped")
        if self._nodes.many or (self._check is not None and self._check.checked.graph):
            why = "a many-node sweep" if self._nodes.many else "a torchdata.nodes graph (stages measure a Dataset)"
            return StagesOutcome(None, f"not measured: {why}")
        plan = plan_for(self.settings, trials, sweep_s, machine)
        if self.settings.stages != "off":
            self._emit(Notice("info", f"stages: {plan.why}"))
        if not plan.run:
            return StagesOutcome(None, plan.why)
        try:
            outcome = measure_stages(self.settings, plan, machine, self._ceilings, self._cancel, self._stages_started,
                                     self.run_dir / LOG)  # fmt: skip
        finally:
            with self._lock:
                self._trial_pgid = None
        self._emit(Notice("info" if outcome.report else "warning", f"stages: {outcome.note}"))
        return outcome

    def _stages_started(self, pid: int) -> None:
        """The stages child's process group, killed by a cancel as a trial's is."""
        with self._lock:
            self._trial_pgid = pid
        if self._cancel.is_set():
            self._signal_trial(signal.SIGKILL)

    def _node_share(self, index: int, config: TrialConfig, trial: TrialResult | None) -> TrialResult | None:
        """Many nodes: node 0 merges every node's share of the trial, the others send theirs. A node lost during
        it fails the trial in node 0's record; a stop (Ctrl-C, `q`) leaves it out, as on one node (OneNode: the trial
        as it is)."""
        if trial is None:
            lost = self.node_break is not None and self._nodes.node_rank == 0  # node 0 breaks only for a loss
            return TrialResult(index, config, "failed", error=self.node_break) if lost else None
        return self._nodes.combine(trial)

    def _opening(self, machine: MachineInfo) -> None:
        """What the sweep says before it starts, the trials it keeps, and (many nodes) listening to the link."""
        if machine.gpu_unavailable:
            self._emit(Notice("info", f"GPU {machine.gpu_unavailable}"))
        if shm := shm_problem(machine.shm_free_mb):
            self._emit(Notice("warning", shm))
        if self._kept:
            self._emit(Notice("info", f"resuming: {len(self._kept)} finished trials are kept, not measured again"))
        for kept in self._kept.values():
            self.guard.learn(kept)
        self._nodes.on_break(self._on_node_break)

    def _finish(self, machine: MachineInfo, trials: list[TrialResult], wall_s: float, stages: StagesOutcome) -> None:
        checked = self._check.checked if self._check is not None else Checked(ok=False)  # stopped before the check
        conclusion = conclude(
            trials,
            self.settings,
            machine,
            ceilings=self._ceilings,
            search_trace=tuple(self.planner.trace),
            dataset=DatasetFacts.of(checked),
            rerun_of=self.previous if self.planner.reruns_rows else None,  # a plain previous is only a baseline
            stages=stages.report,
        )
        stopped = self._cancel.is_set() or self._stop_after.is_set()
        if not stopped and not self._nodes.many:  # a stop keeps what finished; many nodes: node 0's verdict
            self._same.finish(conclusion.result.trials)
        for note in conclusion.notes:
            self._emit(Notice("info", note))
        self.result = dataclasses.replace(
            conclusion.result,
            preflight=self._preflight.after(trials, machine.usable_cpus),
            run_dir=str(self.run_dir),
            interrupted=stopped,
            wall_s=wall_s,
            nodes=self._nodes.nodes(),
            stages_note=stages.note,
        )
        write_result(self.run_dir, self.result)
        self._emit(SweepFinished(self.result))

    def _after_check(self, machine: MachineInfo) -> MachineInfo:
        """After the dataset check: the pre-flight checks, the build in machine.json, the 0-worker skips said."""
        # The faces hold their opening lines until this passes (`checked`): a --strict stop is one line too.
        self._preflight.before_trials(machine.shm_free_mb, self.planner.planned())
        self.checked.set()
        build, built_s = (self._check.build, self._check.checked.built_s) if self._check else ("", None)
        machine = dataclasses.replace(machine, dataset_build=build, dataset_build_s=built_s)
        write_json(self.run_dir / "machine.json", dataclasses.asdict(machine))
        if self._skipped:  # the DataLoader rejects their knobs at 0 workers
            self._emit(Notice("info", f"{len(self._skipped)} combinations with 0 workers are not run: skipped"))
        return machine

    def _measure_ceilings(self, runner: RunnerProcess) -> tuple[Ceiling, ...]:
        """The consumer alone on a cached batch, before the first trial (ceiling_requests.py)."""
        return measure_ceilings(
            runner.send, lambda limit, doing: runner.next(limit, doing, self._cancel), self.settings
        )

    def _next_config(self, trials: list[TrialResult]) -> TrialConfig | None:
        """The planner's next configuration; each of its decisions goes into the event stream as a Notice. On
        many nodes node 0 plans and sends it; the others take node 0's."""
        if self._cancel.is_set() or self._stop_after.is_set():
            return None  # before the next trial is planned (node 0: sent): none starts that would not finish
        config = self._nodes.next_config(lambda: self.planner.next(trials))
        for step in self.planner.take_notes():
            index = len(trials) if config else None
            self._emit(Notice("info", f"search ({step.phase}): {step.message}", index, step.phase))
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

    def _check_dataset(self, runner: RunnerProcess, quiet: bool = False) -> RunnerProcess:
        """The dataset, consumer and knobs checked; the runner built the dataset once for every trial unless
        --rebuild-dataset (or its build cannot be forked from: then a fresh runner, returned, each trial its own)."""
        methods = tuple(sorted({c.start_method for c in self.planner.planned() if c.start_method}))

        def restart() -> RunnerProcess:
            runner.close()
            return start_runner(self.run_dir / LOG, self._cancel)

        check = check_dataset(runner, restart, self.settings, methods, self._cancel)
        if quiet:  # a runner started again mid-sweep: build once more, say nothing new
            return check.runner
        self._check = check
        self._preflight.checked = check.checked
        said = check.checked.summary  # one line: what the dataset is, and how it was built
        self._emit(Notice("info", f"{said}; {check.build.removeprefix(f'dataset {check.checked.dataset} ')}"))
        return check.runner

    # -- one trial ------------------------------------------------------------------------------------------------

    def _run_trial(self, runner: RunnerProcess, index: int, config: TrialConfig) -> TrialResult | None:
        """Run one trial through the runner; None when the sweep was cancelled during it."""
        # Many nodes: every node measures the same whole window, cold (the planner's rates are the merged job's,
        # not this node's, and a follower's planner knows nothing of finalists).
        below, above = (None, None) if self._nodes.many else self.planner.decision()
        park = self.planner.keep() and self.settings.ranks == 1 and not self._nodes.many
        runner.send(TrialRequest(index, config, self.settings, decide_below=below, decide_above=above, park=park))
        watch = TrialWatch(self, self._emit, index, max(len(self.planner.planned()), index + 1), config)
        self._window, self._window_index, self._watch = None, index, watch
        try:
            kill = functools.partial(self._signal_trial, signal.SIGKILL)
            if not watch.follow(runner, self.settings.trial_timeout, self._cancel, self._resumed, kill):
                return None
            self._raised = watch.raised
            if watch.abandoned:  # the runner is stuck: closed here, so the next trial gets a fresh one (_live)
                self._emit(Notice("warning", f"trial {index + 1}: the runner stopped answering; starting a fresh one"))
                runner.close()
        finally:
            if watch.error is not None:  # whatever is left of a failed trial goes with it
                self._signal_trial(signal.SIGKILL)
            memory = self.guard.disarm()
            self._watch = None
            with self._lock:
                self._trial_pgid = None
            self.follow(None, None, ())
        if self._cancel.is_set() and watch.finished is None:
            return None  # our own kill raced the loop's check: a cancelled trial, not a failed one
        window: list[ProbeSample] = self._window or []
        self._window = None
        return watch.result(memory, window)

    # -- the running trial's host (trial_watch.TrialHost) ---------------------------------------------------------

    def launched(self, index: int, config: TrialConfig, pid: int) -> None:
        with self._lock:
            self._trial_pgid = pid
            if not self._resumed.is_set():  # paused while we were forking
                self._signal_trial(signal.SIGSTOP)
        self.guard.arm(index, config)
        self.follow(index, pid, ())

    def follow(self, index: int | None, pid: int | None, pids: tuple[int, ...]) -> None:
        probes = self._probes
        if probes is not None:
            probes.watch(index, pid, pids)

    def note_batch(self, batch_mb: float) -> None:
        self.guard.note_batch(batch_mb)

    def window_open(self) -> bool:
        return self._window is not None

    def open_window(self) -> None:
        self._window = []
        if self._probes is not None:
            self._probes.refresh_memory()  # so even a short window has a USS/PSS reading

    def freeze_window(self) -> None:
        self._window_index = None
