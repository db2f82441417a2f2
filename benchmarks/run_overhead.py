"""What `loadertop run` costs a job that never imports loadertop: its own step rate plain and under run.

    python benchmarks/run_overhead.py [--repeats 5] [--seconds 5] [--step-ms 1]

The job (written to a temporary file) iterates a DataLoader over an in-memory TensorDataset (0 workers: the
per-batch cost of a real loader without worker noise) with a busy-wait step of --step-ms, for --seconds from its
first batch, and prints its own steps/s and samples/s. Each repeat runs it plain (`python job.py`) and under
`loadertop run --headless --interval 1 --json FILE -- python job.py`, interleaved. Reported: the median and best
steps/s of each, the overhead (how much longer a step takes under run) and, per run, the job's own samples/s against
run's over the intervals wholly inside the loop (weighted by their length). Target: overhead <= 1% at 1 ms steps,
ratio within 0.85-1.15.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
JOB = r"""
import sys, time
import torch
from torch.utils.data import DataLoader, TensorDataset

seconds, step_s = float(sys.argv[1]), float(sys.argv[2]) / 1000
loader = DataLoader(TensorDataset(torch.zeros(4096, 16)), batch_size=8)
perf = time.perf_counter
steps, start = 0, None
while start is None or perf() < start + seconds:
    for (x,) in loader:
        now = perf()
        if start is None:
            start = now
        else:
            steps += 1
        end = now + step_s
        while perf() < end:
            pass
        if perf() >= start + seconds:
            break
elapsed = perf() - start
print(f"STEPS_PER_S {steps / elapsed:.2f} SAMPLES_PER_S {steps * 8 / elapsed:.2f}", flush=True)
"""


def own(out: str, key: str) -> float:
    return float(out.split(key + " ")[1].split()[0])


def rate_inside(snaps: list[dict[str, Any]]) -> float:
    """run's samples/s over the intervals wholly inside the loop, weighted by their length (tests/test_run.py)."""
    samples = seconds = 0.0
    for before, now, after in zip(snaps, snaps[1:], snaps[2:], strict=False):
        if before["samples_per_s"] and now["samples_per_s"] and after["samples_per_s"]:
            span = now["t"] - before["t"]
            samples, seconds = samples + now["samples_per_s"] * span, seconds + span
    return samples / seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--step-ms", type=float, default=1.0)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="lt-run-"))
    job = tmp / "job.py"
    job.write_text(JOB)
    env = {**os.environ, "LOADERTOP_JOBS_DIR": str(tmp / "jobs"), "PYTHONPATH": str(ROOT)}
    cli = [sys.executable, "-c", "import sys; from loadertop.faces.cli import main; sys.exit(main())", "run"]
    plain, watched, ratios = [], [], []
    for i in range(args.repeats):
        job_args = [sys.executable, str(job), str(args.seconds), str(args.step_ms)]
        done = subprocess.run(job_args, env=env, capture_output=True, text=True, check=True)
        plain.append(own(done.stdout, "STEPS_PER_S"))
        live = tmp / f"live{i}.jsonl"
        command = [*cli, "--headless", "--interval", "1", "--json", str(live), "--", *job_args]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
        watched.append(own(done.stdout, "STEPS_PER_S"))
        snaps = [json.loads(line) for line in live.read_text().splitlines()]
        ratios.append(own(done.stdout, "SAMPLES_PER_S") / rate_inside(snaps))
        print(f"repeat {i + 1}: plain {plain[-1]:.1f} steps/s, under run {watched[-1]:.1f} steps/s, "
              f"job/run samples/s ratio {ratios[-1]:.3f}", flush=True)  # fmt: skip
    for name, pick in (("median", statistics.median), ("best", max)):
        a, b = pick(plain), pick(watched)
        print(f"{name}: plain {a:.1f} steps/s, under run {b:.1f} steps/s, overhead {(a / b - 1) * 100:+.2f}% "
              f"({(1 / b - 1 / a) * 1e6:+.2f} µs a step)")  # fmt: skip
    print(f"ratio job/run samples/s: min {min(ratios):.3f}, median {statistics.median(ratios):.3f}, "
          f"max {max(ratios):.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
