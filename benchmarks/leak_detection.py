"""The leak detector on two real jobs: workers reading a list of Python dicts (copy-on-read growth) beside workers
reading the same numbers from one numpy array (flat). Both run at once under `loadertop attach --headless --json`.

    python benchmarks/leak_detection.py [--minutes 10] [--interval 5] [--out benchmarks/LEAK.md]

Reports, per job: each worker's last USS and slope, when the first leak warning came, and how many intervals
warned (on the numpy job every one of them is a false alarm).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def start(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(cmd, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)


def wait_for_job(pid: int, jobs: Path, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not (jobs / str(pid) / "sock").exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"job {pid} never published under {jobs}")
        time.sleep(0.5)


def summarize(store: str, lines: list[dict]) -> tuple[str, str | None]:
    """The table row of one job, and its first leak warning (None when it never warned)."""
    leak = [d for d in lines if any("grow" in w for w in d["warnings"])]
    first = f"{leak[0]['t']:.0f} s" if leak else "never"
    last = lines[-1] if lines else {"worker_uss_mb": [], "worker_uss_slope_mb_per_min": []}
    uss = ", ".join(f"{u:.0f}" for u in last["worker_uss_mb"] if u is not None)
    slopes = ", ".join("–" if s is None else f"{s:+.1f}" for s in last["worker_uss_slope_mb_per_min"])
    row = f"| {store} | {len(lines)} | {uss} | {slopes} | {first} | {len(leak)} |"
    return row, (leak[0]["warnings"][0] if leak else None)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--interval", type=float, default=5.0)
    p.add_argument("--out", type=Path, default=HERE / "LEAK.md")
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ltleak", dir="/tmp"))
    env = {**os.environ, "LOADERTOP_JOBS_DIR": str(tmp / "jobs")}
    procs: list[subprocess.Popen[bytes]] = []
    results: dict[str, Path] = {}
    try:
        jobs = {}
        for store in ("dicts", "numpy"):
            cmd = [sys.executable, str(HERE / "leak_job.py"), "--store", store, "--minutes", str(args.minutes + 1)]
            jobs[store] = start(cmd, env, tmp / f"{store}.log")
            procs.append(jobs[store])
        for store, job in jobs.items():
            wait_for_job(job.pid, tmp / "jobs")
            results[store] = tmp / f"{store}.jsonl"
            cmd = [sys.executable, "-m", "loadertop", "attach", str(job.pid), "--headless",
                   "--interval", str(args.interval), "--json", str(results[store])]  # fmt: skip
            procs.append(start(cmd, env, tmp / f"attach-{store}.log"))
        time.sleep(args.minutes * 60)
    finally:
        for proc in procs:  # each runs in its own session: the group is the job and its workers
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGINT)
        for proc in procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
    rows = [
        f"`python benchmarks/leak_detection.py --minutes {args.minutes:g} --interval {args.interval:g}` "
        f"({time.strftime('%Y-%m-%d %H:%M')}): 4 persistent workers per job, batch 64, 20 ms step, both jobs at once.",
        "",
        "| samples stored as | intervals | last USS per worker (MB) | last slope per worker (MB/min) "
        "| first leak warning | intervals with a leak warning |",
        "|---|---|---|---|---|---|",
    ]
    firsts = []
    for store, path in results.items():
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
        row, first = summarize(store, lines)
        rows.append(row)
        if first:
            firsts.append(f"First warning on the {store} job: {first}")
    rows += ["", *firsts]
    text = "\n".join(rows) + "\n"
    print(text)
    args.out.write_text("# Leak detection on live jobs\n\n" + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
