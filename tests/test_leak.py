"""Leak detection (engine/verdict/leak.py): synthetic USS series, the false-alarm rate over many flat noisy workers,
and a real job whose workers grow by copy-on-read (a list of dicts) next to one that does not (a numpy array)."""

from __future__ import annotations

import math
import random

import pytest
from live_fakes import loader_jobs

from loadertop.core.engine import LeakConfig, duration_text, open_session
from loadertop.core.engine.verdict.leak import LeakDetector, fit_slope, leak_warning

FAST = LeakConfig(warmup_s=0.0)


def feed(detector: LeakDetector, series: dict[int, list[float]], every_s: float = 2.0, t0: float = 0.0) -> float:
    """Feed readings taken every `every_s` seconds; returns the time of the last one."""
    length = max(len(v) for v in series.values())
    t = t0
    for i in range(length):
        t = t0 + i * every_s
        detector.add(t, {pid: values[i] if i < len(values) else None for pid, values in series.items()})
    return t


@pytest.mark.unit
def test_fit_of_an_exact_line_has_no_error() -> None:
    fit = fit_slope([(t, 100 + 0.5 * t) for t in range(0, 60, 2)])
    assert fit is not None
    assert fit.slope_mb_per_min == pytest.approx(30.0)
    assert fit.stderr_mb_per_min == pytest.approx(0.0, abs=1e-9)
    assert fit_slope([(0, 1), (1, 2)]) is None  # two points: no error estimate


@pytest.mark.unit
def test_growing_workers_warn_with_the_time_to_exhaust_memory() -> None:
    detector = LeakDetector(FAST)
    rng = random.Random(1)
    # 4 workers growing 38 MB/min (0.633 MB/s) with 1 MB of noise, read every 2 s for 5 min
    feed(detector, {pid: [200 + 38 / 60 * 2 * i + rng.gauss(0, 1) for i in range(150)] for pid in range(4)})
    growing = detector.growing()
    assert sorted(growing) == [0, 1, 2, 3]
    assert all(fit.slope_mb_per_min == pytest.approx(38, rel=0.05) for fit in growing.values())
    warning = detector.warning(22 * 1024)
    assert warning is not None
    assert warning.startswith("4 workers grow 38 MB/min each; at this rate they exhaust the 22.0 GiB available in ")
    assert "2 h 28 min" in warning  # 22528 MB ÷ (4 × 38 MB/min) = 148 min
    assert "copy-on-read" in warning and "numpy arrays or tensors" in warning and "docs/attach.md" in warning


@pytest.mark.unit
def test_flat_worker_with_noise_never_warns() -> None:
    detector = LeakDetector(FAST)
    rng = random.Random(2)
    for i in range(300):
        detector.add(i * 2.0, {7: 500 + rng.gauss(0, 3)})
        assert detector.warning(1000) is None
    fit = detector.fit(7)
    assert fit is not None and abs(fit.slope_mb_per_min) < 1


@pytest.mark.unit
def test_repeated_readings_are_not_fitted() -> None:
    """The probe repeats its last USS between full reads: a constant worker has one distinct reading, no slope."""
    detector = LeakDetector(FAST)
    feed(detector, {3: [400.0] * 100})
    assert detector.fit(3) is None


@pytest.mark.unit
def test_a_one_time_step_is_not_a_leak() -> None:
    """A worker that fills a cache once (+60 MB in one step) then stays flat does not warn."""
    detector = LeakDetector(FAST)
    rng = random.Random(3)
    values = [300 + (60 if i >= 100 else 0) + rng.gauss(0, 1) for i in range(300)]
    for i, value in enumerate(values):
        detector.add(i * 2.0, {5: value})
        assert detector.warning(1000) is None, f"warned at reading {i}"


@pytest.mark.unit
def test_restarted_workers_start_a_new_window() -> None:
    detector = LeakDetector(FAST)
    end = feed(detector, {1: [100 + i for i in range(60)], 2: [100 + i for i in range(60)]})
    assert set(detector.growing()) == {1, 2}
    # the next epoch: new worker pids, flat; the old ones are gone and forgotten
    feed(detector, {3: [150.0 + (i % 2) for i in range(4)], 4: [150.0 + (i % 2) for i in range(4)]}, t0=end + 2)
    assert detector.growing() == {}
    assert detector.fit(1) is None and detector.fit(3) is None  # too few readings in the new windows
    assert detector.warning(1000) is None


@pytest.mark.unit
def test_warmup_readings_are_ignored() -> None:
    detector = LeakDetector(LeakConfig(warmup_s=20.0))
    feed(detector, {1: [100 + 5 * i for i in range(10)]})  # 18 s of start-up growth, then nothing
    assert detector.fit(1) is None


@pytest.mark.heavy
def test_false_alarms_over_1000_flat_noisy_workers() -> None:
    """1,000 seeded flat workers, 10 min each read every 2 s with Gaussian noise and rare allocator jumps
    (+-4 MB that come back): asked after every 10th reading, the detector never warns."""
    config = LeakConfig(warmup_s=0.0)
    alarms = 0
    for seed in range(1000):
        rng = random.Random(seed)
        detector = LeakDetector(config)
        base, sd = rng.uniform(100, 2000), rng.uniform(0.2, 4.0)
        for i in range(300):
            jump = rng.choice((-4.0, 4.0)) if rng.random() < 0.02 else 0.0
            detector.add(i * 2.0, {seed: round(base + rng.gauss(0, sd) + jump, 1)})
            if i % 10 == 9 and detector.growing():
                alarms += 1
                break
    assert alarms == 0


@pytest.mark.unit
def test_wording() -> None:
    assert duration_text(40) == "40 s"
    assert duration_text(25 * 60) == "25 min"
    assert duration_text(70 * 60) == "1 h 10 min"
    assert duration_text(120 * 60) == "2 h"
    one = leak_warning([12.0], 2048)
    assert one.startswith("1 worker grows 12 MB/min; at this rate it exhausts the 2.0 GiB available in 2 h 51 min.")
    assert not math.isnan(len(leak_warning([5.0, 7.0], None)))


def test_real_copy_on_read_warns_and_numpy_does_not(no_leftovers: None) -> None:
    """Two real jobs, each with 2 DataLoader workers and no loadertop.watch: one reads a list of 1M dicts (each
    read writes a refcount, so the worker copies the page), the other the same numbers in a numpy array."""
    config = LeakConfig(warmup_s=1.0, min_span_s=4.0)
    with loader_jobs("dicts", "numpy", n=1_000_000) as (dicts, arrays):
        growing = open_session(dicts.pid, interval=0.5, leak=config)
        flat = open_session(arrays.pid, interval=0.5, leak=config)
        try:
            warned_at = None
            flat_snaps = flat.snapshots()
            for snap in growing.snapshots():
                other = next(flat_snaps)
                assert other.warnings == (), other.warnings
                if snap.warnings and warned_at is None:
                    warned_at = snap.t
                if warned_at is not None and snap.t >= 8.0:
                    break
                assert snap.t < 20.0, "no warning after 20 s"
        finally:
            growing.close()
            flat.close()
    print(f"first warning after {warned_at} s: {snap.warnings[0]}")
    assert "2 workers grow" in snap.warnings[0]
    assert all(w.uss_slope_mb_per_min is not None and w.uss_slope_mb_per_min > 10 for w in snap.workers)
    assert len(other.workers) == 2
    assert all(abs(w.uss_slope_mb_per_min or 0.0) < 5 for w in other.workers)
