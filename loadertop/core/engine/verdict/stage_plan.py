"""Whether a sweep measures where a sample's time goes (`loadertop stages`) after its trials, and for how long.

The stages take the CPUs, so they never run beside a trial: after the last one, on the sweep's own dataset. By
default (--stages auto) they run only when their estimated cost is at most SHARE of the time the sweep has taken so
far: a default sweep of a minute or more pays a few seconds for them, a short sweep (a test's, --trial-seconds 1)
does not. --stages forces them, --no-stages never runs them.

The estimate, from what the sweep measured:
- START_S: a fresh process importing torch and the dataset's code, a fresh worker's first batch, the hand-over
  (about 3 s on a quiet 2-CPU machine), plus the dataset's own build (the sweep timed it);
- the rounds: ROUNDS_S, and at least FLOOR_BATCHES batches of samples whatever the time (the first batches, the two
  rounds each way of timing needs, the hand-over), at the dataset's time per sample: the fastest trial's workers ÷
  its samples/s (1 ÷ samples/s at 0 workers), which is at least what one sample costs one process.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from loadertop.core.engine.wording import seconds as said
from loadertop.core.model.results import TrialResult

SHARE = 0.05  # of the sweep's time so far: the most the stages may cost by default
START_S = 3.0  # the child's start, its first batches and the hand-over, beside the rounds
ROUNDS_S = 1.0  # the rounds' time (`loadertop stages --seconds`)
SAMPLES = 200  # ... or until each way of timing has this many samples
FLOOR_BATCHES = 6  # batches of samples the child fetches however short ROUNDS_S is
FORCED_TIMEOUT_S = 240.0  # --stages: a fresh process importing torch on a busy machine, as `loadertop stages`
SLACK = 2.0  # auto: the child is killed past SLACK × its estimate + START_S (a machine busier than the estimate)


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


def estimate_s(per_sample_s: float, batch_size: int, build_s: float | None) -> float:
    return START_S + (build_s or 0.0) + ROUNDS_S + FLOOR_BATCHES * batch_size * per_sample_s


def plan_stages(
    mode: str, trials: Sequence[TrialResult], sweep_s: float, build_s: float | None, batch_size: int
) -> StagesPlan:
    """Whether to measure the stages now that the trials are over (`mode`: the --stages setting), `sweep_s` into the
    sweep, with the batch size the stages measure the collate and the hand-over with."""
    if mode == "off":
        return StagesPlan(False, "not measured (--no-stages)")
    per_sample = sample_seconds(trials)
    if per_sample is None and mode != "on":
        return StagesPlan(False, "not measured: no trial finished to say what a sample costs (--stages forces it)")
    if mode == "on":
        return StagesPlan(True, "measuring where a sample's time goes (--stages)", batch_size=batch_size)
    assert per_sample is not None
    cost = estimate_s(per_sample, batch_size, build_s)
    budget = SHARE * sweep_s
    share = f"~{said(cost)}, {cost / sweep_s:.0%} of the sweep's {said(sweep_s)}" if sweep_s > 0 else ""
    if cost > budget:
        return StagesPlan(False, f"not measured: they would take {share}, more than {SHARE:.0%} of it "
                                 "(--stages measures them anyway, `loadertop stages` alone)")  # fmt: skip
    return StagesPlan(True, f"measuring where a sample's time goes ({share}; --no-stages skips it)",
                      batch_size=batch_size, timeout_s=SLACK * cost + START_S)  # fmt: skip
