"""What loadertop.tune tries and keeps, over hand-built measurements (no loader, no workers): the sweep's range
the sweep's rule and reason, and the other knobs tried at the count it keeps."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from loadertop.core.engine.tune_entry import RUN_TUNE_TERMS, UserArgs
from loadertop.core.engine.verdict.analysis import analyze
from loadertop.core.job.tune_plan import Tuner, tune_settings
from loadertop.core.model.config import TrialConfig, adaptive_cap
from loadertop.core.model.results import TrialResult
from tests.test_analysis import machine

pytestmark = pytest.mark.unit

USER = TrialConfig(0, 32)


def result(workers: int, sps: float, spread: float = 0.02, prefetch: int = 2) -> TrialResult:
    config = TrialConfig(workers, 32, prefetch if workers else None, False, False, "fork" if workers else None)
    return TrialResult(0, config, "ok", samples_per_s=sps, spread=spread, blocks=6, measured_s=3.0)


def drive(tuner: Tuner, rate: Callable[[TrialConfig, int], float], limit: int = 40) -> None:
    """Feed the tuner what each configuration it asks for measures (`rate(config, nth run)`) until it is done."""
    runs: Counter[TrialConfig] = Counter()
    while len(tuner.results) < limit and (config := tuner.next()) is not None:
        sps = rate(config, runs[config])
        runs[config] += 1
        tuner.feed(result(config.num_workers, sps, prefetch=config.prefetch_factor or 2), None)


def test_tune_climbs_as_far_as_the_sweep_would() -> None:
    # On 2 CPUs tune's range stopped at 8 workers, where the I/O-bound loader reached 0.75 of the step's
    # ceiling; the sweep's own range (and its I/O-bound answers, 32-56 workers) goes to 64.
    settings = tune_settings(USER, machine(usable_cpus=2), None, 0.05, cuda=False)
    assert max(settings.workers) == adaptive_cap(2) == 64
    assert max(tune_settings(USER, machine(usable_cpus=2), 12, 0.05, cuda=False).workers) == 12  # the user's cap


def test_the_choice_and_its_reason_are_the_sweeps() -> None:
    # A recorded trace: w=8 614 (its spread makes the band 15%), w=4 591, w=2 581 then 525, prefetch 4 at w=2.
    tuner = Tuner(tune_settings(USER, machine(), 8, 0.05, cuda=False), machine())
    runs = [result(0, 300), result(1, 330), result(2, 581, 0.04), result(4, 591, 0.10), result(8, 614, 0.15)]
    runs += [result(2, 500, 0.04, prefetch=4), result(2, 525, 0.04)]
    for run in runs:
        tuner.feed(run, None)
    rec = analyze(tuner.results, tuner.settings, tuner.machine)[1]
    chosen = tuner.choice(USER)
    assert rec is not None and chosen.config == rec.config  # the sweep's rule over the same measurements
    assert rec.reason in chosen.reason
    # 2 workers is within the band of the best: the reason must not claim 4 is the fewest within it.
    assert "fewest workers within" not in chosen.reason
    assert "2, 4 and 8 workers are not surely more than the 13% band behind the best" in chosen.reason


def test_the_other_knobs_are_tried_at_the_count_kept() -> None:
    # 3 workers measures lucky once (within the band of 4's 400), then 300 on its repeats: the count kept is 4.
    def rate(config: TrialConfig, nth: int) -> float:
        base = {0: 80.0, 1: 100.0, 2: 200.0, 3: 392.0 if nth == 0 else 300.0}.get(config.num_workers, 400.0)
        return base * (1.02 if config.prefetch_factor == 4 else 1.0)

    tuner = Tuner(tune_settings(USER, machine(), 8, 0.05, cuda=False), machine())
    drive(tuner, rate)
    kept = tuner.choice(USER).config
    with_prefetch_4 = {t.config.num_workers for t in tuner.results if t.config.prefetch_factor == 4}
    assert kept.num_workers == 4
    assert with_prefetch_4 == {4}  # tried where tune stays, and nowhere else
    assert any("knobs: at the kept count (w=4" in line for line in tuner.decisions)
    # prefetch 4 won at 4 workers: the reason is the count's (from the climb), not a one-point "still rising" curve
    reason = tuner.choice(USER).reason
    assert "still rising" not in reason and "prefetch_factor=4 at 4 workers: 408 vs 400 samples/s" in reason


def test_a_climb_the_budget_ended_says_so() -> None:
    # Still rising at 16 workers when the budget ran out, with 64 in the range: the budget is what to raise.
    tuner = Tuner(tune_settings(USER, machine(), None, 0.05, cuda=False), machine())
    for workers, sps in ((0, 120.0), (1, 130.0), (2, 250.0), (4, 500.0), (8, 900.0), (16, 1240.0)):
        tuner.feed(result(workers, sps), None)
    reason = tuner.choice(USER).reason
    assert "the budget ended the climb at 16 workers (a larger budget_s)" in reason and "max_workers" not in reason


def test_what_the_budget_left_unmeasured_is_said() -> None:
    # The refine's last bisect was chosen, the budget ended before it ran, and prefetch was never tried at
    # the count kept; neither the decisions nor the reason said so.
    tuner = Tuner(tune_settings(USER, machine(), 8, 0.05, cuda=False), machine())
    rates = {0: 280.0, 1: 280.0, 2: 370.0, 4: 600.0, 8: 640.0}
    while (config := tuner.next()) is not None and config.num_workers in rates and config.prefetch_factor in (2, None):
        tuner.feed(result(config.num_workers, rates[config.num_workers]), None)
    assert config is not None  # chosen next, never measured: the budget ended here
    reason = tuner.choice(USER).reason
    assert f"the budget ended before {config.label()}" in reason, (config, reason)
    assert "prefetch_factor at 8 workers" in reason and "(a larger budget_s measures them)" in reason, reason
    done = Tuner(tune_settings(USER, machine(), 8, 0.05, cuda=False), machine())
    drive(done, lambda c, n: rates.get(c.num_workers, 600.0))
    assert "the budget ended" not in done.choice(USER).reason  # the plan ran its course: nothing to say


def test_short_epochs_are_measured_whole_after_the_switch_epoch() -> None:
    # 46-batch epochs at 10 workers: the switch's part epoch reads off its start-up buffer (tune measured 3387
    # samples/s at 10 workers on 2 CPUs, which decode 1700; the sweep measures whole epochs and picked 2 workers)
    from loadertop.core.job.tune_measure import Meter

    meter = Meter(TrialConfig(10, 32, 2, False, False, "fork"), skip=0)
    meter.opened(buffer=20, remaining=30)  # the switch, mid-epoch: its buffer skipped, half the rest left
    assert meter.skip == 15
    for _ in range(30):
        meter.add(0.001, 0.01, 32)  # the buffer drains fast
    assert meter.batches == 15 and not meter.whole_epochs
    meter.opened(buffer=20, remaining=46)  # an epoch boundary: the part epoch goes, whole epochs from here
    assert meter.whole_epochs and meter.batches == 0 and meter.skip == 0
    meter.add(0.5, 0.01, 32)  # the boundary (workers started again) in the first batch's wait: counted
    assert meter.batches == 1 and meter.measured_s == pytest.approx(0.51)
    meter.opened(buffer=20, remaining=46)  # the next boundary keeps what the whole epochs measured
    assert meter.batches == 1 and meter.skip == 0


def test_an_epochs_boundary_is_in_the_rate_but_not_in_the_spread() -> None:
    # An I/O-bound job at 8 workers: 125-batch epochs of 20 ms steps, the workers started again at each
    # boundary (0.4 s in that epoch's first wait). In one of the 6 blocks the boundary read as a ±23% spread, the
    # noise band grew to 15% and 8 workers stood for 11, 14% slower.
    from loadertop.core.job.tune_measure import Meter

    meter = Meter(TrialConfig(8, 32, 2, False, False, "fork"), skip=0)
    meter.opened(buffer=6, remaining=100)
    for _ in range(50):
        meter.add(0.002, 0.02, 32)  # the switch's part epoch: dropped at the first boundary
    steady = [0.003, 0.004, 0.002, 0.005, 0.003]
    for _epoch in range(2):
        meter.opened(buffer=6, remaining=125)
        for i in range(125):
            meter.add(0.4 if i == 0 else steady[i % 5], 0.02, 32)
    result = meter.result(0, target_spread=0.05, span_s=5.0)
    assert result.spread is not None and result.spread < 0.05  # the steady batches' blocks agree
    per_epoch = 0.4 + 124 * (0.02 + 0.0034) + 0.02  # 250 batches measured, each epoch's boundary paid
    assert result.samples_per_s == pytest.approx(125 * 32 / per_epoch, rel=0.01)


# The previous stop's `run --tune` trace on 2 CPUs: flat from 2 workers, 2 and 8 measured again, the runs agreeing
# within 2% while each run's blocks spread ±10%.
FLAT_RUNS = ((0, 560), (1, 830), (2, 1296), (4, 1285), (8, 1316), (2, 1337), (8, 1306), (2, 1289))


def _flat_tuner(spread: float) -> Tuner:
    tuner = Tuner(tune_settings(USER, machine(), None, 0.05, cuda=False), machine())
    for w, sps in FLAT_RUNS:
        tuner.feed(result(w, sps, spread), None)
    return tuner


def test_repeats_that_agree_keep_the_fewest_workers_whatever_each_runs_block_spread() -> None:
    # 2 workers: 1296, 1337, 1289 (mean 1307); 8 workers: 1316, 1306 (mean 1311). Taking each run's ±10% block
    # spread as the noise of its mean made no fewer count "surely within the band": 8 was kept over 2.
    choice = _flat_tuner(0.10).choice(USER)
    assert choice.config.num_workers == 2, choice.reason
    assert "2 is the cheapest" in choice.reason


def test_the_fastest_kept_over_fewer_within_noise_does_not_say_no_fewer_were_within() -> None:
    # At ±20% a block (6 blocks a run) the means are still too uncertain: the doubt goes to the faster 8, and its
    # reason says that fewer are within noise instead of "no fewer within".
    choice = _flat_tuner(0.20).choice(USER)
    assert choice.config.num_workers == 8
    assert "no fewer within" not in choice.reason
    assert "fewer within noise, none surely within 5%" in choice.reason


def _own_first(own: TrialConfig, **kwargs: object) -> Tuner:
    """A Tuner told the job's own configuration, as loadertop.tune builds it."""
    settings = tune_settings(own, machine(), None, 0.05, cuda=False)
    return Tuner(settings, machine(), UserArgs(config=own), **kwargs)  # type: ignore[arg-type]


def test_a_switch_needs_the_jobs_own_run_and_a_rival() -> None:
    own = TrialConfig(1, 32, 2)
    # `run --tune 30` measured 0 workers only, never the job's 1 worker, and switched: "try max_workers"
    only_rival = Tuner(tune_settings(own, machine(), None, 0.05, cuda=False), machine())
    only_rival.feed(result(0, 13.0), None)
    kept = only_rival.choice(own)
    assert kept.kept and kept.config.num_workers == 1 and "it was not measured in the budget" in kept.reason
    assert kept.snippet == "DataLoader(dataset, batch_size=32, num_workers=1)"

    tuner = _own_first(own, terms=RUN_TUNE_TERMS, budget_s=30.0)
    first = tuner.next()
    assert first is not None and first.num_workers == 1  # the job's own loader first: nothing to switch
    tuner.feed(result(1, 13.0), None)
    alone = tuner.choice(own)
    assert alone.kept and alone.config == first
    assert alone.reason == (
        "kept w=1 bs=32 pf=2 fork, the job's own: only 1 configuration fit the 30 s budget, nothing to compare it "
        "with; a larger --tune budget measures the others"
    )
    assert "max_workers" not in alone.reason and "budget_s" not in alone.reason  # not run's options


def test_a_win_within_the_noise_keeps_the_jobs_loader_and_a_clear_one_switches() -> None:
    own = TrialConfig(1, 32, 2)
    tuner = _own_first(own)
    tuner.feed(result(1, 100.0, spread=0.04), None)
    tuner.feed(result(0, 103.0, spread=0.04), None)  # the rule's pick (fewer workers, within the band)
    assert analyze(tuner.results, tuner.settings, tuner.machine)[1].config.num_workers == 0  # type: ignore[union-attr]
    within = tuner.choice(own)
    assert within.kept and within.config.num_workers == 1
    assert "w=0 bs=32 measured 103 samples/s against its 100, not faster beyond the 5% noise band" in within.reason
    tuner.feed(result(2, 180.0, spread=0.04), None)
    switched = tuner.choice(own)
    assert not switched.kept and switched.config.num_workers == 2


def test_the_jobs_own_configuration_is_measured_first_and_the_climb_reads_that_run() -> None:
    own = TrialConfig(2, 32, 2)
    tuner = _own_first(own)
    asked = []
    while len(asked) < 6 and (config := tuner.next()) is not None:
        asked.append(config.num_workers)
        tuner.feed(result(config.num_workers, 100.0 * min(config.num_workers, 4) + 50.0), None)
    assert asked[:4] == [2, 0, 1, 4]  # the climb's 2-worker rung is the job's run, not measured again
    assert tuner.decisions[0].startswith("baseline: the job's own configuration first (w=2 bs=32 pf=2 fork)")
