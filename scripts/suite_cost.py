"""Where the suite's time goes: a pytest plugin that samples the machine's busy CPU (/proc/stat) every 0.25 s and
records when each test ran, then gives each interval's CPU to the tests running in it, in equal shares. The CPU of
every process a test starts (a CLI, its runner template, trial workers, torchrun ranks) lands on it this way, which
os.times() of the test's process misses (a runner template is reaped long after its test). On a machine doing
nothing else, the CPU the suite used is what the report calls CPU; a share is an estimate where tests overlap.

    PYTHONPATH=scripts pytest -p suite_cost [-q]     # the report follows pytest's summary

The wall time of a CPU-bound suite is its CPU over the machine's CPUs at the utilization the report prints: cutting
wall time means cutting the CPU of the tests at the top, not adding pytest-xdist workers.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

SAMPLE_S = 0.25
TOP = 25


def busy_cpu_s() -> float:
    """CPU-seconds the whole machine has spent busy since boot (user, nice, system, irq, softirq, steal)."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    return sum(fields[i] for i in (0, 1, 2, 5, 6, 7)) / os.sysconf("SC_CLK_TCK")


FOLDER_ENV = "LOADERTOP_SUITE_COST_DIR"  # the controller's folder, which its xdist workers inherit
SAMPLES_KEY = pytest.StashKey[list[tuple[float, float]]]()
STOP_KEY = pytest.StashKey[threading.Event]()


def pytest_configure(config: pytest.Config) -> None:
    if getattr(config, "workerinput", None) is not None:
        return
    os.environ[FOLDER_ENV] = tempfile.mkdtemp(prefix="loadertop-suite-cost-")
    samples: list[tuple[float, float]] = []
    stop = threading.Event()
    config.stash[SAMPLES_KEY], config.stash[STOP_KEY] = samples, stop

    def sample() -> None:
        while not stop.is_set():
            samples.append((time.monotonic(), busy_cpu_s()))
            stop.wait(SAMPLE_S)

    threading.Thread(target=sample, name="suite-cost-sampler", daemon=True).start()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    started = time.monotonic()
    yield
    line = json.dumps([item.nodeid, started, time.monotonic()])
    with open(Path(os.environ[FOLDER_ENV]) / f"tests.{os.getpid()}.jsonl", "a") as out:
        out.write(line + "\n")


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if getattr(config, "workerinput", None) is not None or SAMPLES_KEY not in config.stash:
        return
    config.stash[STOP_KEY].set()
    samples = config.stash[SAMPLES_KEY]
    logs = Path(os.environ[FOLDER_ENV])
    tests = [json.loads(line) for log in logs.glob("tests.*.jsonl") for line in log.read_text().splitlines()]
    shutil.rmtree(logs, ignore_errors=True)
    if len(samples) < 2 or not tests:
        return
    shares, outside = cpu_shares(samples, tests)
    span = samples[-1][0] - samples[0][0]
    total = samples[-1][1] - samples[0][1]
    write = terminalreporter.write_line
    write("")
    write(f"suite cost: {total:.0f} CPU-s in {span:.0f} s, {total / span:.2f} of {os.cpu_count()} CPUs busy on average")
    write(f"  {outside:.0f} CPU-s while no test ran (start-up, collection, the end)")
    by_file: dict[str, float] = defaultdict(float)
    for nodeid, cpu in shares.items():
        by_file[nodeid.split("::")[0]] += cpu
    walls = {nodeid: end - start for nodeid, start, end in tests}
    write(f"  by file (top {TOP}), CPU-s:")
    for name, cpu in most(by_file):
        write(f"    {cpu:7.1f}  {name}")
    write(f"  by test (top {TOP}), CPU-s and wall s:")
    for nodeid, cpu in most(shares):
        write(f"    {cpu:7.1f} {walls[nodeid]:6.1f}  {nodeid}")


def cpu_shares(samples: list[tuple[float, float]], tests: list[list[Any]]) -> tuple[dict[str, float], float]:
    """Each sampling interval's CPU, split evenly over the tests running in it; and the CPU of intervals none ran in."""
    shares: dict[str, float] = defaultdict(float)
    outside = 0.0
    for (t0, c0), (t1, c1) in itertools.pairwise(samples):
        running = [nodeid for nodeid, start, end in tests if start < t1 and end > t0]
        if not running:
            outside += c1 - c0
        for nodeid in running:
            shares[nodeid] += (c1 - c0) / len(running)
    return shares, outside


def most(cpu: dict[str, float]) -> list[tuple[str, float]]:
    return sorted(cpu.items(), key=lambda item: item[1], reverse=True)[:TOP]
