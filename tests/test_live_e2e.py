"""The live path end to end, nothing faked: a training job in a subprocess runs `loadertop.watch` (or `tune`) over
a real DataLoader with real workers and publishes through the real publisher; `open_session` reads its socket and
psutil reads its workers, as `loadertop attach` does; the job ends mid-view."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from loadertop.core.engine import find_jobs, open_session
from loadertop.core.model.live_protocol import TuneChose, TuneStep, decode

ROOT = Path(__file__).resolve().parents[1]

JOB = r"""
import sys, time, torch
from torch.utils.data import DataLoader, Dataset
import loadertop

class Slow(Dataset):
    def __len__(self): return 400
    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.tensor([float(i)])

loader = DataLoader(Slow(), batch_size=8, num_workers=2)
mode, seconds = sys.argv[1], float(sys.argv[2])
wrapped = loadertop.tune(loader, budget_s=3) if mode == "tune" else None
end = time.monotonic() + seconds
while time.monotonic() < end:
    for batch in (wrapped if wrapped is not None else loadertop.watch(loader)):
        time.sleep(0.004)
        if time.monotonic() >= end:
            break
"""


def start_job(jobs_root: Path, mode: str, seconds: float) -> subprocess.Popen[bytes]:
    env = {**os.environ, "LOADERTOP_JOBS_DIR": str(jobs_root), "PYTHONPATH": str(ROOT)}
    job = subprocess.Popen([sys.executable, "-c", JOB, mode, str(seconds)], env=env, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not (jobs_root / str(job.pid) / "sock").exists():
        assert job.poll() is None and time.monotonic() < deadline, "the job never became watchable"
        time.sleep(0.1)
    return job


def test_a_watched_job_is_listed_viewed_and_seen_ending(jobs_root: Path) -> None:
    job = start_job(jobs_root, "watch", seconds=6)
    try:
        assert [j.pid for j in find_jobs()] == [job.pid]
        session = open_session(job.pid, interval=0.5)
        assert session.watched
        snaps = list(session.snapshots())  # until the job ends
    finally:
        job.kill()
        job.wait()
    measured = [s for s in snaps if s.samples_per_s]
    assert measured, "no interval had throughput"
    # 2 workers that sleep 2 ms a sample, batches of 8 and a 4 ms step: far from zero, far below 8/0.004 = 2000/s
    assert 100 < max(s.samples_per_s for s in measured) < 2000
    assert all(s.stall_fraction is not None and 0.0 <= s.stall_fraction <= 1.0 for s in measured)
    assert any(len(s.workers) == 2 and all(w.uss_mb for w in s.workers) for s in snaps)
    assert any(s.epoch_ends for s in snaps), "epochs of 50 batches end every ~0.5 s"
    assert snaps[-1].ended
    assert not any(s.ended for s in snaps[:-1])
    assert not (jobs_root / str(job.pid)).exists()  # the job removed its folder at exit
    assert not [p for p in psutil.Process().children(recursive=True) if p.pid == job.pid]


def test_a_tuned_job_publishes_its_trace_and_its_choice(jobs_root: Path) -> None:
    job = start_job(jobs_root, "tune", seconds=12)
    try:
        session = open_session(job.pid, interval=0.5)
        notes = [n for s in session.snapshots() for n in s.notes]
        _, err = job.communicate(timeout=30)
    finally:
        job.kill()
        job.wait()
    assert any("chose" in n or "kept" in n or "settled" in n for n in notes), notes
    assert b"DataLoader(" in err  # it says what it chose, with the line to paste
    assert not (jobs_root / str(job.pid)).exists()  # the job folder is removed at exit; its trace is kept beside
    (kept,) = jobs_root.glob(f"{job.pid}-*.tune.jsonl")
    trace = [decode(line) for line in kept.read_text().splitlines()]
    steps, chose = [m for m in trace if isinstance(m, TuneStep)], trace[-1]
    assert isinstance(chose, TuneChose) and steps, [m.TYPE for m in trace]
    # A step for every configuration measured (beside a busy machine the 3 s budget may fit only the job's own), and
    # the choice one of them
    assert chose.trials == len(steps) and chose.config in {s.config for s in steps}, trace
