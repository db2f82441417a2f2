"""The worker curve of the recommended configuration and its knee: where adding workers stops paying.

Two rules are always computed. Kneedle (diminishing returns) names the knee when it finds one; the noise band rule
(fewest workers within the noise band of the peak) otherwise. The recommendation always uses the band rule."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence
from typing import Any

from loadertop.core.engine.verdict.band import Noise, choose_merged, finished, merge_repeats, noise_band, within_band
from loadertop.core.engine.wording import pct, sps, workers
from loadertop.core.model.curves import curve_key, on_curve
from loadertop.core.model.results import Knee, TrialResult

# Kneedle's point must reach this share of the peak: below it, more workers still pay a third or more.
KNEEDLE_MIN_SHARE = 0.75


def worker_curve(trials: Sequence[TrialResult], tolerance: float) -> list[TrialResult]:
    """The recommended configuration's num_workers curve (repeats merged, one point per worker count)."""
    ok = merge_repeats(finished(trials))
    if not ok:
        return []
    return curve_of(ok, choose_merged(ok, tolerance, Noise.of(trials, tolerance))[1])


def curve_of(ok: list[TrialResult], rec: TrialResult) -> list[TrialResult]:
    """The curve `rec` lies on (model/curves.py), the best trial per worker count, sorted by workers.

    The 0-worker point starts every curve of its family. A 0-worker recommendation takes the curve, among those it
    starts, with the fastest trial."""
    if rec.config.num_workers > 0:
        key = curve_key(rec.config)
    else:
        matching = [t for t in ok if t.config.num_workers > 0 and on_curve(rec.config, curve_key(t.config))]
        if not matching:
            return _best_per_count([t for t in ok if curve_key(t.config) == curve_key(rec.config)])
        key = curve_key(max(matching, key=sps).config)
    return _best_per_count([t for t in ok if on_curve(t.config, key)])


def _best_per_count(members: list[TrialResult]) -> list[TrialResult]:
    by_count: dict[int, TrialResult] = {}
    for t in members:
        held = by_count.get(t.config.num_workers)
        if held is None or sps(t) > sps(held):
            by_count[t.config.num_workers] = t
    return [by_count[n] for n in sorted(by_count)]


def knee(curve: list[TrialResult], tol: float, noise: Noise | None = None) -> Knee:
    """The knee of a worker curve, or why there is none (too few points, flat, still rising)."""
    counts = [t.config.num_workers for t in curve]
    if len(counts) < 3:
        return Knee(None, "none", f"too few points for a knee ({len(counts)} worker counts)")
    ys = [sps(t) for t in curve]
    peak_i = max(range(len(ys)), key=lambda i: (ys[i], -i))
    low_i = min(range(len(ys)), key=lambda i: ys[i])
    peak, top = curve[peak_i], ys[peak_i]
    band = noise_band(tol, peak, curve[low_i])
    if top <= 0 or (top - ys[low_i]) / top <= band:
        spread = (top - ys[low_i]) / top if top > 0 else 0.0
        return Knee(
            None,
            "flat",
            f"no clear knee: throughput flat within {pct(spread)} from {counts[0]} to {workers(counts[-1])} "
            f"(noise band {pct(band)})",
        )
    drop = drop_after_peak(curve, tol, noise)
    drop_text = f"; slower again at {workers(drop[0].config.num_workers)} ({pct(drop[1], signed=True)})" if drop else ""
    peak_text = f"the {top:.0f} samples/s peak at {workers(counts[peak_i])}"
    # Kneedle reads diminishing returns of adding workers, from 1 worker on: the 0-worker point is another way of
    # loading (in the training process), often faster than 1 worker, and read as the curve's start that dip puts
    # the "knee" on 0 workers even where workers add far more than the band. 0 workers is a knee only by the band.
    first = next((i for i, n in enumerate(counts) if n > 0), len(counts))
    knee_x = _kneedle(counts[first : peak_i + 1], ys[first : peak_i + 1])
    if knee_x is not None and sps(curve[counts.index(knee_x)]) < KNEEDLE_MIN_SHARE * top:
        knee_x = None  # a point this far below the peak is where gains are still large, whatever the curvature says
    band_t = next(t for t in curve[: peak_i + 1] if within_band(t, peak, tol))
    band_x = band_t.config.num_workers
    if knee_x is not None:
        k = curve[counts.index(knee_x)]
        return Knee(
            knee_x,
            "kneedle",
            f"gains flatten at {workers(knee_x)} ({sps(k):.0f} samples/s, {pct(sps(k) / top)} of {peak_text})"
            + drop_text,
            kneedle=knee_x,
            noise_band=band_x,
        )
    if band_x == counts[-1] and peak_i == len(curve) - 1:
        return Knee(
            None,
            "rising",
            f"no knee yet: throughput still rising at {workers(band_x)} ({top:.0f} samples/s, the largest tried; "
            f"{workers(counts[-2])}: {ys[-2]:.0f})",
            noise_band=band_x,
        )
    t_band = noise_band(tol, band_t, peak)
    if band_t is peak:
        text = f"the {top:.0f} samples/s peak at {workers(band_x)}; no fewer workers within {pct(t_band)}"
    else:
        text = f"{workers(band_x)} within {pct(t_band)} of {peak_text}"
    return Knee(band_x, "noise band", text + drop_text, noise_band=band_x)


def _kneedle(xs: list[int], ys: list[float]) -> int | None:
    if len(xs) < 3:
        return None
    KneeLocator = _knee_locator()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # kneed warns when it finds no knee; that is an answer, not a problem
        try:
            found = KneeLocator(xs, ys, curve="concave", direction="increasing").knee
        except (ValueError, ZeroDivisionError, FloatingPointError):
            return None
    if found is None:
        return None
    knee_i = round(float(found))
    return knee_i if knee_i in xs else None


def _knee_locator() -> Any:
    """kneed's KneeLocator, imported without matplotlib.pyplot: kneed imports it for plot helpers loadertop never
    calls, which costs a quarter second of CPU in every process and, on a machine without matplotlib's font cache,
    runs `fc-list` to build one."""
    if "kneed" in sys.modules or "matplotlib.pyplot" in sys.modules:
        from kneed import KneeLocator

        return KneeLocator
    sys.modules["matplotlib.pyplot"] = None  # type: ignore[assignment]  # the import raises ImportError: kneed's "no plots"
    try:
        from kneed import KneeLocator
    finally:
        del sys.modules["matplotlib.pyplot"]
    return KneeLocator


def drop_after_peak(
    curve: list[TrialResult], tol: float, noise: Noise | None = None
) -> tuple[TrialResult, float] | None:
    """The slowest point after the curve's peak when it is slower by more than the band, and surely slower by the
    noise between runs when `noise` is given: (trial, relative change)."""
    if not curve:
        return None
    ys = [sps(t) for t in curve]
    peak_i = max(range(len(ys)), key=lambda i: (ys[i], -i))
    after = curve[peak_i + 1 :]
    if not after or ys[peak_i] <= 0:
        return None
    worst = min(after, key=sps)
    change = sps(worst) / ys[peak_i] - 1.0
    if -change > noise_band(tol, worst, curve[peak_i]) and (noise is None or noise.surely_slower(worst, curve[peak_i])):
        return worst, change
    return None
