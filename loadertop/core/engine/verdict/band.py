"""The noise band and the rule built on it: the recommended configuration is the cheapest within the noise band
of the fastest. Finalists measured more than once merge into one point first, so a repeat counts once.

The band of a comparison comes from the noise one run shows: its own spread, or the run-to-run disagreement between
repeats of the same configurations (pooled over every configuration measured more than once) where that is larger.
A configuration measured k times has a mean k times steadier, so its comparisons get a narrower band (`Noise`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from loadertop.core.engine.verdict.memory import own_memory
from loadertop.core.engine.wording import pct, sps
from loadertop.core.model.config import TrialConfig
from loadertop.core.model.figures import at_least_within, between_runs, mean_of, relative_gap
from loadertop.core.model.results import TrialResult

BAND_CAP = 3.0  # the noise band is at most this many times the tolerance (15% by default)
MEMORY_SLACK = 0.05  # PSS differences under 5% (or MEMORY_SLACK_MB) are measurement noise, not a real cost
MEMORY_SLACK_MB = 16.0
# Standard errors of margin between a recommendation's lag behind the best and the band's edge (Noise.surely_within).
# In the simulation (benchmarks/SIM.md) it lifts the accuracy's p10 from 0.946 to 0.954-0.966 over three sets of
# 360 seeded cases, at the same cost; the equivalence set ("within noise of the best") is unchanged.
SURE = 1.0
# Runs measured more than once, counting each extra run, before their disagreement is the noise of a run's mean.
TRUSTED_DOF = 2
IQR_PER_SIGMA = 1.35  # a run's spread is its blocks' IQR / median: 1.35 σ for normal noise
# Standard errors of their difference beyond which two means surely differ: what settles a duel, what leaves a
# configuration out of the equivalence set, and what any sentence that calls one slower must rest on.
Z = 2.0


def noise_band(tolerance: float, *trials: TrialResult) -> float:
    """The relative difference below which throughputs are the same: the tolerance or the widest spread of the
    trials compared, at most BAND_CAP × the tolerance. A spread wider than that is a busy machine, not a band:
    taken as one, it would call a 50% gain noise and steer "cheapest within the band" to too few workers."""
    return min(max(tolerance, *(t.spread or 0.0 for t in trials)), BAND_CAP * tolerance)


def within_band(t: TrialResult, ref: TrialResult, tolerance: float) -> bool:
    """Whether `t` is as fast as `ref` within their noise band (faster counts too)."""
    return at_least_within(sps(t), sps(ref), noise_band(tolerance, t, ref))


def finished(trials: Sequence[TrialResult]) -> list[TrialResult]:
    """The trials that finished with a throughput."""
    return [t for t in trials if t.status == "ok" and t.samples_per_s is not None and math.isfinite(t.samples_per_s)]


@dataclass(frozen=True)
class Noise:
    """What the finished runs say about the noise: per configuration, how many runs and the steadiest run's own
    spread; over the configurations measured more than once, the run-to-run disagreement (the pooled relative
    standard deviation of a run about its configuration's mean)."""

    tolerance: float
    runs: Mapping[TrialConfig, int]
    own: Mapping[TrialConfig, float]
    between: float | None  # None when nothing was measured twice
    dof: int = 0  # the degrees of freedom behind `between`
    own_se: Mapping[TrialConfig, float] = dataclasses.field(default_factory=dict)  # steadiest run's mean: its SE

    @classmethod
    def of(cls, trials: Sequence[TrialResult], tolerance: float) -> Noise:
        groups: dict[TrialConfig, list[TrialResult]] = {}
        for t in finished(trials):
            groups.setdefault(t.config, []).append(t)
        between = between_runs({c: [sps(t) for t in runs] for c, runs in groups.items()})
        return cls(
            tolerance,
            {c: len(runs) for c, runs in groups.items()},
            {c: min((t.spread or 0.0) for t in runs) for c, runs in groups.items()},
            between.sd,
            between.dof,
            {c: min(_mean_se(t) for t in runs) for c, runs in groups.items()},
        )

    def level(self, *trials: TrialResult) -> float:
        """The noise of one run's mean throughput for these configurations. Once repeats have measured it
        (TRUSTED_DOF), it is their run-to-run disagreement, or a run's own standard error where that is larger.
        Before, a run's block spread stands in for it: wider than the noise of a mean over many blocks, but
        nothing else says how far two runs of one configuration can differ. Kept after the repeats, that proxy
        made every configuration but the fastest-read one "perhaps behind by more", so a flat curve's pick went
        to whichever repeat read highest, most often the most workers."""
        if self.between is not None and self.dof >= TRUSTED_DOF:
            return max(self.between, *(self.own_se.get(t.config, _mean_se(t)) for t in trials))
        own = (self.own.get(t.config, t.spread or 0.0) for t in trials)
        return max(self.between or 0.0, *own)

    def stderr(self, a: TrialResult, b: TrialResult) -> float:
        """The standard error of the relative difference between the two configurations' mean throughputs: each
        one's noise (`level`) over its own runs, so a steady configuration is not judged by a noisy one's."""
        return math.sqrt(self.level(a) ** 2 / self.count(a) + self.level(b) ** 2 / self.count(b))

    def count(self, t: TrialResult) -> int:
        return max(1, self.runs.get(t.config, 1))

    def band(self, t: TrialResult, ref: TrialResult) -> float:
        """`noise_band` for two means: one run's noise narrowed by the runs behind them (√ of their harmonic mean,
        so single runs get exactly the one-run band), at least the tolerance, at most BAND_CAP × it."""
        narrowed = self.stderr(t, ref) / math.sqrt(2.0)
        return min(max(self.tolerance, narrowed), BAND_CAP * self.tolerance)

    def within(self, t: TrialResult, ref: TrialResult) -> bool:
        """Whether `t` is as fast as `ref` within their band (faster counts too)."""
        return at_least_within(sps(t), sps(ref), self.band(t, ref))

    def surely_outside(self, t: TrialResult, ref: TrialResult) -> bool:
        """Whether `t` is slower than `ref` by more than their band, beyond Z standard errors of the difference of
        their means: then, and only then, it is out of the equivalence set, and "slower beyond the band" is said.
        Unlike the band, the standard error has no cap: on a busy machine the set is as wide as the runs say."""
        return relative_gap(sps(t), sps(ref)) + self.band(t, ref) < -Z * self.stderr(t, ref)

    def surely_slower(self, t: TrialResult, ref: TrialResult) -> bool:
        """Whether `t` is slower than `ref` at all, beyond Z standard errors: what "slower" alone rests on."""
        return relative_gap(sps(t), sps(ref)) < -Z * self.stderr(t, ref)

    def measured(self) -> bool:
        """Whether fresh runs of one configuration have been compared: without that, the noise of a run's mean is
        its blocks' spread standing in, which is narrower than how far two runs differ."""
        return self.between is not None

    def runs_to_tell(self, *trials: TrialResult) -> int:
        """Runs of each of two configurations that would tell a difference of the tolerance apart at Z standard
        errors, at this noise."""
        return math.ceil(2.0 * (Z * self.level(*trials) / self.tolerance) ** 2)

    def surely_within(self, t: TrialResult, ref: TrialResult) -> bool:
        """Whether `t` is within the band of `ref` by a margin of SURE standard errors of their difference: what a
        recommendation must be. "Within noise" alone would let a configuration truly a little past the band, read
        a little fast, be recommended: the user's tolerance is a limit on what they lose, so the doubt goes to
        the faster configuration. `ref` itself always is."""
        if t.config == ref.config:
            return True
        if self.count(t) == 1 and self.count(ref) == 1:
            return self.within(t, ref)
        return at_least_within(sps(t), sps(ref), self.band(t, ref) - SURE * self.stderr(t, ref))


@dataclass(frozen=True)
class Win:
    """One configuration against a reference, each over all its runs (their mean): whether it is faster by more
    than their noise band, beyond Z standard errors of the difference (`Noise.surely_outside`, the other way round).
    What a switch away from a running job's own configuration must rest on."""

    samples_per_s: float
    ref_samples_per_s: float
    band: float
    sure: bool


def win_over(config: TrialConfig, ref: TrialConfig, trials: Sequence[TrialResult], tolerance: float) -> Win | None:
    """`config` against `ref` over `trials`; None when either has no finished run."""
    merged = {t.config: t for t in merge_repeats(finished(trials))}
    t, r = merged.get(config), merged.get(ref)
    if t is None or r is None:
        return None
    noise = Noise.of(trials, tolerance)
    return Win(sps(t), sps(r), noise.band(t, r), noise.surely_outside(r, t))


def _mean_se(t: TrialResult) -> float:
    """The standard error of one run's mean throughput from its own blocks."""
    return (t.spread or 0.0) / IQR_PER_SIGMA / math.sqrt(max(1, t.blocks))


def choose(trials: Sequence[TrialResult], tolerance: float) -> tuple[TrialResult, TrialResult] | None:
    """(fastest, recommended) over the finished trials, repeats merged; the recommendation is the rule
    "cheapest within the noise band of the best", the band narrowed by repeats. None when nothing finished."""
    ok = merge_repeats(finished(trials))
    return choose_merged(ok, tolerance, Noise.of(trials, tolerance)) if ok else None


def choose_merged(
    ok: list[TrialResult], tolerance: float, noise: Noise | None = None
) -> tuple[TrialResult, TrialResult]:
    """`choose` over trials already finished and merged (not empty); `noise` from their runs (without it: one run
    each, as the merged points show)."""
    noise = noise or Noise.of(ok, tolerance)
    best = max(ok, key=lambda t: (sps(t), -t.config.num_workers))
    return best, _cheapest_within_band(ok, best, noise)


def equivalent(ok: Sequence[TrialResult], best: TrialResult, noise: Noise) -> list[TrialResult]:
    """The equivalence set: every merged point not surely outside the band of `best` (itself included), by worker
    count. A head-to-head left undecided keeps both."""
    return sorted((t for t in ok if not noise.surely_outside(t, best)), key=lambda t: (t.config.num_workers, -sps(t)))


def inconclusive(noise: Noise, rec: TrialResult, best: TrialResult, tolerance: float) -> str:
    """The clause that leads a reason when the runs differ by more than the widest band (BAND_CAP × tolerance),
    measured between fresh runs: no comparison at the tolerance can be settled on this machine. Else ''."""
    level = noise.level(rec, best)
    if noise.between is None or level <= BAND_CAP * tolerance:
        return ""
    return (
        f"inconclusive: runs of one configuration differ by ±{pct(level)} on this machine (from {noise.dof} "
        f"repeat{'' if noise.dof == 1 else 's'}), wider than the {pct(tolerance)} band; about "
        f"{noise.runs_to_tell(rec, best)} runs of each, or a quieter machine, would settle it"
    )


def _cheapest_within_band(ok: list[TrialResult], best: TrialResult, noise: Noise) -> TrialResult:
    """Fewest workers surely within the band of the best; then less memory (beyond measurement noise); then
    throughput."""
    candidates = [t for t in ok if noise.surely_within(t, best)]
    fewest = min(t.config.num_workers for t in candidates)
    same = [t for t in candidates if t.config.num_workers == fewest]
    known = [t.total_pss_mb for t in same if t.total_pss_mb is not None]
    if known:
        lightest = min(known)
        limit = max(lightest * (1.0 + MEMORY_SLACK), lightest + MEMORY_SLACK_MB)
        same = [t for t in same if t.total_pss_mb is None or t.total_pss_mb <= limit]
    return max(same, key=lambda t: (sps(t), -(t.total_pss_mb or 0.0), -t.index))


def merge_repeats(ok: Sequence[TrialResult]) -> list[TrialResult]:
    """One trial per configuration. Repeats (finalists measured again) merge into the latest run with the mean
    throughput and, as spread, the wider of the runs' disagreement and the steadiest run's own spread: the best
    evidence both ways, hiding neither the difference between runs nor the noise within one."""
    groups: dict[TrialConfig, list[TrialResult]] = {}
    for t in ok:
        groups.setdefault(t.config, []).append(t)
    merged = [runs[0] if len(runs) == 1 else _merged(runs) for runs in groups.values()]
    return sorted(merged, key=lambda t: t.index)


def _merged(runs: list[TrialResult]) -> TrialResult:
    xs = [sps(t) for t in runs]
    mean = sum(xs) / len(xs)
    between = (max(xs) - min(xs)) / mean if mean > 0 else 0.0
    within = min((t.spread for t in runs if t.spread is not None), default=0.0)
    merged = dataclasses.replace(
        max(runs, key=lambda t: t.index),
        samples_per_s=mean,
        batches_per_s=mean_of([t.batches_per_s for t in runs]),
        spread=max(between, within),
        stall_fraction=mean_of([t.stall_fraction for t in runs]),
        cpu_percent=mean_of([t.cpu_percent for t in runs]),
        main_cpu_percent=mean_of([t.main_cpu_percent for t in runs]),
        machine_cpu_percent=mean_of([t.machine_cpu_percent for t in runs]),
        blocks=sum(t.blocks for t in runs),
        measured_s=sum(t.measured_s for t in runs),
    )
    return own_memory(merged, runs)  # memory from a run read alone (engine/verdict/memory.py)
