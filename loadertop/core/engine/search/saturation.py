"""A rung past the cores on saturated CPUs: its gain must hold over repeats before the climb goes on.

When the workers already use the usable CPUs (a trial's measured CPU near their count), more workers cannot add
CPU: a gain past the cores read on one run is most often noise (a busy neighbour, a lucky run), and a climb that
believes it runs on to 16 workers on 2 CPUs, at 8× the memory. So the rung and the best rung below it are measured
again, alternately (a slow drift weighs on both alike), and a sequential test asks whether the gain of their means
lies beyond the noise band by `Z` standard errors (a significant win: the climb goes on), or short of it by as much
(no win: it stops). At CONFIRM_RUNS runs each, still undecided, the climb stops: more workers are not run, and
which of the two to use is the conclusion's, from the means of every run.
The repeats stay in the sweep: the conclusion merges them (band.merge_repeats), so the pick comes from the means."""

from __future__ import annotations

import math
from collections.abc import Generator

from loadertop.core.engine.search.state import SearchState
from loadertop.core.engine.verdict.band import BAND_CAP, Noise, Z, finished, merge_repeats
from loadertop.core.engine.verdict.bound import CPU_SATURATED
from loadertop.core.engine.verdict.stops import FAULT, SATURATED, Stop
from loadertop.core.engine.wording import pct, sps, workers
from loadertop.core.model.config import TrialConfig
from loadertop.core.model.results import TrialResult

CONFIRM_RUNS = 3  # runs of each of the two rungs (the first included) before the climb stops undecided


def saturated(cpus: int, *trials: TrialResult) -> bool:
    """Whether the usable CPUs were kept busy (CPU_SATURATED of them) during any of the trials: by the trial's
    processes, or by every process (others holding the CPUs make a one-run gain past the cores no likelier true)."""
    limit = CPU_SATURATED * 100.0 * cpus
    return any(max(t.cpu_percent or 0.0, t.machine_cpu_percent or 0.0) >= limit for t in trials)


def confirm(st: SearchState, prev: TrialResult, rung: TrialResult) -> Generator[TrialConfig, None, Stop | None]:
    """Measure `prev` and `rung` again, alternately, until the gain is significant (None: climb on) or is not
    (the Stop), at most CONFIRM_RUNS runs each; each `yield` is a trial."""
    a_cfg, b_cfg = prev.config, rung.config
    n, p = b_cfg.num_workers, a_cfg.num_workers
    cpu = max(max(t.cpu_percent or 0.0, t.machine_cpu_percent or 0.0) for t in (prev, rung)) / 100.0
    # Not even a gain far beyond one run's own spread is taken on one run: a run past the cores reads high on a busy
    # machine with a steady spread (its blocks agree with each other, which says nothing of the next run)
    gain, band = 0.0, st.tol
    st.note(
        "climb",
        f"{workers(n)}: {sps(rung):.0f} samples/s, {pct(sps(rung) / sps(prev) - 1.0, signed=True)} over {workers(p)} "
        f"on one run, with the CPUs saturated ({cpu:.1f} of {st.cpus} busy): past the cores a gain must hold over "
        f"repeats; {workers(p)} and {workers(n)} measured again, alternately",
        b_cfg.label(),
    )
    head = ""
    for runs in range(2, CONFIRM_RUNS + 1):
        yield from (a_cfg, b_cfg)
        pair = [t for t in finished(st.done) if t.config in (a_cfg, b_cfg)]
        merged = {t.config: t for t in merge_repeats(pair)}
        if b_cfg not in merged or a_cfg not in merged:
            return Stop(f"stopped climbing: a repeat of {workers(n)} or {workers(p)} failed", FAULT, n)
        a, b = merged[a_cfg], merged[b_cfg]
        gain, se, band = _significance(pair, a, b, st.tol)
        head = (
            f"{workers(n)} vs {workers(p)} over {runs} runs each: {sps(b):.0f} vs {sps(a):.0f} samples/s, "
            f"{pct(gain, signed=True)} ± {pct(Z * se)}"
        )
        if gain - band >= Z * se:
            st.note("climb", f"{head}: a significant win beyond the {pct(band)} band; climbing on", None)
            return None
        if band - gain >= Z * se:
            break
    return Stop(
        f"stopped climbing: {head}: no significant win beyond the {pct(band)} band on saturated CPUs: more workers "
        "are not run (which of these two to use is the means' to say, with every other run)",
        SATURATED,
        n,
        gain,
    )


def _significance(pair: list[TrialResult], a: TrialResult, b: TrialResult, tol: float) -> tuple[float, float, float]:
    """(gain of b's mean over a's, its standard error, the band). The noise is the runs' disagreement with each other
    (what repeats are for; at least the tolerance), not a run's own block-to-block spread: a run's mean over many
    blocks is far steadier than one block, and a ±60% block spread would hide any gain."""
    noise = Noise.of(pair, tol)
    level = max(noise.between or 0.0, tol) if noise.dof >= 2 else noise.level(a, b)
    se = level * math.sqrt(1.0 / noise.count(a) + 1.0 / noise.count(b))
    band = min(max(tol, se / math.sqrt(2.0)), BAND_CAP * tol)
    return sps(b) / sps(a) - 1.0, se, band
