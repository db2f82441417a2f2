"""Many ranks: `loadertop attach` on torchrun's pid follows every rank that publishes and names
the slowest by its data wait. The fold is checked on made-up snapshots; then end to end, nothing faked: a real
`torchrun --nproc-per-node 2` whose rank 1 loads each sample slower, attached headless by the launcher's pid."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest
from live_fakes import kill_tree

from loadertop.core.engine.live import fold_ranks
from loadertop.faces.headless_attach import rank_lines
from loadertop.faces.tui.attach.demo import demo_snapshot

ROOT = Path(__file__).resolve().parents[1]
TORCHRUN = Path(sys.executable).with_name("torchrun")

# Each rank watches its own DataLoader; rank 1's dataset sleeps 8x longer per sample. Runs until the stop file.
RANK_JOB = """
import os, sys, time
from pathlib import Path
import torch
torch.set_num_threads(1)
from torch.utils.data import DataLoader, Dataset
import loadertop

stop = Path(sys.argv[1])
pause = 0.016 if os.environ["RANK"] == "1" else 0.002


class Data(Dataset):
    def __len__(self):
        return 100000

    def __getitem__(self, i):
        time.sleep(pause)
        return torch.zeros(4)


loader = DataLoader(Data(), batch_size=4, num_workers=1, persistent_workers=True)
deadline = time.monotonic() + 40
while not stop.exists() and time.monotonic() < deadline:
    for batch in loadertop.watch(loader):
        time.sleep(0.004)
        if stop.exists() or time.monotonic() > deadline:
            break
"""


def _snap(rank: str, pid: int, p95: float | None, rate: float | None, stall: float | None = None):  # type: ignore[no-untyped-def]
    mean = None if p95 is None else p95 / 2  # the fold names the slowest by the mean wait
    return replace(demo_snapshot(5), rank=rank, pid=pid, wait_ms_p95=p95, wait_ms_p99=p95, samples_per_s=rate,
                   stall_fraction=stall, wait_ms_mean=mean)  # fmt: skip


@pytest.mark.unit
def test_fold_names_the_rank_with_the_longest_data_wait_and_sums_the_job() -> None:
    view = fold_ranks(10, [_snap("1", 12, 40.0, 100.0, 0.6), _snap("0", 11, 2.0, 300.0, 0.05)], {})
    startup = replace(_snap("0", 11, 400.0, 300.0), wait_ms_mean=4.0)  # one worker start-up: a long p95, short mean
    assert fold_ranks(10, [startup, _snap("1", 12, 60.0, 60.0)], {}).slowest_rank == "1"
    assert [r.rank for r in view.ranks] == ["0", "1"]
    assert view.slowest_rank == "1" and [r.slowest for r in view.ranks] == [False, True]
    assert view.samples_per_s == pytest.approx(400.0)
    assert view.pacing.startswith("rank 1 waits longest for its data: 20.0 ms a batch, p95 40.0 ms")
    assert "rank 0: 1.0 ms a batch, p95 2.0 ms" in view.pacing
    lines = rank_lines(view)
    assert "<- slowest" in lines[1] and "<- slowest" not in lines[0] and lines[-1].startswith("  job: 400 samples/s")


@pytest.mark.unit
def test_fold_without_a_wait_names_no_rank_and_an_ended_rank_is_not_slowest() -> None:
    assert fold_ranks(10, [_snap("0", 11, None, None)], {}).slowest_rank is None
    alone = fold_ranks(10, [_snap("0", 11, 5.0, 200.0), _snap("1", 12, None, None)], {})
    spawned = fold_ranks(10, [_snap("0", 11, 5.0, 200.0), _snap("0", 12, 50.0, 20.0)], {})  # no RANK: both "0"
    assert [r.pid for r in spawned.ranks] == [11, 12] and [r.slowest for r in spawned.ranks] == [False, True]
    assert alone.slowest_rank is None and alone.pacing.startswith("only rank 0 took steps")
    gone = replace(fold_ranks(10, [_snap("1", 12, 90.0, 10.0)], {}).ranks[0], ended="the job exited")
    view = fold_ranks(10, [_snap("0", 11, 3.0, 300.0)], {12: gone})
    assert view.slowest_rank is None and view.samples_per_s == pytest.approx(300.0) and len(view.ranks) == 2


@pytest.mark.unit
def test_openmetrics_serves_a_series_per_rank_and_marks_the_slowest() -> None:
    pytest.importorskip("prometheus_client")
    from prometheus_client.parser import text_string_to_metric_families

    from loadertop.faces.openmetrics import MetricsServer

    view = fold_ranks(10, [_snap("0", 11, 2.0, 300.0, 0.05), _snap("1", 12, 40.0, 100.0, 0.6)], {})
    server = MetricsServer("127.0.0.1:0")
    try:
        server.set_job(pid=10, command="torchrun --nproc-per-node 2 train.py", hostname="node7", rank="all")
        server.update(replace(_snap("0", 11, 2.0, 300.0, 0.05), ranks=view))
        with urllib.request.urlopen(server.url, timeout=5) as response:
            text = response.read().decode()
    finally:
        server.close()
    families = {f.name: [(s.labels, s.value) for s in f.samples] for f in text_string_to_metric_families(text)}
    rates = {labels["rank"]: (labels["pid"], value) for labels, value in families["loadertop_samples_per_second"]}
    assert rates == {"0": ("11", 300.0), "1": ("12", 100.0)}
    assert {labels["rank"]: value for labels, value in families["loadertop_rank_slowest"]} == {"0": 0.0, "1": 1.0}
    ((total_labels, total),) = families["loadertop_job_samples_per_second"]
    assert total == pytest.approx(400.0) and total_labels["rank"] == "all" and total_labels["pid"] == "10"
    means = {g["rank"]: v for g, v in families["loadertop_data_wait_mean_seconds"]}
    assert means == {"0": pytest.approx(0.001), "1": pytest.approx(0.020)}
    waits = {(g["rank"], g["quantile"]): v for g, v in families["loadertop_data_wait_seconds"]}
    assert waits[("1", "0.95")] == pytest.approx(0.040) and waits[("0", "0.99")] == pytest.approx(0.002)
    assert {g["rank"] for g, _ in families["loadertop_worker_uss_bytes"]} == {"0"}  # the shown rank's memory


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun is not installed beside this Python")
def test_attach_on_torchruns_pid_shows_every_rank_and_names_rank_1_slowest(tmp_path: Path) -> None:
    jobs, stop, script = tmp_path / "jobs", tmp_path / "stop", tmp_path / "ranks_job.py"
    jobs.mkdir()
    script.write_text(RANK_JOB)
    env = {**os.environ, "LOADERTOP_JOBS_DIR": str(jobs), "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    launcher = subprocess.Popen(
        [str(TORCHRUN), "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(_free_port()),
         str(script), str(stop)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    attach = None
    try:
        deadline = time.monotonic() + 60  # torchrun and two ranks importing torch, on a loaded machine
        while len([p for p in jobs.iterdir() if (p / "sock").exists()]) < 2:
            assert launcher.poll() is None and time.monotonic() < deadline, "the ranks never published"
            time.sleep(0.1)
        out = tmp_path / "live.jsonl"
        attach = subprocess.Popen(
            [sys.executable, "-m", "loadertop", "attach", str(launcher.pid), "--headless", "--interval", "1",
             "--json", str(out)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        assert attach.stdout is not None
        lines: list[str] = []
        for line in attach.stdout:
            lines.append(line.rstrip())
            named = sum("<- slowest" in s for s in lines)
            if (named >= 2 and sum("  rank " in s for s in lines[-4:]) >= 2) or time.monotonic() > deadline + 4:
                stop.touch()
                break
        attach.wait(10)
        lines += attach.stdout.read().splitlines()
        text = "\n".join(lines)
        assert lines[0].startswith(f"attached to launcher pid {launcher.pid}"), text
        rows = [line for line in lines if line.startswith("  rank ")]
        assert any(line.startswith("  rank  0") for line in rows) and any(r.startswith("  rank  1") for r in rows), text
        slowest = [line for line in rows if "<- slowest" in line]
        assert slowest and all(line.startswith("  rank  1") for line in slowest), text
        assert "ended: every rank exited" in text, text
        records = [json.loads(line) for line in out.read_text().splitlines()]
        named = [r["ranks"] for r in records if r["ranks"]["slowest_rank"] is not None]
        assert named and {row["rank"] for row in named[-1]["ranks"]} == {"0", "1"}
        assert all(v["slowest_rank"] == "1" for v in named) and named[-1]["samples_per_s"] > 0
        assert launcher.wait(10) == 0
    finally:
        stop.touch()
        if attach is not None and attach.poll() is None:
            kill_tree(attach)
        kill_tree(launcher)
