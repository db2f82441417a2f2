"""Soak: 50 real trials in one sweep; the driver's open files, threads, children and memory must not grow,
nor the runner's (it lives for the whole sweep and reaps every trial).

The driver is loadertop's own process, so the sweep runs in a plain interpreter of its own (this file run as a
script, which prints what it saw as one JSON line), not in pytest's, which holds what every earlier test left."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

TRIALS = 50


def snapshot(process: psutil.Process) -> dict[str, float]:
    # A leak stays; a file the probes thread has open for a moment (/proc/stat, a worker's smaps) does not: the
    # fewest over a few reads (CI once read 10 fds at trial 50 against 9 at trial 10, threads 5 against 7)
    reads = []
    for _ in range(5):
        reads.append(process.num_fds())
        time.sleep(0.02)
    fds = min(reads)
    return {
        "fds": fds,
        "threads": process.num_threads(),
        "children": len(process.children()),
        "uss_mb": process.memory_full_info().uss / 2**20,
    }


def soak(runs: Path) -> dict[str, Any]:
    """The 50 trials in this process: what the driver and its runner held along the way."""
    from procs import Family, runner_below

    from loadertop.core.engine.drive.driver import Sweep
    from loadertop.core.engine.drive.runner_start import template_pid
    from loadertop.core.model.config import Settings, TrialConfig
    from loadertop.core.model.events import TrialFinished

    me = psutil.Process()
    gc.collect()
    before = snapshot(me)
    threads_before = threading.active_count()
    configs = [TrialConfig(n, 32, 2, start_method="fork") if n else TrialConfig(0, 32) for n in (0, 1, 2, 3)]
    only = [configs[i % 4] for i in range(TRIALS)]
    settings = Settings(dataset="synthetic:cpu_ms=0.1,io_ms=1,kb=16", trial_seconds=0.2, block_seconds=0.1,
                        min_blocks=3, interval=0.2)  # fmt: skip
    sweep = Sweep(settings, out_dir=runs, only=only)
    family = Family().watch()
    driver: list[dict[str, float]] = []
    runner: list[dict[str, float]] = []
    runner_process: psutil.Process | None = None
    for event in sweep.events():
        family.see(event)
        if isinstance(event, TrialFinished):
            gc.collect()
            driver.append(snapshot(me))
            if runner_process is None:
                runner_process = runner_below(me.pid)
            # Events reach this loop after the driver moved on: beside a busy machine the last trial may have
            # ended, and the runner with it, by the time an earlier one's event is read here.
            if len(driver) < TRIALS and runner_process.is_running():
                with contextlib.suppress(psutil.NoSuchProcess):
                    runner.append(snapshot(runner_process))
    family.gone_within(2.0)  # raises if a process of the sweep is left
    assert sweep.result is not None
    gc.collect()
    return {
        "statuses": [t.status for t in sweep.result.trials],
        "driver": driver,
        "runner": runner,
        "before": before,
        "after": snapshot(me),
        "kept": template_pid() is not None,  # the runner template and its socket stay for the next sweep, by design
        "threads_before": threads_before,
        "threads_after": [t.name for t in threading.enumerate()],
    }


def test_fifty_trials_leak_no_files_threads_children_or_memory(tmp_path: Path) -> None:
    root = str(Path(__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, __file__, str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=280)  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["statuses"] == ["ok"] * TRIALS
    driver, runner = seen["driver"], seen["runner"]
    assert len(runner) >= TRIALS // 2, f"the runner read after {len(runner)} trials only"
    # After 10 trials every code path has run once or twice. The last is trial 49: when the 50th has finished, the
    # driver is finishing the sweep (its result, the report); its USS read then was ~20 MB higher in most runs here,
    # and after no other trial.
    warm, last = driver[9], driver[-2]
    summary = f"driver after trial 10: {warm}; after trial 49: {last}; runner: {runner[9]} -> {runner[-1]}"
    assert last["fds"] <= warm["fds"] and last["threads"] <= warm["threads"], summary
    # The runner (or the runner template it was forked from, which stays for the next sweep), nothing else
    assert last["children"] == warm["children"] == 1, summary
    assert last["uss_mb"] - warm["uss_mb"] < 16, summary
    # The runner at the second-to-last trial (after the last one it is already on its way out).
    assert runner[-1]["fds"] <= runner[9]["fds"] and runner[-1]["threads"] <= runner[9]["threads"], summary
    assert runner[-1]["uss_mb"] - runner[9]["uss_mb"] < 16, summary
    before, after, kept = seen["before"], seen["after"], seen["kept"]
    assert after["fds"] <= before["fds"] + kept and after["children"] == before["children"] + kept, (before, after)
    assert len(seen["threads_after"]) <= seen["threads_before"], seen["threads_after"]


if __name__ == "__main__":
    runs = (Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp())) / "runs"
    runs.mkdir(parents=True)
    print(json.dumps(soak(runs)))
