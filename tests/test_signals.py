"""Interrupts mid-trial, sent as a user's terminal would send them: Ctrl-C (SIGINT to the process group),
SIGTERM, SIGHUP (the SSH session dropped: the terminal hangs up), and the TUI's `q` (Sweep.cancel).

Each time: every runner and worker process is gone within 2 s, the finished trials are saved and the run
folder is readable, and the exit code says what happened."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from procs import FAULTS, Family, start_loadertop, wait_for

from loadertop.core.engine.drive.driver import Sweep
from loadertop.core.engine.report.runfolder import read_result, read_trials
from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.events import TrialStarted

# The 0-worker trial finishes; the 2-worker one cannot (its workers hang after the first batch), so every
# interrupt lands mid-trial, with the trial process and both workers alive, however slow the machine is.
ARGS = ["--workers", "0,2", "--trial-seconds", "2", "--dataset", f"{FAULTS}:hanging", "--dataset-arg", "after=100"]
ARGS += ["--start-method", "fork", "--interval", "0.2", "--search", "grid"]
# Become the session's controlling terminal, then exec: loadertop is the session leader a hangup signals.
WITH_TTY = "import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); os.execv(sys.argv[1], sys.argv[1:])"


def mid_second_trial(runs: Path, family: Family, workers: int = 2) -> Path:
    """Wait until the first trial is saved and the second runs with its workers; return the run folder."""
    wait_for(lambda: runs.is_dir() and any(runs.iterdir()), 60, "the run folder")
    (run,) = runs.iterdir()
    wait_for(lambda: len(read_trials(run)) == 1, 60, "the first trial")
    # loadertop, runner, trial process, workers
    wait_for(lambda: family.count() >= 3 + workers, 30, "the second trial's workers")
    time.sleep(0.3)
    return run


def check_saved(run: Path) -> None:
    kept = read_trials(run)
    assert [t.config.num_workers for t in kept] == [0] and kept[0].status == "ok"
    result = read_result(run)
    assert result.interrupted and result.trials[0].samples_per_s == kept[0].samples_per_s


@pytest.mark.parametrize(
    ("how", "code"),
    [("ctrl-c", 130), ("sigterm", 128 + signal.SIGTERM)],
)
def test_interrupt_mid_trial_stops_everything_within_2s_and_keeps_finished_trials(
    how: str, code: int, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    proc = start_loadertop(*ARGS, "--out", str(runs), "--json", str(tmp_path / "out.json"))
    family = Family(proc.pid).watch()
    try:
        run = mid_second_trial(runs, family)
        sent = time.monotonic()
        if how == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)  # a terminal sends it to the whole foreground group
        else:
            os.kill(proc.pid, signal.SIGTERM)
        took = family.gone_within(2.0)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    print(f"{how}: every process gone {took:.2f} s after the signal ({time.monotonic() - sent:.2f} s to exit)")
    assert proc.returncode == code, err
    assert "Traceback" not in err
    assert "Interrupted: 1 finished trials kept." in out, out
    check_saved(run)
    assert json.loads((tmp_path / "out.json").read_text())["interrupted"] is True


def test_terminal_hangup_stops_everything_and_never_writes_to_the_dead_tty(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    master, slave = pty.openpty()
    proc = start_with_tty(*ARGS, "--out", str(runs), stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)  # only loadertop holds the terminal now
    # Keep the terminal drained (a full pty would block loadertop), as a terminal emulator does.
    seen: list[bytes] = []
    stop = threading.Event()

    def drain() -> None:
        while not stop.is_set():
            if select.select([master], [], [], 0.05)[0]:
                try:
                    seen.append(os.read(master, 65536))
                except OSError:
                    return

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    family = Family(proc.pid).watch()
    try:
        run = mid_second_trial(runs, family)
        stop.set()
        reader.join()
        os.close(master)  # the SSH session drops: the kernel hangs up the terminal and sends SIGHUP
        took = family.gone_within(2.0)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    print(f"hangup: every process gone {took:.2f} s after the terminal went away")
    assert proc.returncode == 128 + signal.SIGHUP  # not 1 (a crash writing to the dead tty) nor 120
    assert b"loadertop:" in b"".join(seen)  # it did draw while it could
    check_saved(run)


def start_with_tty(*args: str, **popen: object) -> subprocess.Popen[str]:
    return subprocess.Popen(  # type: ignore[call-overload]
        [sys.executable, "-c", WITH_TTY, sys.executable, "-m", "loadertop", "--headless", *args],
        text=True,
        start_new_session=True,
        **popen,
    )


def test_cancel_through_the_api_as_the_tui_does_leaves_nothing_within_2s(tmp_path: Path) -> None:
    """What the TUI's `q` relies on: cancel() from another thread mid-trial, all processes gone in 2 s, the
    stream still ends with SweepFinished, finished trials kept."""
    # The 0-worker trial finishes; the 2-worker one cannot (its workers hang after the first batch), so the
    # cancel lands mid-trial however late this loop sees the event.
    settings = Settings(dataset=f"{FAULTS}:hanging", dataset_args=(("after", "100"),), trial_seconds=2, interval=0.2)
    only = [TrialConfig(0, 32), TrialConfig(2, 32, 2, start_method="fork")]
    sweep = Sweep(settings, out_dir=tmp_path, only=only)
    family = Family().watch()
    cancelled: float | None = None
    took = None
    for event in sweep.events():
        family.see(event)
        if isinstance(event, TrialStarted) and event.index == 1:
            cancelled = time.monotonic()
            threading.Thread(target=sweep.cancel).start()
    finished = time.monotonic()
    took = family.gone_within(2.0)
    assert cancelled is not None
    assert len(family.pids) >= 4  # runner, trial process, workers were all tracked
    print(f"api cancel: stream ended {finished - cancelled:.2f} s after cancel(); all gone {took:.2f} s later")
    assert finished - cancelled < 2.0
    assert sweep.result is not None and sweep.result.interrupted
    check_saved(Path(sweep.run_dir))
