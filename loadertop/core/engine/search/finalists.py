"""The adaptive search's last phase: the finalists compared head to head until the decision holds under noise.

The choice (the cheapest configuration within the noise band of the fastest) and its closest rival are measured
again, alternately (A B A B ...: a slow drift of the machine then weighs on both alike), and after each pair a
sequential test asks on which side of the band's edge the difference between their means lies: beyond it by `Z`
standard errors (a significant difference: the cheaper one is slower than the band allows), or inside it by as
much (smaller than the band: within noise of each other). Either answer, or the repeat cap, ends the duel; at the
cap the means decide, and the trace calls it a close call. The noise is one run's: its own spread, or the
run-to-run disagreement between repeats where that is larger (band.Noise), so every repeat also sharpens the
noise estimate, and the band of two means narrows as their runs add up. If the answer moves the choice, the new
choice meets its own rival, up to MAX_DUELS duels. A cheaper contender fewer than DUEL_PRECISION of the choice's
workers away is not worth a duel (30 vs 32 workers: repeats would cost more than the 2 workers save).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence

from loadertop.core.engine.verdict.band import SURE, Noise, Z, choose_merged, finished, merge_repeats
from loadertop.core.engine.wording import pct, sps
from loadertop.core.model.config import TrialConfig
from loadertop.core.model.figures import at_least_within
from loadertop.core.model.results import TrialResult

RIVAL_BANDS = 2.0  # a configuration within twice the noise band of the best could swap places on a second run
DUEL_PRECISION = 0.2  # ... unless its worker count is this close to the choice's (30 vs 32 workers: no duel)
MAX_RUNS = 6  # runs of one finalist (its first included): the repeat cap of a duel
MAX_DUELS = 3
FUTILE_AFTER = 2  # rounds of a duel before it may stop as unable to settle by its cap (_futile)
MAX_REPEATS = 16  # trials the whole phase may add ...
REPEAT_SHARE, MIN_REPEATS = 4, 4  # ... and on a short range one per 4 worker counts (at least 4): its grid is cheap

Note = Callable[[str, str, "str | None"], None]


def duels(
    done: Callable[[], Sequence[TrialResult]], tolerance: float, note: Note, budget: int = MAX_REPEATS
) -> Iterator[TrialConfig]:
    """The finalists' repeats, one trial per `yield`, at most `budget` of them; `done()` holds its result when the
    generator resumes."""
    fought: set[frozenset[TrialConfig]] = set()
    spent = 0
    no_duel = _finalists(done(), tolerance, fought, lambda *_: None) is None  # a duel would measure the noise
    if budget > 0 and no_duel and (probe := _noise_probe(done(), tolerance)) is not None:
        note("repeat", _probe_text(probe), probe.config.label())
        yield probe.config
        spent += 1
    for _ in range(MAX_DUELS):
        pair = _finalists(done(), tolerance, fought, note)
        if pair is None:
            return
        a, b = pair
        fought.add(frozenset((a.config, b.config)))
        verdict, rounds, futile = None, 0, False
        while verdict is None and spent < budget:
            noise = Noise.of(done(), tolerance)
            eligible = [t for t in _pair_order(a, b, noise) if noise.count(t) < MAX_RUNS]
            turn = eligible[: budget - spent]
            if not turn:
                break
            for t in turn:
                note("repeat", _repeat_text(t, noise, alone=len(eligible) == 1), t.config.label())
                yield t.config
                spent += 1
            rounds += 1
            a, b = _latest(done(), a.config), _latest(done(), b.config)
            verdict = _verdict(a, b, Noise.of(done(), tolerance))
            futile = verdict is None and rounds >= FUTILE_AFTER and _futile(a, b, Noise.of(done(), tolerance))
            if futile:
                break
        if rounds:
            note("repeat", verdict or _undecided(a, b, Noise.of(done(), tolerance), futile), None)


def _futile(a: TrialResult, b: TrialResult, noise: Noise) -> bool:
    """Whether the duel cannot settle by its cap unless the means move: their difference lies closer to the band's
    edge than Z standard errors would be with MAX_RUNS runs of each. Repeats spent then buy nothing but time."""
    if not sps(b):
        return False
    edge = abs(sps(a) / sps(b) - 1.0 + noise.band(a, b))
    at_cap = math.sqrt(noise.level(a) ** 2 / MAX_RUNS + noise.level(b) ** 2 / MAX_RUNS)
    return edge < Z * at_cap


def _noise_probe(done: Sequence[TrialResult], tolerance: float) -> TrialResult | None:
    """The choice, when no configuration has run twice yet: how far two fresh runs of one configuration differ is
    the noise every comparison of the conclusion needs, and one run's blocks understate it (they agree within 1-5%
    where fresh runs differ by 10% on a busy 2-CPU machine). None when some repeat has measured it already."""
    if Noise.of(done, tolerance).measured():
        return None
    chosen = choose_merged(merge_repeats(finished(done)), tolerance) if finished(done) else None
    return chosen[1] if chosen is not None else None


def _probe_text(t: TrialResult) -> str:
    return (
        f"{t.config.label()} ({sps(t):.0f} samples/s) measured again in a fresh pool: nothing has run twice yet, and "
        "how far two runs of one configuration differ is the noise every comparison needs"
    )


def _finalists(
    done: Sequence[TrialResult], tolerance: float, fought: set[frozenset[TrialConfig]], note: Note
) -> tuple[TrialResult, TrialResult] | None:
    """(the cheaper, the dearer) of the choice and its rival: the best when the choice is another configuration;
    else the closest contender within RIVAL_BANDS of the band, a cheaper one first. None when the choice is clear
    or the pair has had its duel."""
    ok = merge_repeats(finished(done))
    if not ok:
        return None
    noise = Noise.of(done, tolerance)
    best, c = choose_merged(ok, tolerance, noise)
    rival: TrialResult | None = best if best.config != c.config else None
    near: list[TrialResult] = []  # cheaper contenders a few workers from the choice: not worth a duel
    if rival is None:
        others = [
            t
            for t in ok
            if t.config != c.config and at_least_within(sps(t), sps(best), RIVAL_BANDS * noise.band(t, best))
        ]
        # A cheaper contender a few workers from the choice would save too little to be worth repeats. (A choice
        # that is itself the cheaper one still meets the best: whether it is surely within the band is its accuracy.)
        near = [t for t in others if _near(c, t) and t.config.num_workers < c.config.num_workers]
        others = [t for t in others if t not in near]
        cheaper = [t for t in others if t.config.num_workers < c.config.num_workers]
        rival = max(cheaper or others, key=sps) if others else None
    if rival is None:
        if not fought:
            note("repeat", _clear(c, near), None)
        return None
    if frozenset((c.config, rival.config)) in fought:
        return None
    a, b = sorted((c, rival), key=lambda t: (t.config.num_workers, -sps(t)))
    return a, b


def _near(c: TrialResult, t: TrialResult) -> bool:
    """Whether `t` is a few workers from the choice `c`: fewer than DUEL_PRECISION of the larger count apart (and
    not the same count: then another knob is at stake). The climb and the refine do not resolve worker counts that
    finely (refine.REFINE_PRECISION), and repeats spent to save a worker or two cost more than they save."""
    n, m = c.config.num_workers, t.config.num_workers
    return n != m and abs(n - m) < DUEL_PRECISION * max(n, m)


def _clear(c: TrialResult, near: list[TrialResult]) -> str:
    if not near:
        band = f"{RIVAL_BANDS:g}× the noise band"
        return f"{c.config.label()} is a clear choice: nothing else within {band}, no duel needed"
    close = ", ".join(t.config.label() for t in sorted(near, key=lambda t: t.config.num_workers))
    return (
        f"{c.config.label()} is the choice; {close} within {RIVAL_BANDS:g}× the noise band but fewer than "
        f"{pct(DUEL_PRECISION)} of the workers apart: no repeat is worth it"
    )


def _pair_order(a: TrialResult, b: TrialResult, noise: Noise) -> tuple[TrialResult, ...]:
    """The next pair, alternating: the one with fewer runs first (the cheaper on a tie)."""
    return (a, b) if noise.count(a) <= noise.count(b) else (b, a)


def _latest(done: Sequence[TrialResult], config: TrialConfig) -> TrialResult:
    """The configuration's merged point (its runs' mean)."""
    return next(t for t in merge_repeats(finished(done)) if t.config == config)


def _verdict(a: TrialResult, b: TrialResult, noise: Noise) -> str | None:
    """What the sequential test concludes about the cheaper `a` against `b`, or None to go on."""
    if not sps(b):
        return None
    diff = sps(a) / sps(b) - 1.0
    se = noise.stderr(a, b)
    band = noise.band(a, b)
    head = _head(a, b, diff, se, noise)
    if diff + band <= -Z * se:
        return f"{head}: the difference is significant, beyond the {pct(band)} band"
    if diff + band >= Z * se:
        return f"{head}: {_cheaper_holds(a, diff, se, band)}"
    return None


def _cheaper_holds(a: TrialResult, diff: float, se: float, band: float) -> str:
    """Why the cheaper `a` holds: a loss within the band, or no loss at all (a lead is not "smaller than the band")."""
    if diff >= Z * se:
        return f"the cheaper {a.config.label()} is faster beyond the noise"
    if diff >= 0:
        return f"the cheaper {a.config.label()} is not slower (its lead is within the noise): it holds"
    return f"the loss is smaller than the {pct(band)} band: within noise of each other"


def _undecided(a: TrialResult, b: TrialResult, noise: Noise, futile: bool = False) -> str:
    diff = sps(a) / sps(b) - 1.0 if sps(b) else 0.0
    band, se = noise.band(a, b), noise.stderr(a, b)
    head = _head(a, b, diff, se, noise)
    # The choice takes the cheaper one only when it is surely within the band (band.choose): say which way that goes
    if noise.surely_within(a, b):
        side = f"within the {pct(band)} band by more than {SURE:g} standard error: the cheaper one holds"
    elif diff >= -band:
        side = (
            f"inside the {pct(band)} band, but not by {SURE:g} standard error, {pct(SURE * se)}: the cheaper one "
            "is not surely within it"
        )
    else:
        side = f"outside the {pct(band)} band"
    if futile:
        cap = f"{MAX_RUNS} runs of each would not settle it at this noise"
        return f"{head}: undecided, and {cap}; the means decide: {side}"
    return f"{head}: undecided at the repeat cap, a close call; the means decide: {side}"


def _head(a: TrialResult, b: TrialResult, diff: float, se: float, noise: Noise) -> str:
    runs = f"{noise.count(a)} and {noise.count(b)} runs"
    between = "" if noise.between is None else f", run-to-run noise {pct(noise.between)}"
    return (
        f"head to head, {a.config.label()} vs {b.config.label()} over {runs}: {sps(a):.0f} vs {sps(b):.0f} "
        f"samples/s, {pct(diff, signed=True)} ± {pct(Z * se)}{between}"
    )


def _repeat_text(t: TrialResult, noise: Noise, alone: bool) -> str:
    runs = noise.count(t)
    how = f"(its rival has had its {MAX_RUNS} runs)" if alone else "alternating with its rival"
    return (
        f"finalist {t.config.label()} ({sps(t):.0f} samples/s ±{pct(t.spread or 0.0)}, {runs} run"
        f"{'' if runs == 1 else 's'}) measured again, {how}"
    )
