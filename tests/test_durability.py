"""Never lose a finished measurement: SIGKILL of loadertop or of its runner mid-sweep, torn trial logs,
failed writes; then resume the killed run and compare against it."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import stat
import time
from pathlib import Path

import pytest
from procs import Family, alive, runner_below, start_loadertop, wait_for

import loadertop.core.engine.report.runfolder as runfolder
from loadertop.core.engine.drive.driver import Sweep
from loadertop.core.engine.report.runfolder import TRIALS, read_result, read_trials, read_trials_strict, write_atomic
from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.events import TrialStarted
from loadertop.core.model.results import TrialResult

DATASET = "synthetic:cpu_ms=0.2,io_ms=2,kb=16"
ARGS = ["--workers", "0,1,2", "--trial-seconds", "2", "--dataset", DATASET, "--start-method", "fork"]


def test_sigkill_mid_sweep_keeps_every_finished_trial_then_resume_finishes_it(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    proc = start_loadertop(*ARGS, "--out", str(runs))
    family = Family(proc.pid).watch()
    wait_for(lambda: runs.is_dir() and any(runs.iterdir()), 60, "the run folder")
    (run,) = runs.iterdir()
    wait_for(lambda: len(read_trials(run)) == 2, 60, "two finished trials")
    wait_for(lambda: family.count() >= 5, 30, "the third trial's two workers")  # loadertop, runner, trial, 2 workers
    os.kill(proc.pid, signal.SIGKILL)
    # Nobody is left to clean up: the runner sees its stdin close and kills the trial's group.
    took = family.gone_within(2.0)
    _, err = proc.communicate(timeout=10)
    print(f"SIGKILL: runner, trial and workers gone on their own {took:.2f} s later")
    shown = re.findall(r"^\[(\d+)/3\] ", err, re.MULTILINE)
    kept = read_trials(run)
    assert len(kept) == 2 and len(shown) <= 2  # every trial it reported is in the log (and readable)
    assert [t.config.num_workers for t in kept] == [0, 1] and all(t.status == "ok" for t in kept)
    assert not (run / "result.json").exists()  # it really died mid-sweep

    # Resume: the same command plus --resume keeps both and measures only the third; --compare shows the change.
    proc = start_loadertop(*ARGS, "--out", str(runs), "--resume", str(run), "--compare", str(run))
    family = Family(proc.pid).watch()
    out, err = proc.communicate(timeout=120)
    family.gone_within(2.0)
    assert proc.returncode == 0, err
    assert "resuming: 2 finished trials are kept" in err
    (new,) = (p for p in runs.iterdir() if p != run)
    result = read_result(new)
    assert [t.config.num_workers for t in result.trials] == [0, 1, 2]
    assert [t.samples_per_s for t in result.trials[:2]] == [t.samples_per_s for t in kept]
    assert len(read_trials(new)) == 3 and result.recommendation is not None
    rows = [line for line in out.splitlines() if re.match(r"^│[^│]*│ +[012] │", line)]  # marks, then the trials
    assert "+0%" in rows[0] and "+0%" in rows[1] and " new " in rows[2], out


def test_sigkill_of_loadertop_and_its_runner_together_still_leaves_no_worker(tmp_path: Path) -> None:
    # Nobody is left to kill the trial's group: the trial dies by PDEATHSIG, and so must its workers
    # (torch's own watchdog would leave a worker with a full result pipe blocked forever).
    runs = tmp_path / "runs"
    proc = start_loadertop("--workers", "2", "--trial-seconds", "20", "--dataset", DATASET, "--out", str(runs),
                           "--start-method", "fork")  # fmt: skip
    family = Family(proc.pid).watch()
    wait_for(lambda: family.count() >= 5, 60, "the trial's two workers")
    time.sleep(0.5)
    family.look()
    runner = runner_below(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)
    # A runner forked from the template may be gone already: the template leaves when loadertop's socket closes,
    # and the runner dies with the template (PDEATHSIG)
    with contextlib.suppress(ProcessLookupError):
        os.kill(runner.pid, signal.SIGKILL)
    took = family.gone_within(2.0)
    proc.communicate(timeout=10)
    print(f"SIGKILL of loadertop and runner: trial and workers gone {took:.2f} s later")


def runner_pid(family: Family) -> int:
    runner = runner_below(os.getpid())
    assert runner.pid in family.pids
    return runner.pid


def test_runner_killed_mid_trial_fails_that_trial_its_processes_die_and_the_sweep_goes_on(runs: Path) -> None:
    settings = Settings(dataset=DATASET, workers=(2, 0), start_methods=("fork",), trial_seconds=2, interval=0.2)
    sweep = Sweep(settings, out_dir=runs, only=[TrialConfig(2, 32, 2, start_method="fork"), TrialConfig(0, 32)])
    family = Family().watch()
    trial_died = None
    for event in sweep.events():
        family.see(event)
        if isinstance(event, TrialStarted) and event.index == 0:
            os.kill(runner_pid(family), signal.SIGKILL)
            killed = time.monotonic()
            wait_for(lambda pid=event.pid: not alive(pid), 2, "the trial process (PDEATHSIG)")
            trial_died = time.monotonic() - killed
    family.gone_within(2.0)
    print(f"runner SIGKILLed: its trial died {trial_died:.3f} s later")
    assert sweep.result is not None
    lost, ok = sweep.result.trials
    assert lost.status == "failed" and (lost.error or "").startswith("the runner died")
    assert ok.status == "ok"  # a fresh runner took over


@pytest.mark.unit
def test_atomic_write_keeps_the_old_file_when_the_write_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "result.json"
    write_atomic(path, "old\n")
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # readable like any file, not mkstemp's 0600

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(runfolder.os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        write_atomic(path, "new\n")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]  # no temporary file left behind


def trial_line(index: int) -> str:
    return json.dumps(TrialResult(index, TrialConfig(index, 32), "ok", samples_per_s=100.0 + index).to_dict())


@pytest.mark.unit
def test_a_torn_last_line_is_dropped_and_a_corrupt_middle_line_is_an_error(tmp_path: Path) -> None:
    log = tmp_path / TRIALS
    torn = trial_line(2)[:40]  # killed in the middle of the write
    log.write_text(trial_line(0) + "\n" + trial_line(1) + "\n" + torn)
    assert [t.index for t in read_trials(tmp_path)] == [0, 1]
    assert [t.index for t in read_trials_strict(tmp_path)] == [0, 1]
    log.write_text(trial_line(0) + "\n" + torn + "\n" + trial_line(1) + "\n")
    with pytest.raises(ValueError, match=r"trials\.jsonl line 2: not a trial record"):
        read_trials_strict(tmp_path)
