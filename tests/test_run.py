"""`loadertop run -- CMD...` end to end, nothing faked: a training script that never imports loadertop runs under
`loadertop run` in a subprocess; the sitecustomize hook on its PYTHONPATH watches its DataLoader through watch()'s
own path, and run shows it as `attach --headless` does, then exits with the job's code."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
CLI = "import sys; from loadertop.faces.cli import main; sys.exit(main())"
# loadertop as a terminal starts a foreground job: SIGINT at its default. A test process may have it ignored (a
# background job of a non-interactive shell does), and `loadertop run` hands the job what it was given, as the shell
# would have without it: the job would ignore the Ctrl-C this test sends.
TERMINAL_CLI = f"import signal; signal.signal(signal.SIGINT, signal.default_int_handler); {CLI}"

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
        timeout: float = 90) -> subprocess.CompletedProcess[str]:  # fmt: skip
    # `timeout`: a deadline for the job to end, not a verdict; beside two busy loops a spawned rank and its spawned
    # workers (each importing torch) took past 30 s
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    base = {**os.environ, "LOADERTOP_JOBS_DIR": str(jobs_root), "PYTHONPATH": str(ROOT), **(env or {})}
    command = [sys.executable, "-c", CLI, "run", *args]
    command = [str(script) if word == "TRAIN" else word for word in command]
    return subprocess.run(command, env=base, capture_output=True, text=True, timeout=timeout, cwd=tmp_path)


def rate_over_the_jobs_time(snaps: list[dict[str, Any]]) -> float:
    """run's samples/s over every interval, each weighted by the job's own time for its steps (an interval's rate is
    its samples over that time): what the job's own mean over its loop compares to, however unevenly the intervals
    fell beside a busy machine."""
    samples = seconds = 0.0
    for s in snaps:
        if s["samples_per_s"] and s["batches"]:
            took = s["batches"] * 8  # the job's batch size
            samples, seconds = samples + took, seconds + took / s["samples_per_s"]
    assert seconds >= 2, [(s["t"], s["batches"], s["samples_per_s"]) for s in snaps]
    return samples / seconds


def test_run_watches_an_unchanged_script_and_agrees_with_its_own_rate(jobs_root: Path, tmp_path: Path) -> None:
    live = tmp_path / "live.jsonl"
    done = run(["--headless", "--interval", "1", "--json", str(live), "--", sys.executable, "TRAIN", "4.5", "0", "0"],
               jobs_root, tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    own = float(done.stdout.split("SAMPLES_PER_S ")[1].split()[0])
    snaps = [json.loads(line) for line in live.read_text().splitlines()]
    assert snaps and snaps[-1]["ended"] and all(s["watched"] for s in snaps)
    theirs = rate_over_the_jobs_time(snaps)
    ratio = own / theirs
    print(f"job {own:.0f} samples/s, run {theirs:.0f} samples/s: ratio {ratio:.3f}")
    assert 0.95 <= ratio <= 1.05, (own, [s["samples_per_s"] for s in snaps])
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


def test_the_jobs_sitecustomize_still_runs(jobs_root: Path, tmp_path: Path) -> None:
    """The hook's sitecustomize hides the job's own one; it runs it after installing the hook."""
    own = tmp_path / "own_site"
    own.mkdir()
    marks = tmp_path / "marks"
    (own / "sitecustomize.py").write_text(f"import os\nopen({str(marks)!r}, 'a').write(f'{{os.getpid()}}\\n')\n")
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), str(own)])}
    job = "import os, sys; print('PID', os.getpid()); sys.exit(4)"
    done = run(["--headless", "--", sys.executable, "-c", job], jobs_root, tmp_path, env=env)
    assert done.returncode == 4, done.stderr
    pid = done.stdout.split("PID ")[1].split()[0]
    assert pid in marks.read_text().split()


SPAWNING = r"""
import multiprocessing as mp, os, sys, time
import torch
from torch.utils.data import DataLoader, TensorDataset

def rank():
    loader = DataLoader(TensorDataset(torch.zeros(512, 4)), batch_size=8, num_workers=1,
                        multiprocessing_context="spawn", persistent_workers=True)
    end = time.monotonic() + 1.5
    while time.monotonic() < end:
        for (x,) in loader:
            time.sleep(0.002)
    print("RANK", os.getpid(), "PUBLISHED", sorted(os.listdir(os.environ["LOADERTOP_JOBS_DIR"])), flush=True)

if __name__ == "__main__":
    child = mp.get_context("spawn").Process(target=rank)
    child.start()
    child.join()
    sys.exit(child.exitcode)
"""


def test_a_spawned_child_is_watched_and_its_workers_never_publish(jobs_root: Path, tmp_path: Path) -> None:
    """The hook reaches a spawned process (as DDP's ranks are started) through the environment; its spawned
    DataLoader workers run the hook too, iterate no loader and publish nothing."""
    script = tmp_path / "spawning.py"
    script.write_text(SPAWNING)
    live = tmp_path / "live.jsonl"
    done = run(["--headless", "--interval", "0.5", "--json", str(live), "--", sys.executable, str(script)],
               jobs_root, tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    rank = done.stdout.split("RANK ")[1].split()[0]
    assert f"PUBLISHED ['{rank}']" in done.stdout  # the rank alone: neither the parent nor the workers
    # the job's own pid is the launcher of the rank that published: it is followed under it, as torchrun's ranks are
    assert "attached to launcher pid " in done.stdout and f"  pid {rank}  " in done.stdout
    snaps = [json.loads(line) for line in live.read_text().splitlines()]
    assert any(s["samples_per_s"] for s in snaps) and any(len(s["workers"]) == 1 for s in snaps)


INTERRUPTED = r"""
import sys, time
import torch
from torch.utils.data import DataLoader, TensorDataset

try:
    while True:
        for (x,) in DataLoader(TensorDataset(torch.zeros(64, 4)), batch_size=8):
            time.sleep(0.01)
except KeyboardInterrupt:
    time.sleep(0.5)  # cleaning up: loadertop must not leave before the job
    print("JOB CLEANED UP", flush=True)
    sys.exit(7)
"""


def test_ctrl_c_reaches_the_job_and_run_outlives_it(jobs_root: Path, tmp_path: Path) -> None:
    """SIGINT to the foreground process group (what the terminal does on Ctrl-C): the job handles it, loadertop
    stays until the job has ended and exits with the job's code."""
    script = tmp_path / "interrupted.py"
    script.write_text(INTERRUPTED)
    env = {**os.environ, "LOADERTOP_JOBS_DIR": str(jobs_root), "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-c", TERMINAL_CLI, "run", "--headless", "--interval", "0.5", "--", sys.executable,
               str(script)]  # fmt: skip
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # "attached to pid N": the job publishes
        assert "attached to pid" in first, first
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=15)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == 7, err
    assert "JOB CLEANED UP" in out and "exited with code 7" in err


TUNED = r"""
import time
import torch
from torch.utils.data import DataLoader, Dataset

class Slow(Dataset):
    def __len__(self): return 256
    def __getitem__(self, i):
        time.sleep(0.001)
        return torch.tensor([float(i)])

loader = DataLoader(Slow(), batch_size=8, num_workers=0)
end = time.monotonic() + 4.5
while time.monotonic() < end:
    for batch in loader:
        time.sleep(0.002)
print("EPOCHS DONE", flush=True)
"""


def test_tune_tunes_the_first_loader_in_place_and_prints_the_line(jobs_root: Path, tmp_path: Path) -> None:
    script = tmp_path / "tuned.py"
    script.write_text(TUNED)
    done = run(["--headless", "--interval", "0.5", "--tune", "2", "--", sys.executable, str(script)],
               jobs_root, tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "EPOCHS DONE" in done.stdout
    assert "tune" in done.stdout  # tune's steps and its choice, among the notes
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("loadertop run: tuned:")]
    assert "DataLoader(" in line


# Each process's first sample waits 1.5 s (a heavy import inside __getitem__): in a 3 s budget the job's own 1 worker
# is all that fits, and no rival's start-up does.
SLOW_START = r"""
import os, time
import torch
from torch.utils.data import DataLoader, Dataset

class SlowStart(Dataset):
    started = set()
    def __len__(self): return 1200
    def __getitem__(self, i):
        if os.getpid() not in self.started:
            self.started.add(os.getpid())
            time.sleep(1.5)
        time.sleep(0.001)
        return torch.tensor([float(i)])

loader = DataLoader(SlowStart(), batch_size=8, num_workers=1)
end = time.monotonic() + 6
while time.monotonic() < end:
    for batch in loader:
        time.sleep(0.002)
print("EPOCHS DONE", flush=True)
"""


def test_tune_keeps_the_jobs_loader_when_one_configuration_fits_and_names_runs_option(
    jobs_root: Path, tmp_path: Path
) -> None:
    script = tmp_path / "slow_start.py"
    script.write_text(SLOW_START)
    done = run(["--headless", "--interval", "0.5", "--tune", "3", "--", sys.executable, str(script)],
               jobs_root, tmp_path, timeout=60)  # fmt: skip
    assert done.returncode == 0 and "EPOCHS DONE" in done.stdout, done.stderr
    why = (
        "kept w=1 bs=8 pf=2 fork, the job's own: only 1 configuration fit the 3 s budget, nothing to compare it with; "
        "a larger --tune budget measures the others"
    )
    # before: "chose w=0 bs=32 after 1 configurations ... only 0 workers measured ...; try max_workers"
    assert f"loadertop.tune: {why} (1 configuration measured in " in done.stderr
    said = [line for line in done.stderr.splitlines() if line.startswith("loadertop run: ")][-2:]
    kept = "loadertop run: tuned: DataLoader(dataset, batch_size=8, num_workers=1)"  # the job's own line
    assert said == [kept, f"loadertop run: why: {why}"]
    assert "max_workers" not in done.stdout + done.stderr and "budget_s" not in done.stdout + done.stderr


def test_under_torchrun_the_ranks_are_followed_under_the_launcher(jobs_root: Path, tmp_path: Path) -> None:
    live = tmp_path / "live.jsonl"
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1", "--master-port", "0"]
    done = run(["--headless", "--interval", "0.5", "--json", str(live), "--", *launcher, "TRAIN", "1.5", "0", "0"],
               jobs_root, tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    started = int(done.stderr.split("started pid ")[1].split(":")[0])
    assert f"attached to launcher pid {started}:" in done.stdout  # the job's own pid: its ranks are followed
    records = [json.loads(line) for line in live.read_text().splitlines()]
    assert any(r["samples_per_s"] for r in records)
    rows = [row for r in records for row in r["ranks"]["ranks"]]
    assert {row["rank"] for row in rows} == {"0"} and all(row["pid"] != started for row in rows)  # the rank, a child
