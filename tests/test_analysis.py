"""Analysis over hand-built measurements: knee, recommendation, reasons, snippet."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest

from loadertop.core.engine.verdict.analysis import analyze, snippet
from loadertop.core.engine.verdict.band import noise_band
from loadertop.core.engine.verdict.reasons import trial_reason
from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.results import Knee, MachineInfo, TrialResult

SETTINGS = Settings(start_methods=("fork",), tolerance=0.05)


def machine(usable_cpus: int = 2) -> MachineInfo:
    return MachineInfo(
        hostname="box",
        platform="linux",
        python="3.11",
        torch=None,
        logical_cpus=usable_cpus,
        usable_cpus=usable_cpus,
        cpu_quota=None,
        mem_total_mb=64000,
        mem_available_mb=32000,
        cgroup_mem_headroom_mb=None,
        shm_free_mb=None,
        default_start_method="fork",
    )


def trial(
    index: int,
    workers: int,
    sps: float | None,
    *,
    spread: float | None = 0.02,
    cpu: float | None = None,
    main_cpu: float | None = None,
    stall: float | None = None,
    pss: float | None = None,
    batch_size: int = 32,
    status: str = "ok",
    error: str | None = None,
) -> TrialResult:
    config = TrialConfig(
        workers,
        batch_size,
        2 if workers else None,
        False,
        False,
        "fork" if workers else None,
    )
    return TrialResult(
        index=index,
        config=config,
        status=status,  # type: ignore[arg-type]
        error=error,
        samples_per_s=sps,
        spread=spread,
        cpu_percent=cpu,
        main_cpu_percent=main_cpu,
        stall_fraction=stall,
        total_pss_mb=pss,
    )


def curve(points: list[tuple[int, float, float, float, float]], spread: float = 0.02) -> list[TrialResult]:
    """(workers, samples/s, cpu %, stall, pss MB) rows into trials."""
    return [
        trial(i, w, sps, spread=spread, cpu=cpu, stall=stall, pss=pss)
        for i, (w, sps, cpu, stall, pss) in enumerate(points)
    ]


# 2 usable CPUs, saturated from 4 workers on; gains flatten at 4, peak at 8. (2 workers at 70% of the CPUs: below
# bound.CPU_SATURATED, as their half of the 4-worker throughput says.)
SATURATING = [
    (0, 100.0, 100.0, 0.60, 500.0),
    (1, 100.0, 110.0, 0.60, 700.0),
    (2, 195.0, 140.0, 0.30, 900.0),
    (4, 380.0, 190.0, 0.10, 1300.0),
    (6, 400.0, 196.0, 0.06, 1700.0),
    (8, 405.0, 198.0, 0.06, 2100.0),
    (12, 402.0, 198.0, 0.06, 2900.0),
]


# ------------------------------------------------------------------------------------------------ clean, noisy curves


@pytest.mark.unit
def test_saturating_curve_knee_at_4_recommends_6_within_5_percent():
    knee, rec = analyze(curve(SATURATING), SETTINGS, machine())
    assert knee == Knee(
        4, "kneedle", "gains flatten at 4 workers (380 samples/s, 94% of the 405 samples/s peak at 8 workers)"
    )
    assert rec is not None
    # 405 * 0.95 = 384.75: 6 workers (400) is in the band, 4 workers (380) is not.
    assert rec.config.num_workers == 6
    assert rec.trial_index == 4
    assert rec.samples_per_s == 400.0
    assert rec.reason == (
        "CPU-bound: workers use 2.0 of 2 usable CPUs from 4 workers on; "
        "8 workers add 400 MB and no speed (405 vs 400 samples/s, within 5%); "
        "4, 6, 8 and 12 workers are not surely more than the 5% band behind the best (405 samples/s): 6 is the "
        "cheapest surely within the band (fewer may be behind by more: their runs say too little); a close call: 4 "
        "workers are 6.2% behind, just outside the 5% noise band (not surely: within the noise of their runs)"
    )
    # 4 workers are past the band on their one run, not surely: the set keeps them (band.Noise.surely_outside)
    assert rec.equivalent == tuple(c.config for c in curve(SATURATING) if c.config.num_workers in (4, 6, 8, 12))
    assert rec.close
    assert rec.snippet == "DataLoader(dataset, batch_size=32, num_workers=6)"


@pytest.mark.unit
def test_noisy_curve_wider_band_picks_fewer_workers():
    knee, rec = analyze(curve(SATURATING, spread=0.08), SETTINGS, machine())
    assert rec is not None
    # band = max(5%, 8%, 8%) = 8%: 405 * 0.92 = 372.6, so 4 workers (380) is now enough.
    assert rec.config.num_workers == 4
    assert "within 8%" in rec.reason
    assert rec.reason.startswith("CPU-bound: workers use 1.9 of 2 usable CPUs from 4 workers on;")
    assert knee is not None and knee.num_workers == 4


@pytest.mark.unit
def test_noise_band_is_the_widest_of_tolerance_and_spreads():
    a = trial(0, 1, 100.0, spread=0.03)
    b = trial(1, 2, 100.0, spread=0.07)
    none = trial(2, 4, 100.0, spread=None)
    assert noise_band(0.05, a, b) == 0.07
    assert noise_band(0.05, a, none) == 0.05
    assert noise_band(0.01, none, none) == 0.01


# ------------------------------------------------------------------------------------------------ flat curve


@pytest.mark.unit
def test_flat_curve_has_no_knee_and_recommends_fewest_workers():
    trials = curve(
        [
            (0, 1000.0, 100.0, 0.01, 500.0),
            (1, 1010.0, 130.0, 0.01, 600.0),
            (2, 1020.0, 150.0, 0.01, 700.0),
            (4, 1005.0, 170.0, 0.01, 900.0),
            (8, 995.0, 180.0, 0.01, 1300.0),
        ]
    )
    knee, rec = analyze(trials, SETTINGS, machine(usable_cpus=8))
    assert knee == Knee(None, "flat", "no clear knee: throughput flat within 2.5% from 0 to 8 workers (noise band 5%)")
    assert rec is not None
    assert rec.config.num_workers == 0
    assert rec.reason == (
        "the main process keeps up (0 workers): 2 workers add 200 MB and no speed (1020 vs 1000 samples/s, within 5%); "
        "0–8 workers (all 5 measured) are not surely more than the 5% band behind the best (1020 samples/s): 0 is "
        "the cheapest"
    )
    assert rec.snippet == "DataLoader(dataset, batch_size=32)"


@pytest.mark.unit
def test_zero_workers_fastest_says_worker_overhead_costs_more():
    trials = curve(
        [
            (0, 1000.0, 100.0, 0.5, 500.0),
            (1, 700.0, 120.0, 0.5, 600.0),
            (2, 800.0, 150.0, 0.5, 700.0),
        ]
    )
    _, rec = analyze(trials, SETTINGS, machine(usable_cpus=8))
    assert rec is not None
    assert rec.config.num_workers == 0
    assert rec.reason.startswith("the main process does the work fastest (0 workers): workers cost more than they save")
    assert "2 workers at 800 vs 1000 samples/s, −20%" in rec.reason


# ------------------------------------------------------------------------------------------------ falling curve


@pytest.mark.unit
def test_falling_curve_knee_before_peak_and_drop_is_reported():
    # Seconds per epoch of 50 000 samples, like the article: 2 workers 42.7 s, 24 workers 18.7 s, 32 slower again.
    epoch = {2: 42.7, 4: 30.0, 8: 23.0, 12: 20.5, 16: 19.5, 24: 18.7, 32: 20.3}
    trials = [
        trial(i, w, 50_000 / s, cpu=w * 90.0, stall=0.5, pss=1000.0 + 200 * w) for i, (w, s) in enumerate(epoch.items())
    ]
    knee, rec = analyze(trials, SETTINGS, machine(usable_cpus=32))
    assert knee is not None
    assert knee.num_workers == 8
    assert knee.rule == "kneedle"
    assert knee.reason.endswith("; slower again at 32 workers (−7.9%)")
    assert rec is not None
    # 24 workers peak at 2674/s; 16 workers (2564/s) are 4.1% below: within 5%.
    assert rec.config.num_workers == 16
    assert rec.reason == (
        "loader-bound (stall 50%): 16 workers reach 2564 samples/s; 24 workers add 1600 MB and no speed "
        "(2674 vs 2564 samples/s, within 5%); slower again at 32 workers (−7.9%); 12, 16, 24 and 32 workers are not "
        "surely more than the 5% band behind the best (2674 samples/s): 16 is the cheapest surely within the band "
        "(fewer may be behind by more: their runs say too little); a close call: 4.1% behind the best, near the "
        "edge of the 5% noise band"
    )


@pytest.mark.unit
def test_knee_found_on_rising_part_only():
    # Without cutting at the peak, the steep fall would pull kneedle away; the knee must not pass the peak.
    trials = curve(
        [
            (1, 100.0, 90.0, 0.5, 500.0),
            (2, 200.0, 180.0, 0.5, 600.0),
            (4, 380.0, 360.0, 0.5, 700.0),
            (8, 420.0, 700.0, 0.5, 900.0),
            (16, 200.0, 800.0, 0.5, 1300.0),
        ]
    )
    knee, rec = analyze(trials, SETTINGS, machine(usable_cpus=16))
    assert knee is not None and knee.num_workers is not None
    assert knee.num_workers <= 8
    assert "slower again at 16 workers (−52%)" in knee.reason
    assert rec is not None and rec.config.num_workers == 8


# ------------------------------------------------------------------------------------------------ still rising


@pytest.mark.unit
def test_still_rising_curve_recommends_largest():
    trials = curve(
        [
            (0, 100.0, 100.0, 0.9, 400.0),
            (1, 200.0, 110.0, 0.9, 500.0),
            (2, 400.0, 120.0, 0.9, 600.0),
            (4, 800.0, 140.0, 0.9, 800.0),
            (8, 1600.0, 180.0, 0.9, 1200.0),
            (16, 3200.0, 260.0, 0.9, 2000.0),
        ]
    )
    knee, rec = analyze(trials, SETTINGS, machine(usable_cpus=8))
    assert knee == Knee(
        None,
        "rising",
        "no knee yet: throughput still rising at 16 workers (3200 samples/s, the largest tried; 8 workers: 1600)",
    )
    assert rec is not None
    assert rec.config.num_workers == 16
    assert rec.reason == (
        "I/O-bound: throughput still rising at 16 workers (the largest tried; no fewer within 5%); "
        "try a wider --workers range"
    )


@pytest.mark.unit
def test_noise_band_rule_when_kneedle_finds_nothing():
    # Straight up to 4, then +2.5%: kneedle finds no knee on this; the band picks 4 (410 * 0.95 = 389.5).
    trials = curve(
        [
            (1, 100.0, 90.0, 0.5, 500.0),
            (2, 200.0, 180.0, 0.5, 600.0),
            (3, 300.0, 270.0, 0.5, 700.0),
            (4, 400.0, 360.0, 0.5, 800.0),
            (5, 410.0, 450.0, 0.5, 900.0),
        ]
    )
    knee, rec = analyze(trials, SETTINGS, machine(usable_cpus=16))
    assert knee == Knee(4, "noise band", "4 workers within 5% of the 410 samples/s peak at 5 workers")
    assert rec is not None and rec.config.num_workers == 4


@pytest.mark.unit
def test_noise_band_rule_when_peak_comes_too_early_for_kneedle():
    # The rising part is two points (0 and 1 worker): too short for kneedle; the band rule names the peak.
    trials = curve(
        [
            (0, 100.0, 100.0, 0.5, 500.0),
            (1, 300.0, 190.0, 0.5, 600.0),
            (2, 295.0, 280.0, 0.5, 700.0),
            (4, 200.0, 370.0, 0.5, 900.0),
        ]
    )
    knee, rec = analyze(trials, SETTINGS, machine(usable_cpus=16))
    assert knee == Knee(
        1,
        "noise band",
        "the 300 samples/s peak at 1 worker; no fewer workers within 5%; slower again at 4 workers (−33%)",
    )
    assert rec is not None and rec.config.num_workers == 1


@pytest.mark.unit
def test_too_few_points_for_a_knee():
    knee, rec = analyze(curve([(0, 100.0, 90.0, 0.5, 500.0), (2, 180.0, 180.0, 0.5, 700.0)]), SETTINGS, machine())
    assert knee == Knee(None, "none", "too few points for a knee (2 worker counts)")
    assert rec is not None and rec.config.num_workers == 2


# ------------------------------------------------------------------------------------------------ failures


@pytest.mark.unit
def test_failed_and_skipped_trials_are_ignored():
    trials = [
        *curve(SATURATING),
        trial(7, 16, 9999.0, status="failed", error="worker killed by signal 9 (OOM)"),
        trial(8, 24, None, status="skipped", error="over memory budget"),
        trial(9, 3, None),  # ok but never produced a count
    ]
    knee, rec = analyze(trials, SETTINGS, machine())
    assert knee is not None and knee.num_workers == 4
    assert rec is not None and rec.config.num_workers == 6
    assert rec.trial_index == 4


@pytest.mark.unit
def test_all_failed_gives_none():
    trials = [
        trial(0, 0, None, status="failed", error="boom"),
        trial(1, 2, None, status="skipped", error="over memory budget"),
    ]
    assert analyze(trials, SETTINGS, machine()) == (None, None)
    assert analyze([], SETTINGS, machine()) == (None, None)


# ------------------------------------------------------------------------------------------------ several axes


@pytest.mark.unit
def test_two_batch_sizes_compare_samples_per_second():
    small = [(0, 100.0), (1, 180.0), (2, 300.0), (4, 320.0)]
    large = [(0, 150.0), (1, 260.0), (2, 400.0), (4, 410.0)]
    trials = [trial(i, w, s, batch_size=32, cpu=50.0, stall=0.5, pss=500.0) for i, (w, s) in enumerate(small)]
    trials += [trial(10 + i, w, s, batch_size=128, cpu=50.0, stall=0.5, pss=800.0) for i, (w, s) in enumerate(large)]
    knee, rec = analyze(trials, SETTINGS, machine(usable_cpus=8))
    assert rec is not None
    # Best is bs=128 w=4 (410); bs=128 w=2 (400) is within 5%; bs=32 w=2 (300) is not.
    assert (rec.config.batch_size, rec.config.num_workers) == (128, 2)
    assert rec.trial_index == 12
    assert rec.snippet == "DataLoader(dataset, batch_size=128, num_workers=2)"
    # The knee is on the bs=128 curve, which includes its 0-worker trial (collapsed knobs): 0, 1, 2, 4.
    assert knee is not None
    assert knee.num_workers == 2
    assert "410 samples/s peak at 4 workers" in knee.reason


@pytest.mark.unit
def test_same_workers_prefers_less_memory_then_throughput():
    trials = [
        trial(0, 2, 1000.0, batch_size=32, pss=800.0),
        trial(1, 2, 990.0, batch_size=64, pss=805.0),  # same memory within noise, slower
        trial(2, 2, 995.0, batch_size=256, pss=2400.0),  # much more memory
        trial(3, 4, 1001.0, batch_size=32, pss=1200.0),
    ]
    _, rec = analyze(trials, SETTINGS, machine(usable_cpus=8))
    assert rec is not None and rec.trial_index == 0
    lean = [
        trial(0, 2, 1000.0, batch_size=256, pss=2400.0),
        trial(1, 2, 960.0, batch_size=32, pss=800.0),
    ]
    _, rec = analyze(lean, SETTINGS, machine(usable_cpus=8))
    assert rec is not None and rec.config.batch_size == 32


# ------------------------------------------------------------------------------------------------ snippet


@pytest.mark.unit
def test_snippet_omits_defaults():
    assert snippet(TrialConfig(0, 64), "fork") == "DataLoader(dataset, batch_size=64)"
    assert snippet(TrialConfig(4, 64, 2, False, False, "fork"), "fork") == (
        "DataLoader(dataset, batch_size=64, num_workers=4)"
    )


@pytest.mark.unit
def test_snippet_includes_non_defaults():
    config = TrialConfig(4, 64, 4, True, True, "spawn")
    assert snippet(config, "fork") == (
        "DataLoader(dataset, batch_size=64, num_workers=4, prefetch_factor=4, pin_memory=True, "
        'persistent_workers=True, multiprocessing_context="spawn")'
    )
    # The same start method as the platform default is left out.
    assert snippet(config, "spawn") == (
        "DataLoader(dataset, batch_size=64, num_workers=4, prefetch_factor=4, pin_memory=True, persistent_workers=True)"
    )


@pytest.mark.unit
def test_snippet_zero_workers_keeps_pin_memory_only():
    assert snippet(TrialConfig(0, 16, None, True, False, None), "fork") == (
        "DataLoader(dataset, batch_size=16, pin_memory=True)"
    )


# ------------------------------------------------------------------------------------------------ trial_reason


@pytest.mark.unit
@pytest.mark.parametrize(
    ("kwargs", "peak", "expected"),
    [
        ({"cpu": 190.0, "stall": 0.3}, 100.0, "CPU-bound (1.9/2 CPUs), best"),
        ({"cpu": 100.0, "stall": 0.02}, 102.0, "consumer-bound (stall 2%), within noise of best"),
        (
            {"cpu": 60.0, "main_cpu": 10.0, "stall": 0.7},
            200.0,
            "I/O-bound (0.6/8 CPUs, workers at 12% CPU each), 50% of best",
        ),
        ({"cpu": 400.0, "main_cpu": 30.0, "stall": 0.63}, None, "loader-bound (stall 63%)"),
    ],
)
def test_trial_reason_from_evidence(kwargs, peak, expected):
    t = trial(0, 4, 100.0, **kwargs)
    assert trial_reason(t, machine(usable_cpus=2 if "main_cpu" not in kwargs else 8), peak) == expected


@pytest.mark.unit
def test_trial_reason_failed_and_skipped_show_error():
    # A memory failure names its category; other failures show their error as it is.
    assert trial_reason(trial(0, 8, None, status="failed", error="worker OOM"), machine(), 100.0) == (
        "memory-bound: worker OOM"
    )
    assert trial_reason(trial(0, 8, None, status="failed", error="boom"), machine(), 100.0) == "boom"
    assert trial_reason(trial(0, 8, None, status="skipped"), machine(), 100.0) == "skipped"


def test_analysis_imports_no_ui_or_torch():
    code = (
        "import sys, loadertop.core.engine.verdict.analysis; "
        "bad = [m for m in ('torch', 'textual', 'rich', 'plotext') if m in sys.modules]; "
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_the_knee_is_found_without_importing_pyplot():
    # kneed imports matplotlib.pyplot for its plot helpers; a fresh machine then runs fc-list to build a font cache.
    code = (
        "import sys; from loadertop.core.engine.verdict.knee import _kneedle; "
        "print(_kneedle([1, 2, 4, 8, 16], [100.0, 190.0, 330.0, 390.0, 400.0]), 'matplotlib.pyplot' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["4", "False"]


@pytest.mark.unit
def test_consumer_bound_reason():
    trials = curve([(0, 100.0, 50.0, 0.5, 400.0), (1, 110.0, 60.0, 0.3, 500.0), (2, 200.0, 90.0, 0.01, 600.0)])
    trials.append(trial(3, 4, 205.0, cpu=100.0, stall=0.01, pss=900.0))
    _, rec = analyze(trials, SETTINGS, machine(usable_cpus=16))
    assert rec is not None
    assert rec.reason == (
        "consumer-bound: the training loop waits for data 1% of the time at 2 workers; more workers only add memory; "
        "4 workers add 300 MB and no speed (205 vs 200 samples/s, within 5%); 2 and 4 workers are not surely more "
        "than the 5% band behind the best (205 samples/s): 2 is the cheapest"
    )


@pytest.mark.unit
def test_epoch_bound_reason_when_the_boundary_takes_a_large_share_of_short_epochs():
    # 62 batches an epoch at 10 batches/s is 6.2 s an epoch, of which 1.55 s (25%) waits for fresh workers.
    t = replace(trial(0, 10, 320.0, cpu=150.0, stall=1.0), batches_per_s=10.0, epoch_batches=62, epoch_restart_s=1.55)
    assert trial_reason(t, machine(), None) == (
        "epoch-bound (each epoch restarts 10 workers in 1.55 s, 25% of its time: persistent_workers=True keeps them)"
    )
    # The same boundary in a long epoch (blocks inside one epoch: epoch_batches unset) is not the bound: 10
    # workers using 1.5 of the 2 CPUs are CPU-bound (at 15% CPU each only because they share two cores).
    assert trial_reason(replace(t, epoch_batches=None), machine(), None) == "CPU-bound (1.5/2 CPUs)"
    # Persistent workers already: the boundary is named, with no advice to repeat.
    kept = replace(t, config=replace(t.config, persistent_workers=True))
    assert (
        trial_reason(kept, machine(), None)
        == "epoch-bound (each 62-batch epoch waits 1.55 s at its boundary, 25% of its time)"
    )


@pytest.mark.unit
def test_zero_workers_at_the_ceiling_say_workers_cannot_help():
    t = replace(trial(0, 0, 507.0, stall=0.05), fraction_of_ceiling=507.0 / 531.0)
    _, rec = analyze([t], SETTINGS, machine())
    assert rec is not None and rec.reason == (
        "consumer-bound: 0 workers already deliver 95% of the 531 samples/s the training step can take (its "
        "ceiling): workers cannot make it faster"
    )
