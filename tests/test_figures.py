"""The one measurement core (loadertop/core/model/figures.py): its definitions, and the same figures from the same
batch times whichever way a loader is measured: a sweep's trial, tune in the training loop, watch and attach."""

from __future__ import annotations

import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadertop.core.engine.live.snapshot import Interval, MessageFold
from loadertop.core.job.tune_measure import BLOCK_S, Meter
from loadertop.core.job.watch import WAITS_SENT, StepRecorder
from loadertop.core.model import figures
from loadertop.core.model.config import TrialConfig
from loadertop.core.model.live_protocol import JobSteps
from loadertop.core.trial.measure import _Tally, _Timed

pytestmark = pytest.mark.unit

CONFIG = TrialConfig(num_workers=2, batch_size=8)

batch_times = st.lists(
    st.tuples(
        st.floats(0.0, 0.05),  # the wait in next(), s
        st.floats(0.001, 0.05),  # the consumer's step, s
        st.integers(1, 8),  # samples in the batch (the last of an epoch may be short)
    ),
    min_size=12,
    max_size=300,
)


def by_sweep(records: list[tuple[float, float, int]]) -> figures.RunFigures:
    """A trial's figures: its tally of blocks, cut as the trial cuts them, and their waits."""
    waits, steps, samples = (list(x) for x in zip(*records, strict=True))
    tally = _Tally()
    start = 0
    for block in figures.blocks_of(waits, steps, samples, BLOCK_S):
        tally.add(_Timed(block, tuple(waits[start : start + block.batches])))
        start += block.batches
    return tally.figures()


def by_tune(records: list[tuple[float, float, int]]) -> tuple[float, float, float | None, tuple[float | None, ...]]:
    meter = Meter(CONFIG, skip=0)
    for wait, step, samples in records:
        meter.add(wait, step, samples)
    t = meter.result(0, target_spread=0.05, span_s=0.0)
    assert t.status == "ok" and t.samples_per_s is not None and t.stall_fraction is not None
    return t.samples_per_s, t.stall_fraction, t.spread, (t.wait_ms_p50, t.wait_ms_p95, t.wait_ms_p99)


def by_watch(records: list[tuple[float, float, int]], spans: int) -> tuple[float, float, tuple[float | None, ...]]:
    """watch() records every step; its publisher sends them in `spans` JobSteps; attach folds them into one
    interval as long as the steps took."""
    recorder = StepRecorder(None, loader_id=0)
    recorder.epoch_started(0, (), CONFIG)
    messages = []
    cut = max(1, len(records) // spans)
    clock = 0.0  # the job's clock: each drain at the time its steps ended
    for i, (wait, step, samples) in enumerate(records):
        recorder.step(wait, step, samples)
        clock += wait + step
        if (i + 1) % cut == 0:
            messages += recorder.drain(now=clock)
    messages += recorder.drain(now=clock)
    interval = Interval()
    fold = MessageFold(started_wall=0.0, attach_wall=0.0)
    fold.fold(messages, interval)
    assert sum(m.batches for m in messages if isinstance(m, JobSteps)) == len(records)
    seconds = fold.job_seconds(interval)
    assert seconds is not None
    samples_per_s, _, stall, _ = interval.rates(seconds)
    p50, p95, p99, _ = interval.wait_tails()
    assert samples_per_s is not None and stall is not None
    return samples_per_s, stall, (p50, p95, p99)


@settings(max_examples=60, deadline=None)
@given(batch_times, st.integers(1, 5))
def test_sweep_tune_and_watch_give_the_same_figures_on_the_same_batch_times(
    records: list[tuple[float, float, int]], spans: int
) -> None:
    sweep = by_sweep(records)
    rate, stall, spread, tails = by_tune(records)
    watch_rate, watch_stall, watch_tails = by_watch(records, spans)
    stopwatch = sum(s for _, _, s in records) / sum(w + s for w, s, _ in records)
    assert sweep.samples_per_s == pytest.approx(stopwatch) == rate == pytest.approx(watch_rate)
    assert sweep.stall_fraction == pytest.approx(stall) == pytest.approx(watch_stall)
    assert sweep.spread == pytest.approx(spread)
    expected = (sweep.tails.p50, sweep.tails.p95, sweep.tails.p99) if sweep.tails else (None, None, None)
    assert tails == pytest.approx(expected)
    assert watch_tails == pytest.approx(expected, abs=1e-3)  # JobSteps carries waits in ms to the µs


def test_quantiles_interpolate_between_ranks_as_numpy_and_statistics_do() -> None:
    values = [3.0, 1.0, 4.0, 1.5, 9.0, 2.6]
    for q in (0.0, 0.25, 0.5, 0.95, 0.99, 1.0):
        assert figures.quantile(values, q) == pytest.approx(
            statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1] if 0 < q < 1 else
            (min(values) if q == 0 else max(values))
        )  # fmt: skip
    assert figures.quantile([], 0.5) is None and figures.quantile([7.0], 0.99) == 7.0
    assert figures.wait_tails([0.01]) is None  # one wait has no tail


def test_spread_is_the_interquartile_range_over_the_median_and_says_nothing_of_one_block() -> None:
    assert figures.spread([100.0]) is None
    assert figures.spread([90.0, 100.0, 110.0, 100.0, 100.0]) == pytest.approx(0.0)
    assert figures.spread([80.0, 90.0, 100.0, 110.0, 120.0]) == pytest.approx(20.0 / 100.0)


def test_a_run_reads_its_samples_over_its_seconds_not_the_median_block() -> None:
    # Four quick blocks and a slow one (a GC pause): training pays the slow one, a median of blocks would not.
    fast = [figures.Block(10, 100, 0.1, 0.9, 1.0)] * 4
    slow = figures.Block(10, 100, 2.1, 0.9, 3.0)
    run = figures.run_figures([*fast, slow], [0.01] * 50)
    assert run.samples_per_s == pytest.approx(500 / 7.0)
    assert run.samples_per_s < statistics.median(b.samples_per_s for b in [*fast, slow])


def test_an_epoch_boundary_is_paid_once_an_epoch_and_a_cheap_one_costs_nothing() -> None:
    # 62 batches at 10/s between boundaries, 1.2 s from an epoch's last batch to the next one's first: 1.1 s more
    # than a batch would take, once every 6.2 s.
    assert figures.per_epoch(10.0, 62, 1.2) == pytest.approx(62 / (6.2 + 1.1))
    assert figures.per_epoch(10.0, 62, 0.05) == pytest.approx(10.0)
    assert figures.per_epoch(10.0, 0, 5.0) == pytest.approx(10.0)


def test_fresh_runs_disagree_by_their_pooled_relative_deviation() -> None:
    between = figures.between_runs({"a": [90.0, 110.0], "b": [200.0], "c": [300.0, 300.0, 300.0]})
    assert between.dof == 3 and between.sd == pytest.approx((0.01 + 0.01) ** 0.5 / 3**0.5)
    assert figures.between_runs({"a": [1.0]}) == figures.Between(None, 0)


def test_a_span_with_many_waits_sends_their_order_statistics() -> None:
    recorder = StepRecorder(None, loader_id=0)
    recorder.epoch_started(0, (), CONFIG)
    for i in range(3 * WAITS_SENT):
        recorder.step(i / 1000.0, 0.001, 1)
    (steps,) = [m for m in recorder.drain(now=1.0) if isinstance(m, JobSteps)]
    assert len(steps.waits_ms) == WAITS_SENT and steps.waits_ms[0] == 0.0 and steps.waits_ms[-1] == 3 * WAITS_SENT - 1
    assert figures.quantile(steps.waits_ms, 0.5) == pytest.approx(steps.wait_ms_p50, rel=0.01)


def test_a_trial_decides_early_only_with_the_blocks_a_settled_run_has() -> None:
    from loadertop.core.model.config import Settings
    from loadertop.core.trial.measure import MeasuredLoop

    loop = MeasuredLoop.__new__(MeasuredLoop)  # only its decision rule: no loader
    loop.settings, loop.decide = Settings(min_blocks=5), (None, 100.0)
    tally = _Tally()
    for rate in (150.0, 160.0, 90.0, 170.0, 180.0, 175.0):
        tally.add(_Timed(figures.Block(10, int(rate), 0.5, 0.5, 1.0)))
        decided = loop._decided(tally)
        # three blocks in a row above 100 samples/s after the fifth: never on the first three, however clear
        assert decided == (len(tally.blocks) >= 5 and min(tally.rates[-3:]) > 100.0)
    assert decided


def test_a_steady_job_reads_a_steady_rate_in_every_interval_whatever_the_drains_cut() -> None:
    # 11 samples every 0.7 s (15.7 samples/s), drained every 0.5 s mid-batch, shown every 1 s: timed to the drains,
    # the intervals read 11, then 22 samples/s (whole batches over whole seconds).
    recorder = StepRecorder(None, loader_id=0)
    recorder.epoch_started(0, (), None)  # at the job's t=0, as watch() says when it starts an iterator
    fold = MessageFold(started_wall=0.0, attach_wall=0.0)
    step_ends = [0.7 * k for k in range(1, 60)]
    rates = []
    for second in range(1, 40):
        interval = Interval()
        for drain in (second - 0.5, float(second)):
            while step_ends and step_ends[0] <= drain:
                recorder.step(0.2, 0.5, 11)
                step_ends.pop(0)
            fold.fold(recorder.drain(now=drain), interval)
        seconds = fold.job_seconds(interval)
        assert seconds is not None
        rates.append(interval.rates(seconds)[0])
    assert all(rate == pytest.approx(11 / 0.7) for rate in rates), rates
