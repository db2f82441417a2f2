"""From measured trials to a knee, a recommendation, and one-line reasons grounded in the numbers.

Pure analysis over `TrialResult`s: no torch, no UI. samples/s is the comparable unit across batch sizes.
"""

from __future__ import annotations

import dataclasses
import math
import re
import warnings
from collections.abc import Sequence

from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.results import Ceiling, Knee, MachineInfo, Recommendation, TrialResult, UslFit

CPU_SATURATED = 0.85  # fraction of usable CPUs x 100 at which the loader counts as CPU-bound
CONSUMER_BOUND_STALL = 0.05  # the consumer waits less than this: the loader keeps up
IO_WAIT_WORKER_CPU = 50.0  # percent of one CPU per worker below which busy-stalled workers are waiting on I/O
EPOCH_BOUND_SHARE = 0.2  # share of an epoch spent at its boundary from which the boundary is what bounds a trial
MEMORY_SLACK = 0.05  # PSS differences under 5% (or MEMORY_SLACK_MB) are measurement noise, not a real cost
MEMORY_SLACK_MB = 16.0
BAND_CAP = 3.0  # the noise band is at most this many times the tolerance (15% by default)
# Kneedle's point must reach this share of the peak: below it, more workers still pay a third or more.
KNEEDLE_MIN_SHARE = 0.75
MAIN_PROCESS_BUSY = 90.0  # percent of one CPU: the training process itself is the bottleneck
_MEMORY_WORDS = re.compile(r"\b(memory|oom|oom-killer|out of memory)\b", re.IGNORECASE)

_GroupKey = tuple[int, int | None, bool, bool, str | None]


# ---------------------------------------------------------------------------------------------------------------------
# Public API


def noise_band(a: TrialResult, b: TrialResult, tolerance: float) -> float:
    """The relative difference below which two throughputs are the same: the tolerance or either trial's spread,
    at most BAND_CAP × the tolerance. A spread wider than that is a busy machine, not a band: taken as one, it
    would call a 50% gain noise and steer "cheapest within the band" to too few workers."""
    return min(max(tolerance, a.spread or 0.0, b.spread or 0.0), BAND_CAP * tolerance)


def snippet(config: TrialConfig, default_start_method: str, extra: Sequence[str] = ()) -> str:
    """A ready-to-paste `DataLoader(...)` line: batch_size always, other arguments only where not the default;
    `extra` arguments (such as a DistributedSampler with --ranks) go after batch_size."""
    args = ["dataset", f"batch_size={config.batch_size}", *extra]
    if config.num_workers > 0:
        args.append(f"num_workers={config.num_workers}")
        if config.prefetch_factor is not None and config.prefetch_factor != 2:
            args.append(f"prefetch_factor={config.prefetch_factor}")
    if config.pin_memory:
        args.append("pin_memory=True")
    if config.num_workers > 0:
        if config.persistent_workers:
            args.append("persistent_workers=True")
        if config.start_method and config.start_method != default_start_method:
            args.append(f'multiprocessing_context="{config.start_method}"')
        if not config.in_order:
            args.append("in_order=False")
    return f"DataLoader({', '.join(args)})"


def trial_reason(
    trial: TrialResult,
    machine: MachineInfo,
    peak_samples_per_s: float | None,
    tolerance: float = 0.05,
    ceiling: float | None = None,
) -> str:
    """A short phrase for the results table: what bounds this trial, and how it compares with the best.

    Categories, from the measured evidence: CPU-bound (all processes together near the usable CPUs),
    consumer-bound (the training step hardly waits), main-process-bound (the training process itself is busy
    receiving, collating or pinning), I/O-bound (workers mostly blocked), memory-bound (a guard or the OOM killer
    stopped it), else loader-bound (more workers may help). `ceiling` adds the share of the consumer's ceiling."""
    if trial.status != "ok":
        text = trial.error or trial.status
        return f"memory-bound: {text}" if _memory_related(text) and not text.startswith("memory-bound") else text
    capacity = _capacity(machine)
    stall = trial.stall_fraction
    main = trial.main_cpu_percent
    boundary = _boundary_share(trial)
    if boundary is not None and boundary >= EPOCH_BOUND_SHARE:
        assert trial.epoch_restart_s is not None
        fix = (
            "; persistent_workers=True keeps them"
            if trial.config.num_workers and not trial.config.persistent_workers
            else ""
        )
        phrase = (
            f"epoch-bound (each {trial.epoch_batches}-batch epoch waits {trial.epoch_restart_s:.2f} s at its "
            f"boundary, {_pct(boundary)} of its time{fix})"
        )
    elif trial.cpu_percent is not None and trial.cpu_percent >= CPU_SATURATED * capacity:
        phrase = f"CPU-bound ({trial.cpu_percent / 100:.1f}/{machine.usable_cpus} CPUs)"
    elif stall is not None and stall < CONSUMER_BOUND_STALL:
        phrase = f"consumer-bound (stall {_pct(stall)})"
    elif stall is not None and main is not None and main >= MAIN_PROCESS_BUSY:
        doing = "loading in the training process" if trial.config.num_workers == 0 else "receiving and collating"
        phrase = f"main-process-bound ({doing} at {main:.0f}% CPU, stall {_pct(stall)})"
    elif stall is not None:
        per_worker = _per_worker_cpu(trial)
        if per_worker is not None and per_worker < IO_WAIT_WORKER_CPU:
            phrase = f"I/O-bound (workers at {per_worker:.0f}% CPU each)"
        elif trial.config.num_workers == 0 and main is not None and main < IO_WAIT_WORKER_CPU and stall >= 0.5:
            # Mostly loading (stall), yet mostly idle: the loading itself waits. (A low CPU with a low stall is
            # just the training step's time.)
            phrase = f"I/O-bound (the training process waits, at {main:.0f}% CPU)"
        else:
            phrase = f"loader-bound (stall {_pct(stall)})"
    elif trial.cpu_percent is not None:
        phrase = f"{trial.cpu_percent / 100:.1f}/{machine.usable_cpus} CPUs"
    else:
        phrase = "no CPU or stall data"
    if ceiling and trial.samples_per_s is not None:
        phrase += f", {_pct(trial.samples_per_s / ceiling)} of ceiling"
    if peak_samples_per_s and trial.samples_per_s is not None:
        ratio = trial.samples_per_s / peak_samples_per_s
        if ratio >= 1.0 - 1e-9:
            phrase += ", best"
        elif ratio >= 1.0 - min(max(tolerance, trial.spread or 0.0), BAND_CAP * tolerance):
            phrase += ", within noise of best"
        else:
            phrase += f", {_pct(ratio)} of best"
    return phrase


def _boundary_share(trial: TrialResult) -> float | None:
    """The share of an epoch's time spent at its boundary, for a trial measured over whole epochs."""
    if not trial.epoch_batches or trial.epoch_restart_s is None or not trial.batches_per_s:
        return None
    return min(1.0, trial.epoch_restart_s * trial.batches_per_s / trial.epoch_batches)


def analyze(
    trials: Sequence[TrialResult], settings: Settings, machine: MachineInfo
) -> tuple[Knee | None, Recommendation | None]:
    """The knee of the recommended configuration's worker curve, and the cheapest configuration within noise of
    the fastest. (None, None) when no trial finished with a throughput. Repeats of a configuration count once."""
    ok = merge_repeats(_finished(trials))
    if not ok:
        return None, None
    tol = settings.tolerance
    best, rec = _choose(ok, tol)
    curve = _group_curve(ok, rec)
    knee = _knee(curve, tol)
    rec_band = noise_band(rec, best, tol)
    reason = _recommendation_reason(rec, best, ok, curve, rec_band, tol, machine)
    runs = [t for t in trials if t.config == rec.config and t.status == "ok" and t.samples_per_s is not None]
    if len(runs) > 1:
        reason += f"; mean of {len(runs)} runs ({', '.join(f'{_sps(t):.0f}' for t in runs)} samples/s)"
    recommendation = Recommendation(
        config=rec.config,
        samples_per_s=_sps(rec),
        reason=reason,
        snippet=snippet(rec.config, machine.default_start_method),
        trial_index=rec.index,
    )
    return knee, recommendation


def annotate(
    trials: Sequence[TrialResult], machine: MachineInfo, tolerance: float, ceilings: Sequence[Ceiling] = ()
) -> list[TrialResult]:
    """Every trial with its reason, its share of the consumer's ceiling, and which earlier trial it repeats.

    Reasons compare each trial with the best of the sweep, so they are final only at the end."""
    by_batch = {c.batch_size: c.samples_per_s for c in ceilings}
    ok = [t.samples_per_s for t in trials if t.status == "ok" and t.samples_per_s]
    peak = max(ok) if ok else None
    first: dict[TrialConfig, int] = {}
    out = []
    for t in trials:
        ceiling = by_batch.get(t.config.batch_size)
        earlier = first.setdefault(t.config, t.index)
        repeat_of = earlier if earlier != t.index else None
        reason = trial_reason(t, machine, peak, tolerance, ceiling)
        if repeat_of is not None:
            reason += f" (repeat of #{repeat_of})"
        out.append(
            dataclasses.replace(
                t,
                reason=reason,
                fraction_of_ceiling=t.samples_per_s / ceiling if ceiling and t.samples_per_s is not None else None,
                repeat_of=repeat_of,
            )
        )
    return out


def rule_notes(knee: Knee | None, usl: UslFit | None, tolerance: float) -> list[str]:
    """Lines for the event stream: what each knee rule says and which one chose, and the USL fit."""
    notes = []
    if knee is not None and knee.num_workers is None:
        notes.append(f"knee: none marked ({knee.rule}): {knee.reason}")
    elif knee is not None:
        kneedle = _workers(knee.kneedle) if knee.kneedle is not None else "no knee"
        band = _workers(knee.noise_band) if knee.noise_band is not None else "–"
        notes.append(
            f"knee: Kneedle says {kneedle}, the noise band rule says {band}; the knee marked is the {knee.rule} "
            f"rule's; the recommendation always uses the band rule (fewest workers within {_pct(tolerance)} or the "
            "spread of the best)"
        )
    if usl is not None:
        notes.append(usl.note)
    return notes


def choose(trials: Sequence[TrialResult], tolerance: float) -> tuple[TrialResult, TrialResult] | None:
    """(fastest, recommended) over the finished trials, repeats merged; the recommendation is the rule
    "cheapest within the noise band of the best". None when nothing finished."""
    ok = merge_repeats(_finished(trials))
    return _choose(ok, tolerance) if ok else None


def worker_curve(trials: Sequence[TrialResult], tolerance: float) -> list[TrialResult]:
    """The recommended configuration's num_workers curve (repeats merged, one point per worker count)."""
    ok = merge_repeats(_finished(trials))
    if not ok:
        return []
    return _group_curve(ok, _choose(ok, tolerance)[1])


def merge_repeats(ok: Sequence[TrialResult]) -> list[TrialResult]:
    """One trial per configuration. Repeats (finalists measured again) merge into the latest run with the mean
    throughput and, as spread, the wider of the runs' disagreement and the steadiest run's own spread: the best
    evidence both ways, hiding neither the difference between runs nor the noise within one."""
    groups: dict[TrialConfig, list[TrialResult]] = {}
    for t in ok:
        groups.setdefault(t.config, []).append(t)
    merged = []
    for runs in groups.values():
        if len(runs) == 1:
            merged.append(runs[0])
            continue
        xs = [_sps(t) for t in runs]
        mean = sum(xs) / len(xs)
        between = (max(xs) - min(xs)) / mean if mean > 0 else 0.0
        within = min((t.spread for t in runs if t.spread is not None), default=0.0)
        merged.append(
            dataclasses.replace(
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
        )
    return sorted(merged, key=lambda t: t.index)


def _finished(trials: Sequence[TrialResult]) -> list[TrialResult]:
    return [t for t in trials if t.status == "ok" and t.samples_per_s is not None and math.isfinite(t.samples_per_s)]


def _choose(ok: list[TrialResult], tol: float) -> tuple[TrialResult, TrialResult]:
    best = max(ok, key=lambda t: (_sps(t), -t.config.num_workers))
    return best, _cheapest_within_band(ok, best, tol)


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


# ---------------------------------------------------------------------------------------------------------------------
# Recommendation


def _cheapest_within_band(ok: list[TrialResult], best: TrialResult, tol: float) -> TrialResult:
    """Fewest workers within the band of the best; then less memory (beyond measurement noise); then throughput."""
    candidates = [t for t in ok if _sps(t) >= _sps(best) * (1.0 - noise_band(best, t, tol))]
    fewest = min(t.config.num_workers for t in candidates)
    same = [t for t in candidates if t.config.num_workers == fewest]
    known = [t.total_pss_mb for t in same if t.total_pss_mb is not None]
    if known:
        lightest = min(known)
        limit = max(lightest * (1.0 + MEMORY_SLACK), lightest + MEMORY_SLACK_MB)
        same = [t for t in same if t.total_pss_mb is None or t.total_pss_mb <= limit]
    return max(same, key=lambda t: (_sps(t), -(t.total_pss_mb or 0.0), -t.index))


def _recommendation_reason(
    rec: TrialResult,
    best: TrialResult,
    ok: list[TrialResult],
    curve: list[TrialResult],
    band: float,
    tol: float,
    machine: MachineInfo,
) -> str:
    nw = rec.config.num_workers
    capacity = _capacity(machine)
    same_group = {id(t) for t in curve}

    def who(t: TrialResult) -> str:
        return _workers(t.config.num_workers) if id(t) in same_group else t.config.label()

    # Something that costs more than the recommendation and does not pay for it.
    comparator: TrialResult | None = None
    if best is not rec:
        comparator = best
    else:
        larger = [t for t in curve if t.config.num_workers > nw]
        if larger:
            comparator = max(larger, key=lambda t: t.config.num_workers)
    clauses: list[str] = []
    if comparator is not None:
        clauses.append(_comparison(comparator, rec, band, who(comparator)))
    drop = _drop_after_peak(curve, tol)
    if drop is not None and drop[0] is not comparator:
        clauses.append(f"slower again at {who(drop[0])} ({_signed_pct(drop[1])})")
    tail = "; ".join(clauses) if clauses else f"no other configuration measured within {_pct(band)}"

    largest = max(t.config.num_workers for t in curve)
    if nw == 0:
        with_workers = [t for t in ok if t.config.num_workers > 0]
        if not with_workers:
            share = rec.fraction_of_ceiling
            if share is not None and share >= 1.0 - band:
                return (
                    f"consumer-bound: 0 workers already deliver {_pct(share)} of the {_sps(rec) / share:.0f} "
                    "samples/s the training step can take (its ceiling): workers cannot make it faster"
                )
            return f"only 0 workers measured ({_sps(rec):.0f} samples/s); try a --workers range"
        top = max(with_workers, key=_sps)
        if _sps(rec) >= _sps(top):
            return (
                "the main process does the work fastest (0 workers): worker start-up and transfer cost more than "
                f"they save (best with workers: {who(top)} at {_sps(top):.0f} vs {_sps(rec):.0f} samples/s, "
                f"{_signed_pct(_sps(top) / _sps(rec) - 1.0)}; noise band {_pct(band)})"
            )
        return f"the main process keeps up (0 workers): {tail}"
    if nw == largest and len(curve) > 1 and rec is best:
        if rec.cpu_percent is None:
            kind = "loader-bound"
        elif rec.cpu_percent >= CPU_SATURATED * capacity:
            kind = f"loader-bound ({rec.cpu_percent / 100:.1f} of {machine.usable_cpus} usable CPUs busy)"
        else:
            kind = "I/O-bound"
        return (
            f"{kind}: throughput still rising at {_workers(nw)} (the largest tried; no fewer within "
            f"{_pct(band)}); try a wider --workers range"
        )
    if rec.cpu_percent is not None and rec.cpu_percent >= CPU_SATURATED * capacity:
        # The smallest worker count from which every measured count up to the recommendation saturates the CPUs.
        saturated_from = nw
        for t in reversed([t for t in curve if 0 < t.config.num_workers <= nw]):
            if t.cpu_percent is None or t.cpu_percent < CPU_SATURATED * capacity:
                break
            saturated_from = t.config.num_workers
        return (
            f"CPU-bound: workers use {rec.cpu_percent / 100:.1f} of {machine.usable_cpus} usable CPUs "
            f"from {_workers(saturated_from)} on; {tail}"
        )
    if rec.stall_fraction is not None and rec.stall_fraction < CONSUMER_BOUND_STALL:
        return (
            f"consumer-bound: the training loop waits for data {_pct(rec.stall_fraction)} of the time at "
            f"{_workers(nw)}; more workers only add memory; {tail}"
        )
    if rec.main_cpu_percent is not None and rec.main_cpu_percent >= MAIN_PROCESS_BUSY and rec.stall_fraction:
        return (
            f"main-process-bound: the training process is at {rec.main_cpu_percent:.0f}% CPU receiving and "
            f"collating batches at {_workers(nw)}; more workers cannot help; {tail}"
        )
    per_worker = _per_worker_cpu(rec)
    if per_worker is not None and per_worker < IO_WAIT_WORKER_CPU:
        return f"I/O-bound: workers at {per_worker:.0f}% CPU each; {tail}"
    stall = f" (stall {_pct(rec.stall_fraction)})" if rec.stall_fraction is not None else ""
    return f"loader-bound{stall}: {_workers(nw)} {'reaches' if nw == 1 else 'reach'} {_sps(rec):.0f} samples/s; {tail}"


def _comparison(other: TrialResult, rec: TrialResult, band: float, name: str) -> str:
    """'8 workers add 310 MB and no speed (1012 vs 1003 samples/s, within 5%)' or '... are slower (...)'."""
    a, b = _sps(other), _sps(rec)
    mem = ""
    if other.total_pss_mb is not None and rec.total_pss_mb is not None:
        extra = other.total_pss_mb - rec.total_pss_mb
        if extra >= 1.0:
            mem = f"add {extra:.0f} MB and "
    verb = mem or "add "
    if a >= b * (1.0 - band):
        return f"{name} {verb}no speed ({a:.0f} vs {b:.0f} samples/s, within {_pct(band)})"
    return f"{name} are slower ({a:.0f} vs {b:.0f} samples/s, {_signed_pct(a / b - 1.0)}; noise band {_pct(band)})"


# ---------------------------------------------------------------------------------------------------------------------
# Knee


def _knee(curve: list[TrialResult], tol: float) -> Knee:
    counts = [t.config.num_workers for t in curve]
    if len(counts) < 3:
        return Knee(None, "none", f"too few points for a knee ({len(counts)} worker counts)")
    ys = [_sps(t) for t in curve]
    peak_i = max(range(len(ys)), key=lambda i: (ys[i], -i))
    low_i = min(range(len(ys)), key=lambda i: ys[i])
    peak = curve[peak_i]
    top = ys[peak_i]
    band = noise_band(peak, curve[low_i], tol)
    if top <= 0 or (top - ys[low_i]) / top <= band:
        spread = (top - ys[low_i]) / top if top > 0 else 0.0
        return Knee(
            None,
            "flat",
            f"no clear knee: throughput flat within {_pct(spread)} from {counts[0]} to {_workers(counts[-1])} "
            f"(noise band {_pct(band)})",
        )
    drop = _drop_after_peak(curve, tol)
    drop_text = f"; slower again at {_workers(drop[0].config.num_workers)} ({_signed_pct(drop[1])})" if drop else ""
    peak_text = f"the {top:.0f} samples/s peak at {_workers(counts[peak_i])}"

    # Both rules are always computed; Kneedle (diminishing returns) names the knee when it finds one, the noise band
    # (fewest workers within noise of the peak) otherwise. The recommendation always uses the band rule.
    knee_x = _kneedle(counts[: peak_i + 1], ys[: peak_i + 1])
    if knee_x is not None and _sps(curve[counts.index(knee_x)]) < KNEEDLE_MIN_SHARE * top:
        knee_x = None  # a point this far below the peak is where gains are still large, whatever the curvature says
    band_t, t_band = next((t, noise_band(t, peak, tol)) for t in curve[: peak_i + 1] if _within(t, peak, tol))
    band_x = band_t.config.num_workers
    if knee_x is not None:
        k = curve[counts.index(knee_x)]
        return Knee(
            knee_x,
            "kneedle",
            f"gains flatten at {_workers(knee_x)} ({_sps(k):.0f} samples/s, {_pct(_sps(k) / top)} of {peak_text})"
            + drop_text,
            kneedle=knee_x,
            noise_band=band_x,
        )
    if band_x == counts[-1] and peak_i == len(curve) - 1:
        return Knee(
            None,
            "rising",
            f"no knee yet: throughput still rising at {_workers(band_x)} ({top:.0f} samples/s, the largest tried; "
            f"{_workers(counts[-2])}: {ys[-2]:.0f})",
            noise_band=band_x,
        )
    if band_t is peak:
        text = f"the {top:.0f} samples/s peak at {_workers(band_x)}; no fewer workers within {_pct(t_band)}"
    else:
        text = f"{_workers(band_x)} within {_pct(t_band)} of {peak_text}"
    return Knee(band_x, "noise band", text + drop_text, noise_band=band_x)


def _within(t: TrialResult, peak: TrialResult, tol: float) -> bool:
    return _sps(t) >= _sps(peak) * (1.0 - noise_band(t, peak, tol))


def _kneedle(xs: list[int], ys: list[float]) -> int | None:
    if len(xs) < 3:
        return None
    from kneed import KneeLocator

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # kneed warns when it finds no knee; that is an answer, not a problem
        try:
            knee = KneeLocator(xs, ys, curve="concave", direction="increasing").knee
        except (ValueError, ZeroDivisionError, FloatingPointError):
            return None
    if knee is None:
        return None
    knee_i = round(float(knee))
    return knee_i if knee_i in xs else None


def _drop_after_peak(curve: list[TrialResult], tol: float) -> tuple[TrialResult, float] | None:
    """The slowest point after the curve's peak when it is slower by more than the band: (trial, relative change)."""
    if not curve:
        return None
    ys = [_sps(t) for t in curve]
    peak_i = max(range(len(ys)), key=lambda i: (ys[i], -i))
    after = curve[peak_i + 1 :]
    if not after or ys[peak_i] <= 0:
        return None
    worst = min(after, key=_sps)
    change = _sps(worst) / ys[peak_i] - 1.0
    if -change > noise_band(worst, curve[peak_i], tol):
        return worst, change
    return None


# ---------------------------------------------------------------------------------------------------------------------
# Grouping


def _group_key(config: TrialConfig) -> _GroupKey:
    return (
        config.batch_size,
        config.prefetch_factor,
        config.pin_memory,
        config.persistent_workers,
        config.start_method,
    )


def _group_curve(ok: list[TrialResult], rec: TrialResult) -> list[TrialResult]:
    """The num_workers curve of `rec`'s group (same other knobs), best trial per worker count, sorted.

    0-worker trials collapse the knobs that need workers, so they join every group with the same batch size and
    pin_memory. A 0-worker recommendation takes the matching group with the fastest trial."""
    if rec.config.num_workers > 0:
        key = _group_key(rec.config)
    else:
        matching = [
            t
            for t in ok
            if t.config.num_workers > 0
            and t.config.batch_size == rec.config.batch_size
            and t.config.pin_memory == rec.config.pin_memory
        ]
        if not matching:
            return _best_per_count([t for t in ok if _group_key(t.config) == _group_key(rec.config)])
        key = _group_key(max(matching, key=_sps).config)
    members = [
        t
        for t in ok
        if _group_key(t.config) == key
        or (t.config.num_workers == 0 and t.config.batch_size == key[0] and t.config.pin_memory == key[2])
    ]
    return _best_per_count(members)


def _best_per_count(members: list[TrialResult]) -> list[TrialResult]:
    by_count: dict[int, TrialResult] = {}
    for t in members:
        held = by_count.get(t.config.num_workers)
        if held is None or _sps(t) > _sps(held):
            by_count[t.config.num_workers] = t
    return [by_count[n] for n in sorted(by_count)]


# ---------------------------------------------------------------------------------------------------------------------
# Small helpers


def _sps(t: TrialResult) -> float:
    return float(t.samples_per_s or 0.0)


def _memory_related(text: str) -> bool:
    return _MEMORY_WORDS.search(text) is not None


def _capacity(machine: MachineInfo) -> float:
    return max(1, machine.usable_cpus) * 100.0


def _per_worker_cpu(t: TrialResult) -> float | None:
    nw = t.config.num_workers
    if nw <= 0 or t.cpu_percent is None:
        return None
    workers_cpu = t.cpu_percent - (t.main_cpu_percent or 0.0) if t.main_cpu_percent is not None else t.cpu_percent
    return max(0.0, workers_cpu) / nw


def _workers(n: int) -> str:
    return f"{n} worker" if n == 1 else f"{n} workers"


def _pct(x: float) -> str:
    value = x * 100.0
    return f"{value:.0f}%" if abs(value - round(value)) < 0.05 or abs(value) >= 10 else f"{value:.1f}%"


def _signed_pct(x: float) -> str:
    value = x * 100.0
    return f"−{abs(value):.0f}%" if value < 0 else f"+{value:.0f}%"
