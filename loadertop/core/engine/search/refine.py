"""The adaptive search's second phase: refine the climb's answer by bisection.

First between the cheapest rung within noise of the best and the rung below it (the answer, "cheapest within the
noise band of the best", lies between them); then between the best rung and the rung above it when that one was
slower beyond the noise (2 → 4 skips 3), unless the trusted fit puts the peak at the best rung."""

from __future__ import annotations

from collections.abc import Iterator

from loadertop.core.engine.search.state import SearchState
from loadertop.core.engine.verdict.band import choose, noise_band, within_band
from loadertop.core.engine.verdict.usl import past_peak, trusted, workers_to_reach
from loadertop.core.engine.wording import sps, workers
from loadertop.core.model.config import TrialConfig

# Bisection stops when the gap below the choice is at most this share of it (16 vs 20 workers: close enough).
REFINE_PRECISION = 0.25
MAX_REFINE = 4


def edges(threshold: float, tol: float) -> tuple[float, float]:
    """A trial's decision edges (TrialRequest.decide_below/above) around the throughput that decides it: a
    tolerance either side, as the climb's rungs have them (AdaptivePlanner._rung_decision)."""
    return threshold * (1.0 - tol), threshold * (1.0 + tol)


class SearchOver(Exception):
    """The search has nothing more worth measuring."""


def refine(st: SearchState) -> Iterator[TrialConfig]:
    for _ in range(MAX_REFINE):
        curve = st.curve()
        chosen = choose(curve, st.tol)
        if chosen is None:
            raise SearchOver
        best, c = chosen
        n_c = c.config.num_workers
        lower = [r.config.num_workers for r in curve if r.config.num_workers < n_c]
        if not lower:
            break
        p = max(lower)
        between = [m for m in st.counts if p < m < n_c and not st.measured(st.at(m))]
        if not between:
            break
        if n_c - p <= max(1, REFINE_PRECISION * n_c):
            st.note("refine", f"{workers(p)} and {workers(n_c)} are close enough: no further bisection")
            break
        m, why = _midpoint(st, p, n_c, between, sps(best))
        st.note(
            "refine",
            f"{workers(n_c)} is the fewest within noise of the best ({sps(best):.0f} samples/s at "
            f"{workers(best.config.num_workers)}), {workers(p)} is not: {why} {workers(m)}",
            st.at(m).label(),
        )
        # its trial may stop once clearly inside or outside the band of the best (as a climb's rung may)
        st.decision = edges(sps(best) * (1.0 - noise_band(st.tol, best)), st.tol)
        yield st.at(m)
    yield from _refine_above(st)


def _midpoint(st: SearchState, p: int, c: int, between: list[int], best: float) -> tuple[int, str]:
    """Plain bisection. The USL's guess of where the band begins is shown beside it, not used: on curves with a
    hard wall (the training process saturating) the smooth model overshoots, and a guess clamped into the
    interval shrinks it more slowly than halving does."""
    why = "bisect at"
    fit = st.fit()
    if fit is not None and trusted(fit):
        reach = workers_to_reach(fit, best * (1.0 - st.tol), c)
        if reach is not None:
            why = f"(USL guesses {workers(reach)}) bisect at"
    target = (p + c) / 2
    return min(between, key=lambda m: (abs(m - target), m)), why


def _refine_above(st: SearchState) -> Iterator[TrialConfig]:
    """Between the best rung and the first rung above it, when that one was slower beyond the noise: a curve
    that rose and then fell peaks somewhere between them (2 → 4 workers skips 3). Bisect toward the best, at
    the USL's predicted peak when it trusts one there."""
    for _ in range(MAX_REFINE):
        curve = st.curve()
        chosen = choose(curve, st.tol)
        if chosen is None:
            return
        best = chosen[0]
        b = best.config.num_workers
        above = [r for r in curve if r.config.num_workers > b]
        if not above:
            return
        h = min(above, key=lambda r: r.config.num_workers)
        n_h = h.config.num_workers
        between = [m for m in st.counts if b < m < n_h and not st.measured(st.at(m))]
        if not between or n_h - b <= REFINE_PRECISION * b:
            return
        if within_band(h, best, st.tol):
            return  # flat above the best: nothing between them can beat it by more than the noise
        fit = st.fit()
        if past := past_peak(fit, b):
            st.note("refine", f"no bisection above {workers(b)}, the best rung: {past}")
            return
        target, why = (b + n_h) / 2, "bisect at"
        if fit is not None and trusted(fit) and fit.peak_workers is not None and b < fit.peak_workers < n_h:
            target, why = fit.peak_workers, f"the USL puts the peak at N*={fit.peak_workers:.1f}: try"
        m = min(between, key=lambda v: (abs(v - target), v))
        st.note(
            "refine",
            f"{workers(b)} is the best rung ({sps(best):.0f} samples/s) and {workers(n_h)} was slower "
            f"({sps(h):.0f}): the peak may lie between them; {why} {workers(m)}",
            st.at(m).label(),
        )
        st.decision = edges(sps(best) * (1.0 + noise_band(st.tol, best)), st.tol)  # a win beyond the band?
        yield st.at(m)
