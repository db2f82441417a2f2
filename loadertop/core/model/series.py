"""Figures over time series of (t seconds, value) points, computed one way wherever they are shown."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

MIN_POINTS = 3
MIN_SPAN_S = 3.0


def slope_per_min(points: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope in units per minute (MB/min for USS); None until MIN_POINTS over MIN_SPAN_S seconds."""
    if len(points) < MIN_POINTS or points[-1][0] - points[0][0] < MIN_SPAN_S:
        return None
    t_mean = statistics.fmean(t for t, _ in points)
    v_mean = statistics.fmean(v for _, v in points)
    den = sum((t - t_mean) ** 2 for t, _ in points)
    if den <= 0.0:
        return None
    return sum((t - t_mean) * (v - v_mean) for t, v in points) / den * 60.0
