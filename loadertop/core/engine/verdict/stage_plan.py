"""Whether a sweep measures where a sample's time goes (`loadertop stages`) after its trials, and for how long.

The stages take the CPUs, so they never run beside a trial: after the last one, on the sweep's own dataset. By
default (--stages auto) they run only when their estimated cost is at most SHARE of the time the sweep has taken so
far, and the sweep took MIN_SWEEP_S or more: a default sweep pays a few seconds for them, a short one (a quick look,
a test's, --trial-seconds 1) is not made longer. --stages forces them, --no-stages never runs them.

The estimate, from what the sweep measured:
- the child's start: START_S when it is forked from the runner template that started the sweep's runner (torch
  imported; a template leaves after two idle minutes), COLD_START_S when a fresh process must import torch; plus the
  dataset's own build (the sweep timed it);
- the rounds: ROUNDS_S, or ROUND_BATCHES batches of samples if those take longer (two rounds of every way of timing),
  and START_BATCHES more (a fresh worker's first batch, the 0-worker one), at the dataset's time per sample: the
  fastest trial's workers ÷ its samples/s (1 ÷ samples/s at 0 workers), at least what one sample costs one process.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from loadertop.core.engine.wording import seconds as said
from loadertop.core.model.results import TrialResult

SHARE = 0.05  # of the sweep's time so far: the most the stages may cost by default
MIN_SWEEP_S = 60.0  # a shorter sweep (a quick look, a test's) is not made longer by default
START_S = 1.0  # forked from a warm template: the fork, a fresh worker's first batch, the hand-over (0.3 s of it)
COLD_START_S = 3.0  # a fresh process importing torch first (2-4 s on a busy 2-CPU machine)
ROUNDS_S = 1.0  # the rounds' time (`loadertop stages --seconds`)
SAMPLES = 200  # ... or until each way of timing has this many samples
ROUND_BATCHES = 4  # batches of samples the two rounds need, however short ROUNDS_S is
START_BATCHES = 2  # a fresh worker's first batch and a 0-worker one, before the rounds
FORCED_TIMEOUT_S = 240.0  # --stages: a fresh process importing torch on a busy machine, as `loadertop stages`
SLACK = 2.0  # auto: the child is killed past SLACK × its estimate + COLD_START_S (a busier machine than the estimate's)


@dataclass(frozen=True)
class StagesPlan:
    run: bool
    why: str  # what is said either way: "measuring ... (~4 s, 3% of the sweep's 2:10)" or why not
    seconds: float = ROUNDS_S
    samples: int = SAMPLES
    batch_size: int = 32
    timeout_s: float = FORCED_TIMEOUT_S


def sample_seconds(trials: Sequence[TrialResult]) -> float | None:
    """The dataset's time per sample in one process, at most: min over finished trials of workers ÷ samples/s (a
    worker serves its share of the samples in that time, idle or not); None when no trial finished."""
    times = [max(1, t.config.num_workers) / t.samples_per_s for t in trials
             if t.status == "ok" and t.samples_per_s and t.samples_per_s > 0]  # fmt: skip
    return min(times, default=None)


def fastest_batch(trials: Sequence[TrialResult], default: int) -> int:
    """The batch size of the fastest finished trial: the batch the recommendation most likely keeps."""
    ok = [t for t in trials if t.status == "ok" and t.samples_per_s]
    return max(ok, key=lambda t: t.samples_per_s or 0.0).config.batch_size if ok else default


def estimate_s(per_sample_s: float, batch_size: int, build_s: float | None, warm: bool) -> float:
    batch = batch_size * per_sample_s
    start = START_S if warm else COLD_START_S
    return start + (build_s or 0.0) + max(ROUNDS_S, ROUND_BATCHES * batch) + START_BATCHES * batch


def plan_stages(
    mode: str, trials: Sequence[TrialResult], sweep_s: float, build_s: float | None, batch_size: int, warm: bool
) -> StagesPlan:
    """Whether to measure the stages now that the trials are over (`mode`: the --stages setting), `sweep_s` into the
    sweep, with the batch size the stages measure the collate and the hand-over with; `warm`: a runner template is
    there to fork the child from."""
    if mode == "off":
        return StagesPlan(False, "not measured (--no-stages)")
    per_sample = sample_seconds(trials)
    if per_sample is None and mode != "on":
        return StagesPlan(False, "not measured: no trial finished to say what a sample costs (--stages forces it)")
    if mode == "on":
        return StagesPlan(True, "measuring where a sample's time goes (--stages)", batch_size=batch_size)
    assert per_sample is not None
    cost = estimate_s(per_sample, batch_size, build_s, warm)
    budget = SHARE * sweep_s
    share = f"~{said(cost)}, {cost / sweep_s:.0%} of the sweep's {said(sweep_s)}" if sweep_s > 0 else ""
    if sweep_s < MIN_SWEEP_S:
        return StagesPlan(False, f"not measured: the sweep took {said(sweep_s)}, less than {said(MIN_SWEEP_S)} "
                                 "(--stages measures them anyway, `loadertop stages` alone)")  # fmt: skip
    if cost > budget:
        return StagesPlan(False, f"not measured: they would take {share}, more than {SHARE:.0%} of it "
                                 "(--stages measures them anyway, `loadertop stages` alone)")  # fmt: skip
    return StagesPlan(True, f"measuring where a sample's time goes ({share}; --no-stages skips it)",
                      batch_size=batch_size, timeout_s=SLACK * cost + COLD_START_S)  # fmt: skip
