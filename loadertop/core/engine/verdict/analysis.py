"""From measured trials to the recommendation: the cheapest configuration within the noise band of the fastest, the
knee of its worker curve, a reason grounded in the numbers, and a ready-to-paste snippet.

Pure analysis over `TrialResult`s: no torch, no UI. samples/s is the comparable unit across batch sizes. The rule
lives in band.py, the knee in knee.py, each trial's reason in reasons.py, what bounds a trial in bound.py."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypedDict

from loadertop.core.engine.verdict.band import (
    Noise,
    Z,
    choose_merged,
    equivalent,
    finished,
    inconclusive,
    merge_repeats,
)
from loadertop.core.engine.verdict.bound import (
    CONSUMER_BOUND,
    CPU_BOUND,
    IO_BOUND,
    MAIN_BOUND,
    bound_of,
    in_process,
)
from loadertop.core.engine.verdict.epoch import REPAY, restart_phrase, restarts, worth_persisting
from loadertop.core.engine.verdict.knee import curve_of, drop_after_peak, knee
from loadertop.core.engine.verdict.methods import gil_enabled, method_phrase
from loadertop.core.engine.verdict.reasons import bound_phrase, epoch_bound, has_cuda, oversubscribed
from loadertop.core.engine.verdict.snippet import snippet
from loadertop.core.engine.verdict.stops import SWEEP_TERMS, Terms, stop_clause
from loadertop.core.engine.verdict.transport_bound import transport_reason
from loadertop.core.engine.wording import NONE, pct, sps, workers
from loadertop.core.model.config import Settings
from loadertop.core.model.curves import curve_key, on_curve
from loadertop.core.model.figures import at_least_within
from loadertop.core.model.results import Ceiling, Knee, MachineInfo, Recommendation, SearchStep, TrialResult, UslFit

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack is 3.11+

Name = Callable[[TrialResult], str]  # how a reason names another trial: "4 workers" on the same curve, else its label


def analyze(
    trials: Sequence[TrialResult],
    settings: Settings,
    machine: MachineInfo,
    ceilings: Sequence[Ceiling] = (),
    stop: SearchStep | None = None,  # how the search's climb stopped (verdict/stops.py last_stop); None for a grid
    terms: Terms = SWEEP_TERMS,  # how the reason names the range and the budget (tune has its own)
) -> tuple[Knee | None, Recommendation | None]:
    """The knee of the recommended configuration's worker curve, and the cheapest configuration within noise of
    the fastest. (None, None) when no trial finished with a throughput. Repeats of a configuration count once."""
    ok = merge_repeats(finished(trials))
    if not ok:
        return None, None
    tol = settings.tolerance
    noise = Noise.of(trials, tol)  # repeats narrow their comparisons' band; their disagreement can widen it
    best, rec = choose_merged(ok, tol, noise)
    rec, preferred = _prefer_steadier(rec, best, ok, settings, noise)
    rec, unpinned = _prefer_unpinned(rec, best, ok, noise, machine)
    rec, unordered = _prefer_ordered(rec, ok, noise)
    curve = curve_of(ok, rec)
    top = max(settings.workers, default=None)
    # An epoch-bound row leads with its restarts (reasons.trial_reason), so its Why does too.
    transport = "" if epoch_bound(rec) else transport_reason(rec, ok, ceilings, tol)
    reason = transport or _recommendation_reason(rec, best, ok, curve, noise, machine, (stop, top), terms)
    if doubt := inconclusive(noise, rec, best, tol):
        reason = f"{doubt}; {reason}"
    same, close = equivalence(rec, best, curve, noise)
    # Only with a training step (--step-ms, --consumer): its threads compete with the workers'.
    over = oversubscribed(rec, machine, bool(settings.consumer), ok, tol)  # --step-ms leaves the CPU threads idle
    method = method_phrase(rec, ok, machine.usable_cpus, gil_enabled(), tol)  # thread vs process workers, as measured
    kept = _kept_note(rec, ok, tol)
    notes = [n for n in (same, close, preferred, unordered, unpinned, kept, over, method) if n]
    runs = [t for t in trials if t.config == rec.config and t.status == "ok" and t.samples_per_s is not None]
    if len(runs) > 1:
        notes.append(f"mean of {len(runs)} runs ({', '.join(f'{sps(t):.0f}' for t in runs)} samples/s)")
    pasted = rec.config if has_cuda(machine) else dataclasses.replace(rec.config, pin_memory=False)
    recommendation = Recommendation(
        config=rec.config,
        samples_per_s=sps(rec),
        reason="; ".join([reason, *notes]),
        snippet=snippet(pasted, machine.default_start_method),
        trial_index=rec.index,
        equivalent=tuple(t.config for t in equivalent(curve, best, noise)),
        close=bool(close),
    )
    return knee(curve, tol, noise), recommendation


# A configuration's data wait is steadier when its p99 is at most 1/P99_RATIO of another's and P99_GAP_MS shorter.
P99_RATIO = 2.0
P99_GAP_MS = 1.0


def _prefer_steadier(
    rec: TrialResult, best: TrialResult, ok: list[TrialResult], settings: Settings, noise: Noise
) -> tuple[TrialResult, str]:
    """With a real training step (--step-ms or --consumer), a configuration within the noise band of the best
    whose data-wait p99 is far shorter than the recommendation's is the better one: a GPU step waits on every
    slow batch, however good the mean. Returns the choice and the clause that says so (empty when unchanged)."""
    if not (settings.step_ms > 0 or settings.consumer) or rec.wait_ms_p99 is None:
        return rec, ""
    steadier = [t for t in ok if noise.within(t, best) and t.wait_ms_p99 is not None and steadier_tail(t, rec)]
    if not steadier:
        return rec, ""
    pick = min(steadier, key=lambda t: (t.wait_ms_p99 or 0.0, t.config.num_workers, -sps(t)))
    return pick, (
        f"chosen over {rec.config.label()} for its data wait: p99 {pick.wait_ms_p99:.1f} ms vs "
        f"{rec.wait_ms_p99:.1f} ms at the same speed within noise (the training step waits on every slow batch)"
    )


def steadier_tail(a: TrialResult, b: TrialResult) -> bool:
    """Whether `a`'s data-wait p99 is far shorter than `b`'s (P99_RATIO times and P99_GAP_MS)."""
    if a.wait_ms_p99 is None or b.wait_ms_p99 is None:
        return False
    return a.wait_ms_p99 * P99_RATIO <= b.wait_ms_p99 and b.wait_ms_p99 - a.wait_ms_p99 >= P99_GAP_MS


def _prefer_unpinned(
    rec: TrialResult, best: TrialResult, ok: list[TrialResult], noise: Noise, machine: MachineInfo
) -> tuple[TrialResult, str]:
    """Without CUDA pin_memory does nothing, so a pinned configuration's lead is noise: its unpinned twin is
    taken when measured within the band, and the snippet leaves pinning off either way."""
    if has_cuda(machine) or not rec.config.pin_memory:
        return rec, ""
    twin = _twin(rec, ok, pin_memory=False)
    if twin is not None and noise.within(twin, best):
        rec = twin
    return rec, "pin_memory left off: pinning not measured (no CUDA)"


def _prefer_ordered(rec: TrialResult, ok: list[TrialResult], noise: Noise) -> tuple[TrialResult, str]:
    """in_order=False changes what training sees (batches out of order), so it is kept only when it beats the same
    configuration in order beyond their noise band: its in-order twin, when measured within that band, is taken.
    Returns the choice and, when in_order=False is kept over a measured twin, the clause that says by how much."""
    twin = _twin(rec, ok, in_order=True) if not rec.config.in_order else None
    if twin is None or not sps(twin):
        return rec, ""
    if noise.within(twin, rec):
        return twin, ""
    tails = ""
    if rec.wait_ms_p99 is not None and twin.wait_ms_p99 is not None:
        tails = f", data-wait p99 {rec.wait_ms_p99:.1f} vs {twin.wait_ms_p99:.1f} ms"
    return rec, (
        f"in_order=False: {pct(sps(rec) / sps(twin) - 1.0, signed=True)} over in order ({sps(rec):.0f} vs "
        f"{sps(twin):.0f} samples/s{tails}): a slow sample no longer holds up the batches behind it"
    )


class _Knob(TypedDict, total=False):
    """The knobs a twin may differ in (typed, so replace() is checked against TrialConfig's fields)."""

    pin_memory: bool
    in_order: bool


def _twin(rec: TrialResult, ok: list[TrialResult], **knob: Unpack[_Knob]) -> TrialResult | None:
    """The measured configuration that differs from `rec` only in `knob`."""
    config = dataclasses.replace(rec.config, **knob)
    return next((t for t in ok if t.config == config), None)


def rule_notes(knee: Knee | None, usl: UslFit | None, tolerance: float) -> list[str]:
    """Lines for the event stream: what each knee rule says and which one chose, and the USL fit."""
    notes = []
    if knee is not None and knee.num_workers is None:
        notes.append(f"knee: none marked ({knee.rule}): {knee.reason}")
    elif knee is not None:
        kneedle = workers(knee.kneedle) if knee.kneedle is not None else "no knee"
        band = workers(knee.noise_band) if knee.noise_band is not None else NONE
        notes.append(
            f"knee: Kneedle says {kneedle}, the noise band rule says {band}; the knee marked is the {knee.rule} "
            f"rule's; the recommendation always uses the band rule (fewest workers within {pct(tolerance)} or the "
            "spread of the best)"
        )
    if usl is not None:
        notes.append(usl.note)
    return notes


# -- the equivalence set ---------------------------------------------------------------------------------------

CLOSE = 1.5  # a comparison within this factor of the band's edge (either side) makes the call a close one


def equivalence(rec: TrialResult, best: TrialResult, curve: list[TrialResult], noise: Noise) -> tuple[str, str]:
    """The clauses that say which worker counts on the recommendation's curve are in the equivalence set (not surely
    more than the band behind the best, band.equivalent), and
    whether the call is close: the recommendation near the band's edge (behind the best by more than the band
    ÷ CLOSE), or a cheaper count just outside it (within CLOSE bands). Empty strings when there is nothing to say."""
    counts = [t.config.num_workers for t in equivalent(curve, best, noise)]
    clause = ""
    if len(counts) > 1 and rec.config.num_workers in counts:
        where = "the best" if any(t is best for t in curve) else f"the best ({best.config.label()})"
        n = rec.config.num_workers
        cheapest = (
            f"{n} is the cheapest"
            if n == counts[0]
            else (
                f"{n} is the cheapest surely within the band (fewer may be behind by more: their runs say too little)"
            )
        )  # band.Noise.surely_within: the doubt goes to the faster
        clause = (
            f"{_count_list(counts, curve)} are not surely more than the {pct(noise.band(rec, best))} band behind "
            f"{where} ({sps(best):.0f} samples/s): {cheapest}"
        )
    return clause, _close_call(rec, best, curve, noise)


def _close_call(rec: TrialResult, best: TrialResult, curve: list[TrialResult], noise: Noise) -> str:
    if not sps(best):
        return ""
    lag, band = 1.0 - sps(rec) / sps(best), noise.band(rec, best)
    if rec is not best and lag > band / CLOSE:
        return f"a close call: {pct(lag)} behind the best, near the edge of the {pct(band)} noise band"
    cheaper = [t for t in curve if t.config.num_workers < rec.config.num_workers]
    for t in sorted(cheaper, key=lambda t: -t.config.num_workers):
        lag, band = 1.0 - sps(t) / sps(best), noise.band(t, best)
        if band < lag <= CLOSE * band:
            n = t.config.num_workers
            verb = "is" if n == 1 else "are"
            sure = "" if noise.surely_outside(t, best) else " (not surely: within the noise of their runs)"
            return f"a close call: {workers(n)} {verb} {pct(lag)} behind, just outside the {pct(band)} noise band{sure}"
    return ""


def _count_list(counts: list[int], curve: list[TrialResult]) -> str:
    """'2, 4 and 8 workers'; '16–64 workers (all 5 measured)' for a longer run of every count measured between
    its ends."""
    between = [t.config.num_workers for t in curve if counts[0] <= t.config.num_workers <= counts[-1]]
    if len(counts) > 4 and between == counts:
        return f"{counts[0]}–{counts[-1]} workers (all {len(counts)} measured)"
    if len(counts) > 2:
        return ", ".join(map(str, counts[:-1])) + f" and {counts[-1]} workers"
    return " and ".join(map(str, counts)) + " workers"


# -- the recommendation's reason --------------------------------------------------------------------------------


def _recommendation_reason(
    rec: TrialResult,
    best: TrialResult,
    ok: list[TrialResult],
    curve: list[TrialResult],
    noise: Noise,
    machine: MachineInfo,
    end: tuple[SearchStep | None, int | None] = (None, None),
    terms: Terms = SWEEP_TERMS,
) -> str:
    """Why `rec`: what bounds it, then what costs more than it and does not pay for it (the tail). `end`: how the
    search stopped and the top of the --workers range."""
    band = noise.band(rec, best)
    on_curve = {id(t) for t in curve}

    def who(t: TrialResult) -> str:
        return workers(t.config.num_workers) if id(t) in on_curve else t.config.label()

    tail = _tail(rec, best, curve, noise, who)
    nw = rec.config.num_workers
    if nw == 0:
        return _zero_workers_reason(rec, ok, noise, tail, who, terms)
    if nw == max(t.config.num_workers for t in curve) and len(curve) > 1 and rec is best:
        fewer_within = any(t.config.num_workers < nw and noise.within(t, rec) for t in curve)
        twins = _on_twins(rec, ok, noise.tolerance)
        return _still_rising_reason(rec, band, machine, fewer_within, *end, terms=terms, twins=twins)
    epoch = epoch_bound(rec)  # what bounds its row in the table comes first there, so here too
    repay = f"; {REPAY}" if epoch and restarts(rec) else ""
    return f"{epoch}{repay}; {tail}" if epoch else _bound_reason(rec, curve, tail, machine)


def _tail(rec: TrialResult, best: TrialResult, curve: list[TrialResult], noise: Noise, who: Name) -> str:
    """What costs more than the recommendation and does not pay for it: the best (when it is another
    configuration) or the largest worker count on its curve; and the drop after the curve's peak, when surely one."""
    band = noise.band(rec, best)
    comparator: TrialResult | None = None
    if best is not rec:
        comparator = best
    else:
        larger = [t for t in curve if t.config.num_workers > rec.config.num_workers]
        if larger:
            comparator = max(larger, key=lambda t: t.config.num_workers)
    clauses: list[str] = []
    if comparator is not None:
        clauses.append(_comparison(comparator, rec, noise, who(comparator)))
    drop = drop_after_peak(curve, noise.tolerance, noise)
    if drop is not None and drop[0] is not comparator:
        clauses.append(f"slower again at {who(drop[0])} ({pct(drop[1], signed=True)})")
    return "; ".join(clauses) if clauses else f"no other configuration measured within {pct(band)}"


def _zero_workers_reason(
    rec: TrialResult, ok: list[TrialResult], noise: Noise, tail: str, who: Name, terms: Terms
) -> str:
    band = noise.band(rec, rec)
    with_workers = [t for t in ok if t.config.num_workers > 0]
    if not with_workers:
        share = rec.fraction_of_ceiling
        if share is not None and share >= 1.0 - band:  # None when the ceiling read low (reasons.ceiling_share)
            return (
                f"consumer-bound: 0 workers already deliver {pct(share)} of the {sps(rec) / share:.0f} "
                "samples/s the training step can take (its ceiling): workers cannot make it faster"
            )
        return f"only 0 workers measured ({sps(rec):.0f} samples/s); try {terms.some_range}"
    top = max(with_workers, key=sps)
    if sps(rec) >= sps(top):
        versus = (
            f"best with workers: {who(top)} at {sps(top):.0f} vs {sps(rec):.0f} samples/s, "
            f"{pct(sps(top) / sps(rec) - 1.0, signed=True)}"
        )
        restart = _restart_cost(with_workers, noise.tolerance, who)
        if noise.surely_slower(top, rec):
            cost = f": {restart}" if restart else ""
            return (
                f"the main process does the work fastest (0 workers): workers cost more than they save ({versus}){cost}"
            )
        return (
            f"0 workers: workers add no speed measured beyond the noise ({versus}, within ±"
            f"{pct(Z * noise.stderr(top, rec))}), and cost memory and start-up" + (f"; {restart}" if restart else "")
        )
    return f"the main process keeps up (0 workers): {tail}"


def _on_twins(rec: TrialResult, ok: list[TrialResult], tolerance: float) -> bool:
    """Whether `rec` is on a persistent curve measured only at the counts the climb measured without persistent
    workers (the epoch phase's twins, search/persist.py): how the climb stopped is then the plain curve's."""
    plain = {dataclasses.replace(t.config, persistent_workers=True) for t in ok if worth_persisting(t, tolerance)}
    curve = [t for t in ok if t.config.num_workers > 0 and on_curve(t.config, curve_key(rec.config))]
    return rec.config.persistent_workers and bool(curve) and all(t.config in plain for t in curve)


def _kept_note(rec: TrialResult, ok: list[TrialResult], tolerance: float) -> str:
    """For a recommendation with persistent workers whose twin without them restarts at a cost beyond the noise:
    'persistent workers: without them each epoch restarts 2 workers in 6.30 s, 41% of its time (31 vs 48
    samples/s)'; else ''."""
    if not rec.config.persistent_workers:
        return ""
    plain = dataclasses.replace(rec.config, persistent_workers=False)
    twin = next((t for t in ok if t.config == plain and worth_persisting(t, tolerance)), None)
    if twin is None:
        return ""
    return (
        f"persistent workers: without them {restart_phrase(twin)} ({sps(twin):.0f} vs {sps(rec):.0f} samples/s): "
        f"{REPAY}"
    )


def _restart_cost(with_workers: list[TrialResult], tolerance: float, who: Name) -> str:
    """What the epoch boundary costs the fastest workers that restart every epoch, when beyond the noise band:
    'each epoch restarts 2 workers in 6.30 s, 41% of its time, and each fresh worker pays its start-up again (...)'
    and what persistent workers did, measured ('kept by persistent_workers=True, 2 workers reach 50
    samples/s'), or what they would do. '' when no restart costs beyond the noise."""
    paying = [t for t in with_workers if worth_persisting(t, tolerance)]
    if not paying:
        return ""
    t = max(paying, key=sps)
    text = f"{restart_phrase(t)}, and {REPAY}"
    twin = next((o for o in with_workers if o.config == dataclasses.replace(t.config, persistent_workers=True)), None)
    if twin is None:
        return f"{text}; persistent_workers=True keeps them"
    verb = "reaches" if twin.config.num_workers == 1 else "reach"
    return f"{text}; kept by persistent_workers=True, {who(twin)} {verb} {sps(twin):.0f} samples/s"


def _still_rising_reason(
    rec: TrialResult,
    band: float,
    machine: MachineInfo,
    fewer_within: bool,
    stop: SearchStep | None = None,
    top: int | None = None,
    terms: Terms = SWEEP_TERMS,
    twins: bool = False,
) -> str:
    """The recommendation is the largest worker count measured, and the fastest. Why nothing larger was: the top of
    the range (then, and only then, the range was too narrow), or how the search stopped (engine/verdict/stops.py).
    `fewer_within`: fewer workers are within noise of it, but not surely within the band (band.Noise.surely_within)."""
    bound = bound_of(rec, machine)  # the one label rule; rising while CPU-saturated is the loader's limit still
    if epoch := epoch_bound(rec):  # its row's words
        kind = epoch
    elif bound.kind == IO_BOUND:
        kind = IO_BOUND
    elif bound.kind in (CPU_BOUND, CONSUMER_BOUND, MAIN_BOUND):  # the table's words for the same row, contended or not
        kind = bound_phrase(rec, machine)
    else:
        kind = "loader-bound"
    n = rec.config.num_workers
    within = f"fewer within noise, none surely within {pct(band)}" if fewer_within else f"no fewer within {pct(band)}"
    if top is None or n >= top:  # the top of the range measured and fastest: only then is the range too narrow
        rising = f"throughput still rising at {workers(n)} (the largest tried; {within})"
        return f"{kind}: {rising}" + (f"; try {terms.wider}" if terms.wider else "")
    clause = stop_clause(stop, n, top, terms)
    if twins:  # `twins`: rec is a persistent twin of the climb's rungs (_on_twins): the stop was the plain curve's
        clause = f"the climb without persistent workers stopped there ({clause}), and they were measured at its counts"
    return f"{kind}: fastest at {workers(n)}, the most measured ({within}); {clause}"


def _bound_reason(rec: TrialResult, curve: list[TrialResult], tail: str, machine: MachineInfo) -> str:
    """What bounds a recommendation with workers, as bound.py decides it: the CPUs, the consumer, the main
    process, I/O or the loader."""
    nw, b = rec.config.num_workers, bound_of(rec, machine)
    if b.contended and b.machine is not None:
        return (
            f"CPU-bound: other processes held the CPUs ({b.machine:.1f} of {machine.usable_cpus} busy, this "
            f"sweep's {b.cpus or 0:.1f}): the figures are this busy machine's; {tail}"
        )
    if b.kind == CPU_BOUND:
        # The smallest worker count from which every measured count up to the recommendation is CPU-bound too.
        saturated_from = nw
        for t in reversed([t for t in curve if 0 < t.config.num_workers <= nw]):
            if bound_of(t, machine).kind != CPU_BOUND:
                break
            saturated_from = t.config.num_workers
        return (
            f"CPU-bound: workers use {b.cpus or 0:.1f} of {machine.usable_cpus} usable CPUs "
            f"from {workers(saturated_from)} on; {tail}"
        )
    if b.kind == CONSUMER_BOUND:
        return (
            f"consumer-bound: the training loop waits for data {pct(b.stall)} of the time at "
            f"{workers(nw)}; more workers only add memory; {tail}"
        )
    if b.kind == MAIN_BOUND and in_process(rec):  # its threads load in that one process
        return (
            f"main-process-bound: the training process, its {workers(nw).replace('worker', 'thread worker')} "
            f"included, is at {b.main_cpu or 0:.0f}% CPU; more threads cannot help; {tail}"
        )
    if b.kind == MAIN_BOUND:
        return (
            f"main-process-bound: the training process is at {b.main_cpu or 0:.0f}% CPU receiving and "
            f"collating batches at {workers(nw)}; more workers cannot help; {tail}"
        )
    if b.kind == IO_BOUND and b.per_worker is not None:
        return (
            f"I/O-bound: {b.cpus or 0:.1f} of {machine.usable_cpus} usable CPUs busy, workers at "
            f"{b.per_worker:.0f}% CPU each; {tail}"
        )
    if b.kind == IO_BOUND and in_process(rec):  # thread workers have no CPU figure of their own: the process's
        main = "" if b.main_cpu is None else f", the training process with its thread workers at {b.main_cpu:.0f}% CPU"
        return f"I/O-bound: {b.cpus or 0:.1f} of {machine.usable_cpus} usable CPUs busy{main}; {tail}"
    stall = f" (stall {pct(rec.stall_fraction)})" if rec.stall_fraction is not None else ""
    return f"loader-bound{stall}: {workers(nw)} {'reaches' if nw == 1 else 'reach'} {sps(rec):.0f} samples/s; {tail}"


def _comparison(other: TrialResult, rec: TrialResult, noise: Noise, name: str) -> str:
    """'8 workers add 310 MB and no speed (1012 vs 1003 samples/s, within 5%)': the slower of the two within the band
    below the faster (the rule the recommendation is chosen by); '... are slower (...)' when surely so by the noise
    between runs, else '... are not faster (...)'."""
    a, b = sps(other), sps(rec)
    band = noise.band(other, rec)
    mem = ""
    if other.total_pss_mb is not None and rec.total_pss_mb is not None:
        extra = other.total_pss_mb - rec.total_pss_mb
        if extra >= 1.0:
            mem = f"add {extra:.0f} MB and "
    verb = mem or "add "
    if at_least_within(min(a, b), max(a, b), band):  # the slower within the band below the faster, as chosen
        return f"{name} {verb}no speed ({a:.0f} vs {b:.0f} samples/s, within {pct(band)})"
    gap = f"{pct(a / b - 1.0, signed=True)} ± {pct(Z * noise.stderr(other, rec))}"
    if a > b:
        return f"{name} are faster by more than the {pct(band)} band ({a:.0f} vs {b:.0f} samples/s, {gap})"
    if noise.surely_slower(other, rec):
        return f"{name} are slower ({a:.0f} vs {b:.0f} samples/s, {gap})"
    return f"{name} {mem}are not faster, slower on these runs but not surely ({a:.0f} vs {b:.0f} samples/s, {gap})"
