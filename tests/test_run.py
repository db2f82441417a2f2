"""`loadertop run -- CMD...` end to end, nothing faked: a training script that never imports loadertop runs under
`loadertop run` in a subprocess; the sitecustomize hook on its PYTHONPATH watches its DataLoader through watch()'s
own path, and run shows it as `attach --headless` does, then exits with the job's code."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CLI = "import sys; from loadertop.cli import main; sys.exit(main())"

# Never imports loadertop. Prints its own samples/s over its loop (from its first batch), then exits with argv[3].
TRAIN = r"""
import sys, time
import torch
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(TensorDataset(torch.zeros(2048, 4)), batch_size=8, num_workers=int(sys.argv[2]))
seconds = float(sys.argv[1])
samples, start = 0, None
while start is None or time.perf_counter() < start + seconds:
    for (x,) in loader:
        now = time.perf_counter()
        if start is None:
            start = now
        else:
            samples += x.shape[0]  # the first batch's wait is start-up: counted from it, as a rate
        time.sleep(0.002)
        if time.perf_counter() >= start + seconds:
            break
print(f"SAMPLES_PER_S {samples / (time.perf_counter() - start):.1f}", flush=True)
sys.exit(int(sys.argv[3]))
"""


def run(args: list[str], jobs_root: Path, tmp_path: Path, env: dict[str, str] | None = None,
        timeout: float = 30) -> subprocess.CompletedProcess[str]:  # fmt: skip
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    base = {**os.environ, "LOADERTOP_JOBS_DIR": str(jobs_root), "PYTHONPATH": str(ROOT), **(env or {})}
    command = [sys.executable, "-c", CLI, "run", *args]
    command = [str(script) if word == "TRAIN" else word for word in command]
    return subprocess.run(command, env=base, capture_output=True, text=True, timeout=timeout, cwd=tmp_path)


def test_run_watches_an_unchanged_script_and_agrees_with_its_own_rate(jobs_root: Path, tmp_path: Path) -> None:
    live = tmp_path / "live.jsonl"
    done = run(["--headless", "--interval", "1", "--json", str(live), "--", sys.executable, "TRAIN", "4.5", "0", "0"],
               jobs_root, tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    own = float(done.stdout.split("SAMPLES_PER_S ")[1].split()[0])
    snaps = [json.loads(line) for line in live.read_text().splitlines()]
    assert snaps and snaps[-1]["ended"] and all(s["watched"] for s in snaps)
    rates = [s["samples_per_s"] for s in snaps]
    # The intervals wholly inside the loop: one with steps before and after it (the first and last are partial).
    inside = [r for before, r, after in zip(rates, rates[1:], rates[2:], strict=False) if before and r and after]
    assert len(inside) >= 2, rates
    ratio = own / statistics.median(inside)
    print(f"job {own:.0f} samples/s, run {statistics.median(inside):.0f} samples/s: ratio {ratio:.3f}")
    assert 0.85 <= ratio <= 1.15, (own, rates)
    assert "attached to pid" in done.stdout and "samples/s" in done.stdout
    assert "exited with code 0" in done.stderr
    assert not list(jobs_root.iterdir()), "the job folder is removed when the job exits"


def test_the_jobs_exit_code_passes_through(jobs_root: Path, tmp_path: Path) -> None:
    done = run(["--headless", "--interval", "0.5", "--", sys.executable, "TRAIN", "0.5", "1", "3"], jobs_root, tmp_path)
    assert done.returncode == 3, done.stderr
    assert "SAMPLES_PER_S" in done.stdout and "exited with code 3" in done.stderr


def test_loadertop_watch_0_publishes_nothing(jobs_root: Path, tmp_path: Path) -> None:
    live = tmp_path / "live.jsonl"
    done = run(["--headless", "--interval", "0.5", "--json", str(live), "--", sys.executable, "TRAIN", "1", "0", "0"],
               jobs_root, tmp_path, env={"LOADERTOP_WATCH": "0"})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "SAMPLES_PER_S" in done.stdout
    assert not live.exists() and not list(jobs_root.iterdir())
    assert "nothing to show" in done.stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [(["--headless"], "no command after --"), (["--headless", "--", "no-such-command-xyz"], "command not found")],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], said: str, jobs_root: Path, tmp_path: Path) -> None:
    done = run(args, jobs_root, tmp_path)
    assert done.returncode == 2
    assert said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
