"""How long a sweep waits for its runner: exec'd (imports torch) against forked from the runner template.

    python benchmarks/runner_start.py [--repeats 5]

Times `start_runner` to the runner's Ready, the wait every sweep starts with, in this process: the first start pays
for the template (it imports torch once), the next ones fork from it. The exec'd runner is timed the same way,
started through env(1) so that no template is used. Prints one table; results are recorded in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

from loadertop.core.engine.drive import runner_link
from loadertop.core.engine.drive.runner_start import template_pid


def time_start(log: Path, argv: tuple[str, ...]) -> float:
    began = time.perf_counter()
    runner = runner_link.start_runner(log, threading.Event(), argv)
    took = time.perf_counter() - began
    runner.close()
    return took


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    repeats = parser.parse_args().repeats
    log = Path(tempfile.mkdtemp()) / "runner.log"
    # The default command through env(1): another argv, so start_runner execs it (the template serves the default)
    execd = [time_start(log, ("env", *runner_link.RUNNER_ARGV)) for _ in range(repeats)]
    first = time_start(log, runner_link.RUNNER_ARGV)
    assert template_pid() is not None, "no template was started"
    forked = [time_start(log, runner_link.RUNNER_ARGV) for _ in range(repeats)]
    print("| runner start to Ready | median s | min s | max s | n |")
    print("|---|---|---|---|---|")
    for name, times in (("exec'd (imports torch)", execd), ("first, with the template's start", [first]),
                        ("forked from the template", forked)):  # fmt: skip
        print(f"| {name} | {statistics.median(times):.3f} | {min(times):.3f} | {max(times):.3f} | {len(times)} |")


if __name__ == "__main__":
    main()
