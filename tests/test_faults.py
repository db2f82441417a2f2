"""Faults a dataset or a user can bring, each injected for real: the trial fails with a message a person can
act on, the sweep goes on, bad input is one line and exit 2, and no process of the run survives."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
from pathlib import Path

import psutil
import pytest
from procs import FAULTS, Family, start_loadertop

from loadertop.core.engine.drive.driver import Sweep
from loadertop.core.model.config import DataError, Settings, TrialConfig
from loadertop.core.model.events import Notice, TrialFinished, TrialStarted
from loadertop.core.model.results import SweepResult, TrialResult

FAST = dict(trial_seconds=1.5, block_seconds=0.15, interval=0.2, start_methods=("fork",))
W0 = TrialConfig(0, 32)
W2 = TrialConfig(2, 32, 2, start_method="fork")


def run_sweep(runs: Path, factory: str, only: list[TrialConfig], **settings: object) -> SweepResult:
    """A sweep over `only` (in that order) of a fault dataset; asserts that every process of it is gone."""
    args = settings.pop("args", {})
    full = {**FAST, **settings}
    sweep = Sweep(
        Settings(dataset=f"{FAULTS}:{factory}", dataset_args=tuple(args.items()), **full),  # type: ignore[attr-defined,arg-type]
        out_dir=runs,
        only=only,
    )
    family = Family().watch()  # polled too: a trial that fails before its first batch sends no pid in an event
    for event in sweep.events():
        family.see(event)
    assert len(family.pids) >= 2, family.pids  # the runner and at least one trial process were seen
    family.gone_within(2.0)
    assert sweep.result is not None
    return sweep.result


def failing_sweep(runs: Path, factory: str, only: list[TrialConfig], **args: str) -> tuple[list[TrialResult], str]:
    """A sweep of a fault dataset where no trial finishes: its trials as they were reported, and the DataError's
    line it ends with; asserts that every process of it is gone and no run folder is left."""
    sweep = Sweep(Settings(dataset=f"{FAULTS}:{factory}", dataset_args=tuple(args.items()), **FAST), out_dir=runs,  # type: ignore[arg-type]
                  only=only)  # fmt: skip
    family, finished = Family().watch(), list[TrialResult]()
    with pytest.raises(DataError) as caught:
        for event in sweep.events():
            family.see(event)
            if isinstance(event, TrialFinished):
                finished.append(event.result)
    family.gone_within(2.0)
    assert not any(runs.iterdir())
    return finished, str(caught.value)


def test_exception_in_getitem_fails_the_trial_with_the_datasets_text_and_index(runs: Path) -> None:
    # A sweep where nothing finishes ends as bad data: the trials say what the dataset raised, and where.
    (worker,), said = failing_sweep(runs, "raising", [W2], at="17", where="both")
    assert worker.status == "failed"
    assert worker.error == "ValueError: corrupt record at offset 69632 (in DataLoader worker 0, sample index 17)"
    assert said.startswith("every configuration failed (1 trial, none finished), trial 1 on the data: ValueError")
    (main,), _ = failing_sweep(runs, "raising", [W0], at="17", where="both")
    assert main.status == "failed" and main.error == "ValueError: corrupt record at offset 69632 (sample index 17)"


def test_workers_killed_by_signals_fail_their_trials_and_the_sweep_goes_on(runs: Path) -> None:
    # 1 worker dies by SIGKILL, 2 by a real segfault, 3 by SIGBUS; the 0-worker trial after them is fine.
    configs = [TrialConfig(n, 32, 2, start_method="fork") for n in (1, 2, 3)] + [W0]
    # A trial stuck on its way out after its Failed (once 300 s in CI) is killed after --trial-timeout, not waited for.
    args = {"sig": "KILL,SEGV,BUS", "at": "5", "where": "worker"}
    result = run_sweep(runs, "killed", configs, args=args, trial_timeout=20.0)
    killed, segfault, bus, ok = result.trials
    assert ok.status == "ok"
    assert re.fullmatch(
        r"RuntimeError: DataLoader worker \(pid \d+\) is killed by signal: Killed\.", killed.error or ""
    )
    assert re.fullmatch(
        r"RuntimeError: DataLoader worker \(pid \d+\) is killed by signal: Segmentation fault\.", segfault.error or ""
    )
    assert "is killed by signal: Bus error" in (bus.error or "")
    assert "/dev/shm is where workers put batches" in (bus.error or "")  # the container classic: where to look


def _exited(cause: BaseException) -> RuntimeError:
    """torch's _try_get_data: the worker found dead after a poll, `raise RuntimeError(...) from` what it raised."""
    try:
        try:
            raise cause
        except Exception as e:
            raise RuntimeError("DataLoader worker (pid(s) 4242) exited unexpectedly") from e
    except RuntimeError as exc:
        return exc


@pytest.mark.unit
def test_a_dead_worker_is_described_by_its_signal_or_else_by_torchs_own_line_never_by_the_poll() -> None:
    from loadertop.core.trial.crashes import describe

    killed = RuntimeError("DataLoader worker (pid 4242) is killed by signal: Bus error. ")
    assert describe(_exited(killed)) == "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Bus error."
    # On a busy machine the poll times out and finds the worker dead before torch's SIGCHLD handler ran: the cause
    # is a bare queue.Empty, and the line said "Empty" (CI, under two xdist workers)
    assert describe(_exited(queue.Empty())) == "RuntimeError: DataLoader worker (pid(s) 4242) exited unexpectedly"


@pytest.mark.unit
def test_a_workers_exception_that_cannot_print_keeps_its_cause_worded_as_at_0_workers() -> None:
    from soundfile import LibsndfileError

    from loadertop.core.trial.crashes import describe

    # torch re-raises a worker's exception as type(its text): soundfile's takes an error code, and str() raised, so
    # the trial died before saying why ("trial process exited with code 1")
    worker = LibsndfileError(
        "Caught LibsndfileError in DataLoader worker process 1.\nOriginal Traceback (most recent call last):\n"
        '  File "clips.py", line 9, in __getitem__\n'
        "soundfile.LibsndfileError: Error opening 'clip_0150.wav': Format not recognised.\n"
        "loadertop: sample index 150\n"
    )
    said = "LibsndfileError: Error opening 'clip_0150.wav': Format not recognised."
    assert describe(worker) == f"{said} (in DataLoader worker 1, sample index 150)"
    main = LibsndfileError(0x01, prefix="Error opening 'clip_0150.wav': ")
    main.add_note("loadertop: sample index 150")
    assert describe(main) == f"{said} (sample index 150)"  # as at 0 workers: the same words, unqualified


class _DiesAt5:
    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> int:
        if index == 5:
            os.kill(os.getpid(), signal.SIGBUS)
        return index


def test_a_worker_found_dead_by_torchs_poll_is_described_by_its_signal_all_the_same() -> None:
    # CI: a worker killed by SIGBUS was found dead by torch's poll before its SIGCHLD handler ran, and the trial
    # said "exited unexpectedly" where the same death had said "is killed by signal: Bus error" the run before.
    # Here the handler never runs (SIGCHLD back to its default once the workers are up), so the poll finds it.
    from torch.utils.data import DataLoader

    from loadertop.core.trial.crashes import describe

    loader = DataLoader(_DiesAt5(), batch_size=4, num_workers=1, timeout=1.0)  # type: ignore[arg-type]
    before = signal.getsignal(signal.SIGCHLD)
    it = iter(loader)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        with pytest.raises(RuntimeError, match=r"exited unexpectedly") as raised:
            list(it)
    finally:
        signal.signal(signal.SIGCHLD, before)
    assert re.fullmatch(
        r"RuntimeError: DataLoader worker \(pid \d+\) is killed by signal: Bus error\.", describe(raised.value)
    ), describe(raised.value)


def test_a_hung_trial_is_killed_after_the_timeout_and_says_what_it_last_did(runs: Path) -> None:
    # Workers hang at sample 100, after the first batch; the 0-worker trial after it is fine.
    result = run_sweep(runs, "hanging", [W2, W0], args={"after": "100", "where": "worker"}, trial_timeout=2.0)
    hung, ok = result.trials
    assert hung.error == "no batch for 2 s (last: got the first batch)"
    assert ok.status == "ok"  # the sweep went on


def test_a_headless_sweep_where_a_hang_leaves_nothing_finished_exits_2_and_keeps_its_log(tmp_path: Path) -> None:
    # Not the data's fault (a hang), so not bad input: the folder stays for its runner.log. Before: exit 0.
    runs = tmp_path / "runs"
    code, out, err = loadertop("--workers", "0", "--trial-seconds", "1", "--trial-timeout", "2", "--out", str(runs),
                               "--dataset", f"{FAULTS}:hanging", "--dataset-arg", "after=100", "--dataset-arg",
                               "where=both")  # fmt: skip
    assert code == 2, out + err
    assert "failed: no batch for 2 s (last: got the first batch)" in err
    assert "No recommendation: every configuration failed (tracebacks: runner.log)." in out
    (folder,) = runs.iterdir()
    assert (folder / "runner.log").exists()


def test_a_runner_that_stops_answering_is_replaced_and_the_sweep_goes_on(
    runs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The trial hangs; the runner is frozen once the trial started (the trial waits for the runner to send Forked
    # and open its gate: frozen before that, the trial would never start), so the trial's kill is never reported.
    from loadertop.core.engine.drive import trial_watch

    monkeypatch.setattr(trial_watch, "EXIT_GRACE_S", 2.0)
    sweep = Sweep(
        Settings(dataset=f"{FAULTS}:hanging", dataset_args=(("after", "100"),), trial_timeout=2.0, **FAST),  # type: ignore[arg-type]
        out_dir=runs,
        only=[W2, W0],
    )
    family = Family().watch()
    notices = []
    for event in sweep.events():
        family.see(event)
        if isinstance(event, TrialStarted) and event.index == 0:
            os.kill(psutil.Process(event.pid).ppid(), signal.SIGSTOP)  # the runner: it will never say Exited
        if isinstance(event, Notice):
            notices.append(event.message)
    family.gone_within(2.0)
    assert sweep.result is not None
    hung, ok = sweep.result.trials
    assert hung.error == (
        "no batch for 2 s (last: got the first batch); the runner did not report its exit 2 s after SIGKILL"
    )
    assert "trial 1: the runner stopped answering; starting a fresh one" in notices
    assert ok.status == "ok"  # measured by the fresh runner


# -- bad input: one line, exit 2, traceback in the log ------------------------------------------------------


def loadertop(*args: str, timeout: float = 120) -> tuple[int, str, str]:
    proc = start_loadertop(*args)
    family = Family(proc.pid).watch()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    family.gone_within(2.0)
    return proc.returncode, out, err


def one_line_exit_2(code: int, err: str, needle: str) -> str:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert needle in lines[0], err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("{broken}:make", "importing broken_import.py raised ZeroDivisionError"),
        (f"{FAULTS}:factory_raises", "raised FileNotFoundError: /data/train/index.csv"),
        (f"{FAULTS}:not_a_dataset", "returned int, not a Dataset"),
        (f"{FAULTS}:empty", "returned an empty dataset"),
        (f"{FAULTS}:unpicklable --start-method spawn", "cannot be pickled for spawn workers"),
    ],
)
def test_bad_dataset_is_one_line_exit_2_and_leaves_no_run_folder(spec: str, needle: str, tmp_path: Path) -> None:
    broken = tmp_path / "broken_import.py"
    # `make` is defined: what fails is the import
    broken.write_text("import os\nRATIO = 1 / 0\n\n\ndef make():\n    return None\n")
    spec, *extra = spec.format(broken=broken).split()
    code, _, err = loadertop("--workers", "0,1", "--out", str(tmp_path / "runs"), "--dataset", spec, *extra)
    one_line_exit_2(code, err, needle)
    assert not any((tmp_path / "runs").iterdir())  # bad input: nothing to keep


def test_debug_puts_the_traceback_on_the_screen(tmp_path: Path) -> None:
    code, _, err = loadertop("--workers", "8-2", "--out", str(tmp_path), "--debug")
    assert code != 0 and "Traceback" in err and "runs backwards" in err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--workers", "8-2"], "range 8-2 runs backwards"),
        (["--workers", "-1"], "cannot be negative"),
        (["--workers", "x"], "'x' is not a whole number"),
        (["--workers", "2,,4"], "empty item"),
        (["--batch-size", "0"], "--batch-size '0': values must be at least 1"),
        (["--mem-floor", "lots"], "--mem-floor 'lots': expected a size"),
        (["--mem-floor", "4"], "give a unit"),
        (["--mem-floor", "100%"], "below 100%"),
        (["--mem-floor", "64TiB"], "at or above the"),
        (["--files-per-sample", "0"], "--files-per-sample 0"),
        (["--trial-timeout", "0"], "--trial-timeout 0: must be a positive number"),
        (["--json", "/proc/self/out.json"], "--json /proc/self/out.json: not writable"),
        (["--json", "same.out", "--csv", "same.out"], "one would overwrite the other"),
    ],
)
def test_bad_usage_is_one_line_exit_2(args: list[str], needle: str, tmp_path: Path) -> None:
    args = [a if a != "same.out" else str(tmp_path / a) for a in args]
    code, _, err = loadertop("--out", str(tmp_path), *args)
    one_line_exit_2(code, err, needle)
    assert not any(tmp_path.iterdir())  # rejected before any run folder was made


def write_run(folder: Path, trials: list[str], result: str | None = None) -> Path:
    folder.mkdir()
    (folder / "settings.json").write_text(json.dumps(Settings(dataset="synthetic").to_dict()))
    (folder / "trials.jsonl").write_text("".join(trials))
    if result is not None:
        (folder / "result.json").write_text(result)
    return folder


def corrupt_settings(folder: Path) -> Path:
    (folder / "settings.json").write_text('{"workers": [1')
    return folder


GOOD = json.dumps({"index": 0, "config": TrialConfig(0, 32).to_dict(), "status": "ok", "samples_per_s": 100.0})


@pytest.mark.parametrize(
    ("flag", "make", "needle"),
    [
        ("--compare", lambda p: write_run(p, [], result="{not json"), "not a loadertop result"),
        ("--compare", lambda p: write_run(p, [], result='{"version": 1}'), "not a loadertop result (KeyError"),
        ("--compare", lambda p: p, "no such run folder or result file"),
        ("--resume", lambda p: write_run(p, [GOOD + "\n", "garbage\n", GOOD + "\n"]), "trials.jsonl line 2"),
        ("--resume", lambda p: p.mkdir() or p, "not a loadertop run folder (no settings.json)"),
        ("--resume", lambda p: corrupt_settings(write_run(p, [])), "settings.json: corrupt"),
    ],
)
def test_corrupt_run_folder_for_compare_or_resume_is_one_line_exit_2(
    flag: str, make: object, needle: str, tmp_path: Path
) -> None:
    run = make(tmp_path / "old")  # type: ignore[operator]
    code, _, err = loadertop("--workers", "0", "--out", str(tmp_path / "runs"), flag, str(run))
    line = one_line_exit_2(code, err, needle)
    assert line.startswith(f"loadertop: error: {flag} ")


def test_resume_of_a_run_that_measured_another_dataset_is_refused(tmp_path: Path) -> None:
    run = write_run(tmp_path / "old", [GOOD + "\n"])
    code, _, err = loadertop("--workers", "0", "--dataset", "synthetic:cpu_ms=1", "--resume", str(run))
    one_line_exit_2(code, err, "that run measured dataset='synthetic'")
