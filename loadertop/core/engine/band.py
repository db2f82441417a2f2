"""The noise band and the rule built on it: the recommended configuration is the cheapest within the noise band
of the fastest. Finalists measured twice merge into one point first, so a repeat counts once."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from loadertop.core.engine.wording import sps
from loadertop.core.model.config import TrialConfig
from loadertop.core.model.results import TrialResult

BAND_CAP = 3.0  # the noise band is at most this many times the tolerance (15% by default)
MEMORY_SLACK = 0.05  # PSS differences under 5% (or MEMORY_SLACK_MB) are measurement noise, not a real cost
MEMORY_SLACK_MB = 16.0


def noise_band(tolerance: float, *trials: TrialResult) -> float:
    """The relative difference below which throughputs are the same: the tolerance or the widest spread of the
    trials compared, at most BAND_CAP × the tolerance. A spread wider than that is a busy machine, not a band:
    taken as one, it would call a 50% gain noise and steer "cheapest within the band" to too few workers."""
    return min(max(tolerance, *(t.spread or 0.0 for t in trials)), BAND_CAP * tolerance)


def within_band(t: TrialResult, ref: TrialResult, tolerance: float) -> bool:
    """Whether `t` is as fast as `ref` within their noise band (faster counts too)."""
    return sps(t) >= sps(ref) * (1.0 - noise_band(tolerance, t, ref))


def finished(trials: Sequence[TrialResult]) -> list[TrialResult]:
    """The trials that finished with a throughput."""
    return [t for t in trials if t.status == "ok" and t.samples_per_s is not None and math.isfinite(t.samples_per_s)]


def choose(trials: Sequence[TrialResult], tolerance: float) -> tuple[TrialResult, TrialResult] | None:
    """(fastest, recommended) over the finished trials, repeats merged; the recommendation is the rule
    "cheapest within the noise band of the best". None when nothing finished."""
    ok = merge_repeats(finished(trials))
    return choose_merged(ok, tolerance) if ok else None


def choose_merged(ok: list[TrialResult], tolerance: float) -> tuple[TrialResult, TrialResult]:
    """`choose` over trials already finished and merged (not empty)."""
    best = max(ok, key=lambda t: (sps(t), -t.config.num_workers))
    return best, _cheapest_within_band(ok, best, tolerance)


def _cheapest_within_band(ok: list[TrialResult], best: TrialResult, tol: float) -> TrialResult:
    """Fewest workers within the band of the best; then less memory (beyond measurement noise); then throughput."""
    candidates = [t for t in ok if within_band(t, best, tol)]
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
    return dataclasses.replace(
        max(runs, key=lambda t: t.index),
        samples_per_s=mean,
        batches_per_s=_mean([t.batches_per_s for t in runs]),
        spread=max(between, within),
        stall_fraction=_mean([t.stall_fraction for t in runs]),
        cpu_percent=_mean([t.cpu_percent for t in runs]),
        main_cpu_percent=_mean([t.main_cpu_percent for t in runs]),
        blocks=sum(t.blocks for t in runs),
        measured_s=sum(t.measured_s for t in runs),
    )


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None
