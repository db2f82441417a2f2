"""Finalists' repeats on parked workers (trial/parked.py): the runs of one configuration after its first keep its
DataLoader workers, so their start-up is paid once. Real runner, real trials, real workers."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import psutil

from loadertop.core.engine.drive.driver import Sweep
from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.events import SweepFinished, TrialFinished, TrialStarted
from loadertop.core.model.results import Ceiling, MachineInfo, SearchStep, TrialResult

A = TrialConfig(3, 16, 2, start_method="fork")
B = TrialConfig(2, 16, 2, start_method="fork")


class Duel:
    """A planner that asks for A B A B with `keep` set, then one more configuration without it."""

    reruns_rows = False

    def __init__(self, after: TrialConfig | None = None) -> None:
        self.order = [A, B, A, B, A, B] + ([after] if after else [])
        self.trace: list[SearchStep] = []

    def planned(self) -> tuple[TrialConfig, ...]:
        return tuple(self.order)

    def next(self, done: Sequence[TrialResult]) -> TrialConfig | None:
        self._n = len(done)
        return self.order[self._n] if self._n < len(self.order) else None

    def setup(self, machine: MachineInfo, ceilings: Sequence[Ceiling]) -> None:
        pass

    def take_notes(self) -> list[SearchStep]:
        return []

    def decision(self) -> tuple[float | None, float | None]:
        return None, None

    def keep(self) -> bool:
        return self._n < 6


def settings() -> Settings:
    return Settings(
        dataset="synthetic:cpu_ms=0.1,io_ms=5,kb=4",
        workers=(2, 3),
        batch_sizes=(16,),
        trial_seconds=1.0,
        block_seconds=0.1,
        interval=0.2,
        start_methods=("fork",),
        search="grid",
    )


def test_repeats_run_on_the_workers_of_the_first_run(runs: Path, no_leftovers: None) -> None:
    sweep = Sweep(settings(), out_dir=runs)
    sweep.planner = Duel(after=TrialConfig(1, 16, 2, start_method="fork"))
    events = list(sweep.events())
    assert isinstance(events[-1], SweepFinished)
    started = [e for e in events if isinstance(e, TrialStarted)]
    trials = [e.result for e in events if isinstance(e, TrialFinished)]
    assert [t.status for t in trials] == ["ok"] * 7, [t.error for t in trials]
    assert [t.warm for t in trials] == [False, False, True, True, True, True, False]
    # One trial process measured every run of A, and one every run of B; the first run's epoch boundary started the
    # workers the later runs share (no start-up paid after it), and its start-up figures stand for all of them
    assert started[0].pid == started[2].pid == started[4].pid and started[1].pid == started[3].pid == started[5].pid
    assert started[2].worker_pids == started[4].worker_pids and started[3].worker_pids == started[5].worker_pids
    assert trials[2].first_batch_s == trials[4].first_batch_s == trials[0].first_batch_s
    assert all(t.samples_per_s and t.blocks >= 1 for t in trials)  # how many fit in 1 s is the machine's load's
    # The configuration after the duel (no keep) forked anew, and the parked trials were dropped then
    assert started[6].pid not in (started[0].pid, started[1].pid)
    assert not psutil.pid_exists(started[0].pid) or psutil.Process(started[0].pid).status() == psutil.STATUS_ZOMBIE


def test_cancel_during_a_repeat_leaves_no_parked_worker(runs: Path, no_leftovers: None) -> None:
    sweep = Sweep(settings(), out_dir=runs)
    sweep.planner = Duel()
    pids: list[int] = []
    for event in sweep.events():
        if isinstance(event, TrialStarted):
            pids += [event.pid, *event.worker_pids]
            if event.index == 2:  # A again, B parked meanwhile
                sweep.cancel()
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    assert not [p for p in pids if _alive(p)]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
