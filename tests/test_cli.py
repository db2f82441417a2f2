"""The command line as a user or a script meets it: real processes, real exit codes."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from loadertop import __version__
from loadertop.core.model.config import settings_options


def loadertop(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loadertop", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def test_version_and_help() -> None:
    assert loadertop("--version").stdout.strip() == f"loadertop {__version__}"
    out = loadertop("--help")
    assert out.returncode == 0
    for flag in ("--headless", "--json", "--csv", "--dataset", "--workers", "--search", "--step-ms", "--trial-seconds"):
        assert flag in out.stdout
    # Every setting's flag and help come from its Settings field (loadertop.core.model.config.Option).
    flat = " ".join(out.stdout.split())
    for _, opt in settings_options():
        if opt.flag:
            assert opt.flag in flat and " ".join(opt.help.split()[:4]) in flat, opt.flag


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--workers", "8-2"], "8-2"),
        (["--workers", "-1"], "negative"),
        (["--workers", "x"], "'x' is not a whole number"),
        (["--batch-size", "0"], "--batch-size"),
        (["--pin-memory", "maybe"], "--pin-memory"),
        (["--trial-seconds", "-1"], "--trial-seconds"),
        (["--tolerance", "5"], "--tolerance"),
        (["--start-method", "thread"], "--start-method"),
        (["--json", "/nonexistent-dir/out.json"], "does not exist"),
        (["--no-such-flag"], "unrecognized arguments"),
        (["--dataset-arg", "novalue"], "KEY=VALUE"),
        (["--ranks", "0"], "--ranks"),
        (["--consumer", "steps:train", "--step-ms", "5"], "drop --step-ms"),
        (["--mem-floor", "lots"], "--mem-floor"),
        (["--files-per-sample", "0"], "--files-per-sample"),
        (["--search", "random"], "invalid choice"),
    ],
)
def test_bad_usage_is_one_line_and_exit_2(args: list[str], needle: str) -> None:
    out = loadertop("--headless", *args)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("no_such_module_xyz:make", "cannot import 'no_such_module_xyz'"),
        ("json:no_such_factory", "has no attribute 'no_such_factory'"),
        ("/nonexistent/data.py:make", "not found"),
        ("synthetic:bogus=1", "bogus"),
    ],
)
def test_bad_dataset_spec_is_one_line_and_exit_2(spec: str, needle: str, tmp_path: Path) -> None:
    out = loadertop("--headless", "--workers", "0", "--out", str(tmp_path), "--dataset", spec)
    assert out.returncode == 2, out.stderr
    assert needle in out.stderr.strip().splitlines()[-1]
    assert "Traceback" not in out.stderr


def test_headless_sweep_writes_table_json_and_csv(tmp_path: Path) -> None:
    json_path, csv_path = tmp_path / "out.json", tmp_path / "out.csv"
    # No --headless: stdout is a pipe here, so loadertop must choose the headless face by itself.
    out = loadertop(
        "--workers", "0,1", "--trial-seconds", "1.5", "--dataset", "synthetic:cpu_ms=0.2,io_ms=2,kb=16",
        "--out", str(tmp_path / "runs"), "--json", str(json_path), "--csv", str(csv_path),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "samples/s" in out.stdout and "DataLoader(dataset, batch_size=32" in out.stdout
    assert "[1/2]" in out.stderr and "[2/2]" in out.stderr  # one progress line per trial
    data = json.loads(json_path.read_text())
    assert [t["config"]["num_workers"] for t in data["trials"]] == [0, 1]
    assert data["recommendation"]["config"]["num_workers"] in (0, 1)
    rows = list(csv.DictReader(csv_path.open()))
    assert [r["num_workers"] for r in rows] == ["0", "1"] and all(float(r["samples_per_s"]) > 0 for r in rows)
    run_dirs = list((tmp_path / "runs").iterdir())
    assert len(run_dirs) == 1 and (run_dirs[0] / "trials.jsonl").exists()
