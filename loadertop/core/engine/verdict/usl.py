"""The Universal Scalability Law fitted to throughput against workers, and what it predicts.

    X(N) = λN / (1 + α(N−1) + βN(N−1))

λ is one worker's throughput, α contention (the share that does not parallelise: the main process, a shared
disk), β coherency (a cost per pair of workers: queue and lock traffic). With β > 0 throughput peaks at
N* = sqrt((1−α)/β) and falls after it. Only N ≥ 1 is fitted: 0 workers (loading in the training process) is
another regime, not one point of the worker curve. Pure numpy/scipy; no torch.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np

from loadertop.core.model.results import TrialResult, UslFit

MIN_POINTS = 3  # three parameters: fewer points would fit anything
GOOD_R2 = 0.9  # below this the fit is shown but not trusted to choose the next rung
PEAK_POINTS = 4  # a fit's peak stops the climb only when it rests on this many rungs: three fit any rise-and-fall
BETA_ZERO = 1e-7  # below this β is zero within what the data can tell apart
ALPHA_ZERO = 1e-3  # below this α is zero: the curve is still a straight line


def usl(n: np.ndarray | float, lam: float, alpha: float, beta: float) -> np.ndarray | float:
    return lam * n / (1.0 + alpha * (n - 1.0) + beta * n * (n - 1.0))


def fit_usl(workers: Sequence[int], samples_per_s: Sequence[float]) -> UslFit | None:
    """Least-squares fit (relative residuals, so the small-N points count as much as the large ones).

    None when there are fewer than three distinct worker counts ≥ 1 or the fit fails."""
    pairs = sorted((int(n), float(x)) for n, x in zip(workers, samples_per_s, strict=True) if n >= 1 and x > 0)
    if len({n for n, _ in pairs}) < MIN_POINTS:
        return None
    from scipy.optimize import curve_fit

    ns = np.array([n for n, _ in pairs], dtype=float)
    xs = np.array([x for _, x in pairs], dtype=float)
    lam0 = float(max(xs / ns))
    best: tuple[float, np.ndarray] | None = None
    # A few starting points: curve_fit is local, and flat curves (α near 1) sit far from steep ones.
    for alpha0, beta0 in ((0.05, 1e-4), (0.5, 1e-3), (0.9, 1e-5)):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                params, _ = curve_fit(
                    usl,
                    ns,
                    xs,
                    p0=(lam0, alpha0, beta0),
                    sigma=xs,  # relative error: a 5% miss at 1 worker weighs as much as a 5% miss at 32
                    bounds=([1e-9, 0.0, 0.0], [np.inf, 1.0, np.inf]),
                    maxfev=5000,
                )
        except (RuntimeError, ValueError, FloatingPointError):
            continue
        sse = float(np.sum(((usl(ns, *params) - xs) / xs) ** 2))
        if best is None or sse < best[0]:
            best = (sse, params)
    if best is None:
        return None
    lam, alpha, beta = (float(v) for v in best[1])
    predicted = usl(ns, lam, alpha, beta)
    ss_res = float(np.sum((xs - predicted) ** 2))
    ss_tot = float(np.sum((xs - xs.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    peak_n = peak_x = None
    if beta > BETA_ZERO and alpha < 1.0:
        peak_n = math.sqrt((1.0 - alpha) / beta)
        peak_x = float(usl(peak_n, lam, alpha, beta))
        if peak_n < 1.0 or not peak_x > 0.0:  # a peak below one worker, or a negative rate: no prediction at all
            peak_n = peak_x = None
    return UslFit(
        lam=lam,
        alpha=alpha,
        beta=beta,
        r2=r2,
        points=len(pairs),
        peak_workers=peak_n,
        peak_samples_per_s=peak_x,
        note=describe(lam, alpha, beta, peak_n, peak_x, r2),
    )


def describe(lam: float, alpha: float, beta: float, peak_n: float | None, peak_x: float | None, r2: float) -> str:
    """One line a person can read: the parameters, the predicted peak, and how far to trust it."""
    head = f"USL fit: λ={lam:.0f} samples/s per worker, α={alpha:.3f}, β={beta:.2g}"
    if peak_n is not None and peak_x is not None:
        body = f"predicted peak N*=sqrt((1−α)/β)={peak_n:.1f} workers at {peak_x:.0f} samples/s"
    elif alpha > ALPHA_ZERO:
        body = f"no predicted peak (β≈0): throughput levels off towards λ/α={lam / alpha:.0f} samples/s"
    else:
        body = "no predicted peak (α≈β≈0): throughput still linear in workers"
    trust = "" if r2 >= GOOD_R2 else f" (poor fit, R²={r2:.2f}: not used to choose rungs)"
    return f"{head}; {body}; R²={r2:.2f}{trust}"


def trusted(fit: UslFit | None) -> bool:
    return fit is not None and fit.r2 >= GOOD_R2


def past_peak(fit: UslFit | None, n: int) -> str | None:
    """Why the climb stops at `n` workers when a trusted fit that includes that rung puts the peak at or below it:
    every rung above is predicted slower, and trials past a peak are the dearest (start-up grows with workers).
    None otherwise."""
    # n + 0.5: the climb measures the fit's peak at round(N*), which may fall just short of it
    if fit is None or not trusted(fit) or fit.points < PEAK_POINTS or (fit.peak_workers or math.inf) > n + 0.5:
        return None
    return (
        f"a trusted USL fit (R²={fit.r2:.2f}, {fit.points} rungs) puts the peak at N*={fit.peak_workers:.1f}, "
        f"at or below {n} workers: every rung above is predicted slower"
    )


def workers_to_reach(fit: UslFit, target: float, limit: int) -> int | None:
    """The fewest workers (1..limit) at which the fitted curve reaches `target` samples/s; None if it never does."""
    for n in range(1, limit + 1):
        if fit.predict(n) >= target:
            return n
    return None


def fit_curve(curve: Sequence[TrialResult]) -> UslFit | None:
    """The fit over a worker curve (one finished trial per worker count, as `analysis.worker_curve` gives)."""
    points = [t for t in curve if t.config.num_workers >= 1 and t.samples_per_s]
    return fit_usl([t.config.num_workers for t in points], [float(t.samples_per_s or 0.0) for t in points])
