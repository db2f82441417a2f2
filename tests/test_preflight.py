"""The pre-flight checks: /dev/shm against the batches in flight, the dataset's pickle for spawn and
forkserver (the attribute that cannot be pickled named), --strict, and the first batch forecast from the first rungs
and checked against the measurement."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from procs import FAULTS
from test_faults import loadertop, one_line_exit_2

from loadertop.core.engine.verdict.preflight import (
    before_trials,
    first_batch_checks,
    forecast,
    pickle_check,
    shm_check,
    start_checks,
    strict_error,
)
from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.protocol import Checked
from loadertop.core.model.results import PreflightCheck as Check
from loadertop.core.model.results import SweepResult, TrialResult
from loadertop.core.trial.preflight import measure_pickle, tensor_bytes, unpicklable_path

ROOT = Path(__file__).resolve().parents[1]
MB = 1024 * 1024
# The check's batch of 2 samples of 1 MB each: a batch of 32 is 32 MB.
TWO_MB = Checked(True, batch_bytes=2 * MB, batch_samples=2)


def configs(*workers: int, batch: int = 32, prefetch: int = 2, method: str = "fork") -> list[TrialConfig]:
    return [TrialConfig(w, batch, prefetch if w else None, start_method=method if w else None) for w in workers]


@pytest.mark.unit
def test_a_small_shm_is_a_warning_with_the_arithmetic() -> None:
    check = shm_check(64.0, TWO_MB, Settings(ranks=2), configs(0, 2, 8))
    assert check.level == "warning" and check.check == "shm"
    # the worst configuration: 8 workers × prefetch 2 × 32 MB × 2 ranks = 1024 MB against 64 MB free
    assert "8 workers × prefetch 2 × 32 MB a batch (batch 32) × 2 ranks = 1.0 GB in flight" in check.message
    assert "/dev/shm has 64 MB free" in check.message and "Bus error" in check.message
    assert check.numbers["in_flight_mb"] == pytest.approx(1024) and check.numbers["free_mb"] == 64.0


@pytest.mark.unit
def test_enough_shm_is_said_with_its_share() -> None:
    check = shm_check(4096.0, TWO_MB, Settings(), configs(0, 4))
    assert check.level == "info" and "256 MB in flight, 6% of 4.0 GB free" in check.message


@pytest.mark.unit
def test_without_a_batch_or_workers_the_shm_check_says_why_not() -> None:
    assert "no configuration has workers" in shm_check(10.0, TWO_MB, Settings(), configs(0)).message
    unread = shm_check(10.0, Checked(True), Settings(), configs(4)).message
    assert unread.startswith("pre-flight /dev/shm: not checked")


@pytest.mark.unit
def test_a_slow_pickle_warns_with_each_workers_share() -> None:
    checked = Checked(True, pickle_bytes=300 * MB, pickle_dumps_s=0.25, pickle_loads_s=0.2)
    check = pickle_check(checked, ["spawn"], 16)
    assert check.level == "warning"  # 16 × 0.25 + 0.2 = 4.2 s before the last worker starts
    assert "pickles to 300 MB for spawn workers in 0.25 s (unpickling 0.20 s)" in check.message
    assert "0.45 s of each worker's start-up, 4.20 s before the last of 16 workers" in check.message
    assert pickle_check(checked, ["spawn"], 2).level == "info"


@pytest.mark.unit
def test_strict_turns_the_first_warning_into_one_line() -> None:
    small = Checked(True, batch_bytes=2 * MB, batch_samples=2, pickle_bytes=MB, pickle_dumps_s=1.0, pickle_loads_s=0)
    checks = before_trials(1.0, small, Settings(), configs(0, 4, method="spawn"))
    assert [c.check for c in checks] == ["shm", "pickle"]
    error = strict_error(checks)
    assert error is not None and "\n" not in error
    assert error.startswith("--strict: pre-flight /dev/shm") and error.endswith("(and 1 more pre-flight warnings)")
    assert strict_error(before_trials(1e6, TWO_MB, Settings(), configs(4))) is None


def trials_at(first_batch: dict[int, float]) -> list[TrialResult]:
    return [
        TrialResult(i, TrialConfig(w, 32, 2 if w else None), "ok", first_batch_s=s)
        for i, (w, s) in enumerate(first_batch.items())
    ]


@pytest.mark.unit
def test_the_first_batch_is_forecast_from_the_rungs_below_and_checked() -> None:
    # 0 workers: the batch alone takes 0.05 s; on 2 CPUs it is shared from 2 workers on; start-up ~0.08 s a worker
    measured = {0: 0.05, 1: 0.12, 2: 0.22, 4: 0.42, 8: 0.80, 32: 4.5}  # 32: slower than the rungs below say
    note = forecast(trials_at({w: s for w, s in measured.items() if w <= 2}), 32, cpus=2)
    # per worker: (1 × 0.07 + 2 × 0.17) / (1 + 4) = 0.082 s; at 32: 0.05 × 16 + 0.082 × 32 = 3.42 s
    assert note is not None and "the first batch at 32 workers should take 3.42 s" in note
    assert "the batch alone 0.05 s, shared over 2 CPUs, + 0.08 s to start each worker" in note
    checks = {c.numbers["workers"]: c for c in first_batch_checks(trials_at(measured), cpus=2)}
    assert set(checks) == {4, 8, 32}  # 0 workers start nothing; 1 and 2 are what the first forecast needs
    at8 = checks[8]
    assert at8.level == "info" and at8.numbers["fit_counts"] == "1, 2, 4" and at8.numbers["alone_s"] == 0.05
    assert at8.numbers["predicted_s"] == pytest.approx(0.05 * 4 + 8 * 1.69 / 21) and at8.numbers["measured_s"] == 0.8
    assert "within ±20%" in at8.message
    at32 = checks[32]
    assert at32.level == "warning" and "outside ±20%" in at32.message
    assert at32.numbers["ratio"] == pytest.approx(4.5 / at32.numbers["predicted_s"])  # type: ignore[operator]


@pytest.mark.unit
def test_a_start_up_fitted_below_zero_is_none() -> None:
    # 1- and 2-worker rungs a little quicker than the 0-worker batch: noise, not a negative start-up
    measured = {0: 0.0694, 1: 0.0675, 2: 0.0690, 4: 0.1405, 8: 0.2197}
    checks = {c.numbers["workers"]: c for c in first_batch_checks(trials_at(measured), cpus=2)}
    at4 = checks[4]  # fitted from 1 and 2 workers, both under the batch alone: -0.0009 s a worker, held at 0
    assert at4.numbers["per_worker_s"] == 0.0 and "+ 0.0 ms to start each worker" in at4.message
    assert "-0.0" not in at4.message
    assert at4.numbers["predicted_s"] == pytest.approx(0.0694 * 2)


def recorded_checks(alone_s: float, alone_cpu: float, rungs: dict[int, tuple[float, float]]) -> dict[object, Check]:
    """The first-batch checks, by worker count, of a recorded sweep on 2 CPUs: its 0-worker trial (first batch, CPU
    percent) and per count (first batch, iter() starting the workers)."""
    trials = [TrialResult(0, TrialConfig(0, 32), "ok", first_batch_s=alone_s, cpu_percent=alone_cpu)] + [
        TrialResult(i, TrialConfig(w, 32, 2), "ok", first_batch_s=first, workers_start_s=start)
        for i, (w, (first, start)) in enumerate(rungs.items(), 1)
    ]
    return {c.numbers["workers"]: c for c in first_batch_checks(trials, cpus=2)}


@pytest.mark.unit
def test_start_up_timed_by_iter_and_the_batchs_cpu_share_forecast_each_rung() -> None:
    # Recorded on this 2-core VM (`--dataset synthetic:cpu_ms=0.5,io_ms=1,kb=64 --workers 0,1,2,4,8,32 --search
    # grid`): per count, (first batch, iter() starting the workers); the 0-worker trial ran at 36% of a CPU (the
    # rest of the batch's time is its 1 ms waits, which 32 workers do not share). The earlier fit, start-up per
    # worker by least squares through the first batches, forecast 4 and 8 workers ×0.61 and ×0.74.
    rungs = {1: (0.0855, 0.0094), 2: (0.0851, 0.0190), 4: (0.1113, 0.0367), 8: (0.1904, 0.0821), 32: (0.7640, 0.3581)}
    checks = recorded_checks(0.0579, 36.3, rungs)
    assert set(checks) == {4, 8, 32}
    for check in checks.values():
        assert check.level == "info" and abs(check.numbers["ratio"] - 1) <= 0.2, check.message  # type: ignore[operator]
    at32 = checks[32]
    assert at32.numbers["per_worker_s"] == pytest.approx((0.0094 + 0.0190 + 0.0367 + 0.0821) / 15)
    assert at32.numbers["cpu_share"] == pytest.approx(0.363)
    assert "the batch alone 0.06 s, 36% of it on a CPU, shared over 2 CPUs, + 9.8 ms to start each worker" in (
        at32.message
    )


@pytest.mark.unit
def test_workers_past_the_cpus_add_what_the_rungs_past_them_left() -> None:
    # Recorded: `synthetic:cpu_ms=2,io_ms=0,kb=64`, a CPU-bound batch (99% of a CPU at 0 workers), 2 CPUs. Without
    # the term past the CPUs, 8 and 32 workers were forecast ×1.32 and ×1.68 short.
    rungs = {1: (0.1382, 0.0082), 2: (0.1627, 0.0197), 4: (0.2654, 0.0446), 8: (0.5707, 0.0986), 32: (2.6081, 0.3740)}
    checks = recorded_checks(0.0698, 99.5, rungs)
    assert checks[4].numbers["crowd_s"] == 0.0  # from 1 and 2 workers: no rung past the CPUs yet
    at8, at32 = checks[8], checks[32]
    assert at8.numbers["crowd_s"] > 0 and at32.numbers["crowd_s"] > 0
    assert at8.level == at32.level == "info", (at8.message, at32.message)
    assert "a worker past the CPUs" in at32.message


@pytest.mark.unit
def test_without_a_0_worker_batch_the_forecast_is_a_line() -> None:
    measured = {1: 0.12, 2: 0.22, 4: 0.42}
    (check,) = first_batch_checks(trials_at(measured), cpus=2)
    assert check.numbers["predicted_s"] == pytest.approx(0.42) and check.numbers["alone_s"] is None
    assert "(0.02 s + 0.10 s a worker)" in check.message


@pytest.mark.unit
def test_too_few_rungs_say_so() -> None:
    (check,) = first_batch_checks(trials_at({0: 0.05, 1: 0.1, 2: 0.2}), cpus=2)
    assert check.level == "info" and "no forecast" in check.message and "measured at 1, 2 workers only" in check.message
    assert forecast(trials_at({0: 0.05, 1: 0.1}), 8, cpus=2) is None


@pytest.mark.unit
def test_spawn_workers_first_batch_is_forecast_from_the_check_alone() -> None:
    checked = Checked(True, pickle_bytes=2048, pickle_dumps_s=0.001, pickle_loads_s=0.0005, start_method="spawn",
                      worker_start_s=1.5)  # fmt: skip
    said = pickle_check(checked, ["spawn"], 4).message
    assert "pickles to 2 KB for spawn workers in 1.0 ms" in said
    assert "one spawn worker started with it in 1.50 s" in said
    trials = [
        TrialResult(0, TrialConfig(0, 32), "ok", first_batch_s=0.1),
        TrialResult(1, TrialConfig(2, 32, 2, start_method="fork"), "ok", first_batch_s=0.2),
        TrialResult(2, TrialConfig(2, 32, 2, start_method="spawn"), "ok", first_batch_s=1.6),
        TrialResult(3, TrialConfig(8, 32, 2, start_method="spawn"), "ok", first_batch_s=9.0),
    ]
    at2, at8 = start_checks(trials, checked, cpus=2)
    # (1.5 s start + 0.1 s batch) × max(1, w / 2 CPUs) + w × 1 ms of pickling
    assert at2.numbers["predicted_s"] == pytest.approx(1.602) and at2.level == "info"
    assert at8.numbers["predicted_s"] == pytest.approx(6.408) and at8.level == "warning"
    assert "at 8 spawn workers: forecast 6.41 s before any trial" in at8.message and "(×1.40, outside" in at8.message
    assert start_checks(trials, Checked(True), cpus=2) == ()


class Holder:
    def __init__(self) -> None:
        self.name = "train"
        self.inner = {"paths": ["a", "b"], "reader": io.BufferedReader(io.BytesIO(b"x"))}


@pytest.mark.unit
def test_the_unpicklable_attribute_is_named_by_its_path() -> None:
    where, fix = unpicklable_path(Holder())
    assert where == "dataset.inner['reader'] (a _io.BufferedReader)" and fix.startswith("open it in worker_init_fn")
    assert unpicklable_path(lambda x: x) == ("dataset (a builtins.function)", "define it at module level")
    pickled = measure_pickle(list(range(1000)))
    assert pickled.nbytes > 1000 and pickled.dumps_s >= 0 and pickled.loads_s >= 0


@pytest.mark.unit
def test_batch_bytes_count_every_tensor() -> None:
    import torch

    batch = {"x": torch.zeros(2, 256, dtype=torch.float32), "y": [torch.zeros(2, dtype=torch.int64)], "s": ["a"]}
    assert tensor_bytes(batch) == 2 * 256 * 4 + 2 * 8


# -- through the command line and the API (real runner, real trials) -------------------------------------------------


def test_strict_stops_before_any_trial_when_shm_cannot_hold_the_batches(tmp_path: Path) -> None:
    """8 workers × prefetch 4 × 4096 samples of 4 MB is 512 GiB in flight: more than any /dev/shm here."""
    code, _, err = loadertop(
        "--dataset", "synthetic:kb=4096", "--workers", "0,8", "--batch-size", "4096", "--prefetch-factor", "4",
        "--strict", "--out", str(tmp_path / "runs"),
    )  # fmt: skip
    line = one_line_exit_2(code, err, "--strict: pre-flight /dev/shm: 8 workers × prefetch 4 × 16.0 GB a batch")
    assert "= 512.0 GB in flight, but /dev/shm has" in line
    assert not any((tmp_path / "runs").iterdir())  # no trial ran, nothing kept


def test_an_open_file_on_the_dataset_is_named_for_spawn(tmp_path: Path) -> None:
    code, _, err = loadertop(
        "--dataset", f"{FAULTS}:holds_a_file", "--workers", "0,1", "--start-method", "spawn",
        "--out", str(tmp_path / "runs"),
    )  # fmt: skip
    line = one_line_exit_2(code, err, "pre-flight pickle: dataset.handle (a _io.BufferedReader) cannot be pickled")
    assert "for spawn workers (TypeError: cannot pickle '_io.BufferedReader' object); open it in" in line


def test_the_result_keeps_the_preflight_checks(tmp_path: Path) -> None:
    import loadertop as api

    result = api.sweep(  # epochs long enough that their boundary is not worth measuring: no spawn restarts
        "synthetic:cpu_ms=0.1,kb=64,length=2000000", out_dir=tmp_path, workers=[0, 1, 2], search="grid",
        trial_seconds=0.5, start_method="fork,spawn", batch_size=16,
    )  # fmt: skip
    kinds = [p.check for p in result.preflight]
    assert kinds[:2] == ["shm", "pickle"] and "first_batch" in kinds
    assert result.preflight[1].numbers["worker_start_s"] is not None  # one spawn worker, started for real
    checks = [p for p in result.preflight if p.check == "first_batch"]
    spawned = {p.numbers["workers"] for p in checks if "start_method" in p.numbers}
    assert spawned == {1, 2}
    written = SweepResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert written.preflight == result.preflight
    shm = result.preflight[0]
    assert shm.numbers["workers"] == 2 and shm.numbers["batch_mb"] == pytest.approx(1.0, rel=0.01)


def test_gpu_check_runs_against_the_fakes() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--fake"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "NVML probes (fake pynvml)" in out and "pid on GPU 1 → [1]" in out
    lines = {line.split("  ")[0]: line for line in out.splitlines()}
    cuda = "skipped: no CUDA" if "CUDA not available" in out else "ok"
    for check in ("sweep --step-ms, CUDA consumer", "pin_memory on/off measured", "tune: pin_memory choice"):
        assert cuda in lines[check], out
    assert "0 failed" in out
