"""What the TUI costs the trial it measures: the same single trial headless and in the real TUI (tmux 120x40).

    python benchmarks/tui_overhead.py --runs 5            # alternating headless / TUI, 5 runs each
    python benchmarks/tui_overhead.py --runs 5 --label after --out benchmarks/TUI_OVERHEAD.md

Each run is one grid trial (2 workers, a CPU-bound synthetic dataset, no I/O wait). Recorded per run: the trial's
samples/s (from the run folder's result.json) and the CPU seconds the loadertop process itself used while the trial
process existed, per second of that window: the monitor's cost, the primary figure on a shared machine (samples/s
is noisy when other work runs). The TUI run ends by itself: the script waits for result.json, then sends `q`.
Needs tmux and psutil; writes a Markdown table to --out (appending a section per --label).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
POLL_S = 0.05


@dataclass
class Run:
    face: str
    samples_per_s: float
    cpu_s: float  # loadertop's own process, user + system, while the trial process existed
    trial_s: float  # how long the trial process existed

    @property
    def cpu_per_s(self) -> float:
        return self.cpu_s / self.trial_s if self.trial_s > 0 else float("nan")


def sweep_args(out: Path, args: argparse.Namespace) -> list[str]:
    return [
        sys.executable, "-m", "loadertop", "--search", "grid", "--workers", str(args.workers),
        "--trial-seconds", str(args.trial_seconds), "--dataset", "synthetic",
        "--dataset-arg", f"cpu_ms={args.cpu_ms}", "--dataset-arg", "io_ms=0", "--out", str(out),
    ]  # fmt: skip


def cpu_of(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


def trial_running(proc: psutil.Process) -> bool:
    """loadertop -> runner -> trial: the trial process is a grandchild, alive only while the trial runs."""
    try:
        return any(child.children() for child in proc.children())
    except psutil.Error:
        return False


def watch(pid: int, out: Path) -> tuple[float, float]:
    """Poll until the run folder has result.json; (CPU seconds, seconds) of loadertop while the trial ran."""
    proc = psutil.Process(pid)
    first: tuple[float, float] | None = None
    last: tuple[float, float] | None = None
    while not list(out.glob("*/result.json")):
        try:
            if trial_running(proc):
                point = (time.monotonic(), cpu_of(proc))
                first = first or point
                last = point
        except psutil.Error:
            break
        time.sleep(POLL_S)
    if first is None or last is None:
        raise RuntimeError(f"never saw the trial process under pid {pid}")
    return last[1] - first[1], last[0] - first[0]


def samples_per_s(out: Path) -> float:
    result = json.loads(next(out.glob("*/result.json")).read_text())
    return float(result["trials"][0]["samples_per_s"])


def run_headless(args: argparse.Namespace, out: Path) -> Run:
    proc = subprocess.Popen(
        [*sweep_args(out, args), "--headless"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    cpu, span = watch(proc.pid, out)
    proc.wait(timeout=60)
    return Run("headless", samples_per_s(out), cpu, span)


def run_tui(args: argparse.Namespace, out: Path) -> Run:
    session = f"loadertop-bench-{os.getpid()}"
    command = " ".join(f"'{a}'" for a in sweep_args(out, args))
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "40", f"cd '{ROOT}' && exec {command}"],
        check=True,
    )
    try:
        pane = subprocess.run(
            ["tmux", "display-message", "-p", "-t", session, "#{pane_pid}"], capture_output=True, text=True, check=True
        )
        cpu, span = watch(int(pane.stdout.strip()), out)
        time.sleep(0.5)  # let the last frame draw, as a user would see it
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=True)
        deadline = time.monotonic() + 30
        while (
            time.monotonic() < deadline
            and subprocess.run(["tmux", "has-session", "-t", session], stderr=subprocess.DEVNULL).returncode == 0
        ):
            time.sleep(0.1)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], stderr=subprocess.DEVNULL)
    return Run("tui", samples_per_s(out), cpu, span)


def summary(runs: list[Run], face: str) -> tuple[float, float]:
    mine = [r for r in runs if r.face == face]
    return statistics.median(r.samples_per_s for r in mine), statistics.median(r.cpu_per_s for r in mine)


def report(runs: list[Run], args: argparse.Namespace) -> str:
    lines = [
        f"## {args.label}: {args.runs} runs each, alternating ({time.strftime('%Y-%m-%d %H:%M')})",
        "",
        f"One grid trial: {args.workers} workers, synthetic cpu_ms={args.cpu_ms} io_ms=0, "
        f"{args.trial_seconds:g} s; {psutil.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the end.",
        "",
        "| run | face | samples/s | loadertop CPU s | trial s | CPU s per trial-second |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for i, r in enumerate(runs, 1):
        lines.append(
            f"| {i} | {r.face} | {r.samples_per_s:,.0f} | {r.cpu_s:.2f} | {r.trial_s:.1f} | {r.cpu_per_s:.3f} |"
        )
    (h_sps, h_cpu), (t_sps, t_cpu) = summary(runs, "headless"), summary(runs, "tui")
    lines += [
        "",
        f"Median: headless {h_sps:,.0f} samples/s at {h_cpu:.3f} CPU s/s; TUI {t_sps:,.0f} samples/s at "
        f"{t_cpu:.3f} CPU s/s. TUI vs headless: samples/s {t_sps / h_sps - 1:+.1%}, "
        f"extra monitor CPU {t_cpu - h_cpu:+.3f} CPU s per trial-second.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5, help="runs per face (default 5)")
    p.add_argument("--trial-seconds", type=float, default=10.0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--cpu-ms", type=float, default=3.0)
    p.add_argument("--label", default="run", help="section title in --out")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "TUI_OVERHEAD.md")
    args = p.parse_args()
    if shutil.which("tmux") is None:
        sys.exit("tui_overhead: needs tmux")
    runs: list[Run] = []
    for i in range(args.runs):
        for face in ("headless", "tui") if i % 2 == 0 else ("tui", "headless"):
            with tempfile.TemporaryDirectory(prefix="loadertop-bench-") as tmp:
                run = (run_headless if face == "headless" else run_tui)(args, Path(tmp))
            runs.append(run)
            print(f"{face:8} {run.samples_per_s:8,.0f} samples/s  {run.cpu_per_s:.3f} CPU s/s", flush=True)
    text = report(runs, args)
    print(text)
    with args.out.open("a") as handle:
        handle.write(text + "\n")


if __name__ == "__main__":
    main()
