"""Soak: 50 real trials in one sweep; the driver's open files, threads, children and memory must not grow,
nor the runner's (it lives for the whole sweep and reaps every trial).

The driver is loadertop's own process, so it is measured in a fresh interpreter (the test runs itself again there):
in the pytest process after ~700 other tests its USS grew 140 MB over the 50 trials, against under 16 MB in a fresh
one; what grows there (the earlier tests' residue or the driver) is not yet known: see the closing note of issue 19."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
from procs import Family

from loadertop.core.engine.drive.driver import Sweep
from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.events import TrialFinished

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


def test_fifty_trials_leak_no_files_threads_children_or_memory(runs: Path) -> None:
    if not os.environ.get("LOADERTOP_SOAK_ALONE"):
        test = f"{__file__}::test_fifty_trials_leak_no_files_threads_children_or_memory"
        env = {**os.environ, "LOADERTOP_SOAK_ALONE": "1"}
        args = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", test]
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=280)
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
        return
    me = psutil.Process()
    gc.collect()
    before = snapshot(me)
    threads_before = threading.active_count()
    configs = [TrialConfig(n, 32, 2, start_method="fork") if n else TrialConfig(0, 32) for n in (0, 1, 2, 3)]
    only = [configs[i % 4] for i in range(TRIALS)]
    settings = Settings(dataset="synthetic:cpu_ms=0.5,io_ms=0.5,kb=16", trial_seconds=0.6, block_seconds=0.1,
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
                (runner_process,) = me.children()
            if len(driver) < TRIALS:  # after the last trial the runner is already on its way out
                runner.append(snapshot(runner_process))
    family.gone_within(2.0)
    assert sweep.result is not None
    assert [t.status for t in sweep.result.trials] == ["ok"] * TRIALS

    warm, last = driver[9], driver[-1]  # after 10 trials every code path has run once or twice
    print(f"driver after trial 10: {warm}; after trial {TRIALS}: {last}; runner: {runner[9]} -> {runner[-1]}")
    assert last["fds"] <= warm["fds"] and last["threads"] <= warm["threads"]
    assert driver[-2]["children"] == warm["children"] == 1  # the runner, nothing else (it leaves after the last)
    assert last["uss_mb"] - warm["uss_mb"] < 16, (warm, last)
    # The runner at the second-to-last trial (after the last one it is already on its way out).
    assert runner[-1]["fds"] <= runner[9]["fds"] and runner[-1]["threads"] <= runner[9]["threads"]
    assert runner[-1]["uss_mb"] - runner[9]["uss_mb"] < 16

    gc.collect()
    after = snapshot(me)
    assert after["fds"] <= before["fds"] and after["children"] == before["children"]
    assert threading.active_count() <= threads_before, [t.name for t in threading.enumerate()]
    assert os.getpid() == me.pid
