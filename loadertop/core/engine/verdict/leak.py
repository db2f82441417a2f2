"""Leak detection: each DataLoader worker's USS over a sliding window, its least-squares slope with a standard
error, and a warning only when the growth is significant.

A worker whose USS climbs steadily is almost always copy-on-read: every Python object a worker reads gets its
reference count written, so the page holding it is copied out of the memory shared with the parent. Over an epoch
a list of dicts ends up copied into each worker. The warning projects when the workers together exhaust the memory
still available to the job.

Only distinct readings are fitted: between full reads the probe repeats the last USS, and repeated values would
fake a flat line. A worker seen under a new pid (workers restart each epoch) starts a new window.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from loadertop.core.engine.wording import duration_text

STEADY_THIRDS = 9  # readings from which steadiness is judged on thirds of the span (3 or more in each)


@dataclass(frozen=True)
class LeakConfig:
    """How cautious the detector is. The defaults keep the false-alarm rate of flat workers at zero in tests
    (tests/test_leak.py runs 1,000 noisy flat series)."""

    window_s: float = 600.0  # readings older than this are dropped
    warmup_s: float = 20.0  # readings of a worker's first seconds (imports, allocator arenas) are ignored
    min_points: int = 6  # distinct readings before a slope is given
    min_span_s: float = 10.0  # ... spanning at least this
    floor_mb_per_min: float = 1.0  # growth slower than this is never a leak worth a warning
    min_rise_mb: float = 8.0  # nor is a fitted rise over the window smaller than this
    z: float = 4.0  # the slope's lower bound (slope - z·stderr) must clear the floor


@dataclass(frozen=True)
class Fit:
    slope_mb_per_min: float
    stderr_mb_per_min: float
    span_s: float
    points: int

    def significant(self, config: LeakConfig) -> bool:
        lower = self.slope_mb_per_min - config.z * self.stderr_mb_per_min
        rise = self.slope_mb_per_min * self.span_s / 60.0
        return lower > config.floor_mb_per_min and rise > config.min_rise_mb


def fit_slope(points: list[tuple[float, float]]) -> Fit | None:
    """Least squares of value on t: slope and its standard error, per minute. None below 3 points or no spread."""
    n = len(points)
    if n < 3:
        return None
    t_mean = math.fsum(t for t, _ in points) / n
    v_mean = math.fsum(v for _, v in points) / n
    sxx = math.fsum((t - t_mean) ** 2 for t, _ in points)
    if sxx <= 0.0:
        return None
    slope = math.fsum((t - t_mean) * (v - v_mean) for t, v in points) / sxx
    intercept = v_mean - slope * t_mean
    residual = math.fsum((v - intercept - slope * t) ** 2 for t, v in points)
    stderr = math.sqrt(residual / (n - 2) / sxx)
    return Fit(slope * 60.0, stderr * 60.0, points[-1][0] - points[0][0], n)


def distinct(points: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Between full reads the probe repeats the last USS: keep the first reading of each run of equal values."""
    kept: list[tuple[float, float]] = []
    for t, value in points:
        if not kept or value != kept[-1][1]:
            kept.append((t, value))
    return kept


def judge(points: Sequence[tuple[float, float]], config: LeakConfig) -> tuple[Fit | None, bool]:
    """The one verdict on a worker's distinct USS readings: its fit (None below `min_points` or `min_span_s`), and
    whether its growth is significant (Fit.significant) and steady (`steady`). Used by the live view and the sweep."""
    if len(points) < config.min_points:
        return None, False
    fit = fit_slope(list(points))
    if fit is None or fit.span_s < config.min_span_s:
        return None, False
    return fit, fit.significant(config) and steady(points, config.floor_mb_per_min)


def steady(points: Sequence[tuple[float, float]], floor: float) -> bool:
    """Growth that goes on, not one step (a cache filled once). With enough readings (STEADY_THIRDS), the first
    third of the span and the last each rise faster than `floor`; with fewer (a sweep's short trial), at least 3
    of the changes between readings, and 3 in 4 of them, are rises."""
    if len(points) >= STEADY_THIRDS:
        start, span = points[0][0], points[-1][0] - points[0][0]
        first = [p for p in points if p[0] <= start + span / 3]
        last = [p for p in points if p[0] >= start + 2 * span / 3]
        fits = [fit_slope(first), fit_slope(last)]
        return all(f is not None and f.slope_mb_per_min > floor for f in fits)
    changes = [b[1] - a[1] for a, b in itertools.pairwise(points) if b[1] != a[1]]
    rises = sum(c > 0 for c in changes)
    return rises >= 3 and rises >= 0.75 * len(changes)


class _Window:
    __slots__ = ("first_t", "last_value", "points")

    def __init__(self, t: float) -> None:
        self.first_t = t
        self.last_value: float | None = None
        self.points: deque[tuple[float, float]] = deque()


class LeakDetector:
    """Feed it every probe reading (`add`); ask `fit(pid)` for a worker's slope and `warning(...)` for the line."""

    def __init__(self, config: LeakConfig | None = None) -> None:
        self.config = config or LeakConfig()
        self._windows: dict[int, _Window] = {}

    def add(self, t: float, uss_mb: Mapping[int, float | None]) -> None:
        """One reading per live worker at time t (seconds). Workers absent from `uss_mb` are forgotten: a worker
        that comes back under the same pid would be a new process anyway."""
        for pid in [p for p in self._windows if p not in uss_mb]:
            del self._windows[pid]
        for pid, value in uss_mb.items():
            window = self._windows.setdefault(pid, _Window(t))
            if value is None or value == window.last_value:
                continue  # unknown, or the probe repeating its last full read
            window.last_value = value
            if t - window.first_t < self.config.warmup_s:
                continue
            window.points.append((t, value))
            while window.points and t - window.points[0][0] > self.config.window_s:
                window.points.popleft()

    def fit(self, pid: int) -> Fit | None:
        window = self._windows.get(pid)
        return None if window is None else judge(list(window.points), self.config)[0]

    def growing(self) -> dict[int, Fit]:
        """The workers whose growth is significant (see LeakConfig) and steady (`steady`)."""
        growing = {}
        for pid, window in self._windows.items():
            fit, grows = judge(list(window.points), self.config)
            if fit is not None and grows:
                growing[pid] = fit
        return growing

    def warning(self, available_mb: float | None) -> str | None:
        """One sentence for the growing workers, or None when none grows significantly."""
        growing = self.growing()
        if not growing:
            return None
        return leak_warning([fit.slope_mb_per_min for fit in growing.values()], available_mb)


FIX = (
    "Likely cause: copy-on-read of Python objects (lists/dicts of samples) in the workers; "
    "fix: keep samples in numpy arrays or tensors (see docs/attach.md)"
)


def leak_warning(slopes_mb_per_min: list[float], available_mb: float | None) -> str:
    """'4 workers grow 38 MB/min each; at this rate they exhaust the 22.0 GiB available in 1 h 10 min. Likely…'"""
    count = len(slopes_mb_per_min)
    total = sum(slopes_mb_per_min)
    each = total / count
    who = "1 worker grows" if count == 1 else f"{count} workers grow"
    rate = f"{each:.0f} MB/min" + ("" if count == 1 else " each")
    if available_mb is None or total <= 0:
        return f"{who} {rate}. {FIX}"
    gib = available_mb / 1024
    eta = duration_text(available_mb / total * 60.0)
    they = "it exhausts" if count == 1 else "they exhaust"
    return f"{who} {rate}; at this rate {they} the {gib:.1f} GiB available in {eta}. {FIX}"
