"""From measured trials to a knee, a recommendation, and one-line reasons grounded in the numbers.

Pure analysis over `TrialResult`s: no torch, no UI. samples/s is the comparable unit across batch sizes.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

from loadertop.core.config import Settings, TrialConfig
from loadertop.core.results import Knee, MachineInfo, Recommendation, TrialResult

CPU_SATURATED = 0.85  # fraction of usable CPUs x 100 at which the loader counts as CPU-bound
CONSUMER_BOUND_STALL = 0.05  # the consumer waits less than this: the loader keeps up
IO_WAIT_WORKER_CPU = 50.0  # percent of one CPU per worker below which busy-stalled workers are waiting on I/O
MEMORY_SLACK = 0.05  # PSS differences under 5% (or MEMORY_SLACK_MB) are measurement noise, not a real cost
MEMORY_SLACK_MB = 16.0

_GroupKey = tuple[int, int | None, bool, bool, str | None]


# ---------------------------------------------------------------------------------------------------------------------
# Public API


def noise_band(a: TrialResult, b: TrialResult, tolerance: float) -> float:
    """The relative difference below which two throughputs are the same: the tolerance or either trial's spread."""
    return max(tolerance, a.spread or 0.0, b.spread or 0.0)


def snippet(config: TrialConfig, default_start_method: str) -> str:
    """A ready-to-paste `DataLoader(...)` line: batch_size always, other arguments only where not the default."""
    args = ["dataset", f"batch_size={config.batch_size}"]
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
    return f"DataLoader({', '.join(args)})"


def trial_reason(
    trial: TrialResult,
    machine: MachineInfo,
    peak_samples_per_s: float | None,
    tolerance: float = 0.05,
) -> str:
    """A short phrase for the results table: what bounds this trial, and how it compares with the best."""
    if trial.status != "ok":
        return trial.error or trial.status
    capacity = _capacity(machine)
    if trial.cpu_percent is not None and trial.cpu_percent >= CPU_SATURATED * capacity:
        phrase = f"CPU-bound ({trial.cpu_percent / 100:.1f}/{machine.usable_cpus} CPUs)"
    elif trial.stall_fraction is not None and trial.stall_fraction < CONSUMER_BOUND_STALL:
        phrase = f"consumer-bound (stall {_pct(trial.stall_fraction)})"
    elif trial.stall_fraction is not None:
        per_worker = _per_worker_cpu(trial)
        if per_worker is not None and per_worker < IO_WAIT_WORKER_CPU:
            phrase = f"loader-bound, I/O wait (workers at {per_worker:.0f}% CPU each)"
        else:
            phrase = f"loader-bound (stall {_pct(trial.stall_fraction)})"
    elif trial.cpu_percent is not None:
        phrase = f"{trial.cpu_percent / 100:.1f}/{machine.usable_cpus} CPUs"
    else:
        phrase = "no CPU or stall data"
    if peak_samples_per_s and trial.samples_per_s is not None:
        ratio = trial.samples_per_s / peak_samples_per_s
        if ratio >= 1.0 - 1e-9:
            phrase += ", best"
        elif ratio >= 1.0 - max(tolerance, trial.spread or 0.0):
            phrase += ", within noise of best"
        else:
            phrase += f", {_pct(ratio)} of best"
    return phrase


def analyze(
    trials: Sequence[TrialResult], settings: Settings, machine: MachineInfo
) -> tuple[Knee | None, Recommendation | None]:
    """The knee of the recommended configuration's worker curve, and the cheapest configuration within noise of
    the fastest. (None, None) when no trial finished with a throughput."""
    ok = [t for t in trials if t.status == "ok" and t.samples_per_s is not None and math.isfinite(t.samples_per_s)]
    if not ok:
        return None, None
    tol = settings.tolerance
    best = max(ok, key=lambda t: (t.samples_per_s, -t.config.num_workers))
    rec = _cheapest_within_band(ok, best, tol)
    curve = _group_curve(ok, rec)
    knee = _knee(curve, tol)
    rec_band = noise_band(rec, best, tol)
    reason = _recommendation_reason(rec, best, ok, curve, rec_band, tol, machine)
    recommendation = Recommendation(
        config=rec.config,
        samples_per_s=_sps(rec),
        reason=reason,
        snippet=snippet(rec.config, machine.default_start_method),
        trial_index=rec.index,
    )
    return knee, recommendation


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

    knee_x = _kneedle(counts[: peak_i + 1], ys[: peak_i + 1])
    if knee_x is not None:
        k = curve[counts.index(knee_x)]
        return Knee(
            knee_x,
            "kneedle",
            f"gains flatten at {_workers(knee_x)} ({_sps(k):.0f} samples/s, {_pct(_sps(k) / top)} of {peak_text})"
            + drop_text,
        )
    for t in curve[: peak_i + 1]:
        t_band = noise_band(t, peak, tol)
        if _sps(t) >= top * (1.0 - t_band):
            w = t.config.num_workers
            if w == counts[-1] and peak_i == len(curve) - 1:
                return Knee(
                    None,
                    "rising",
                    f"no knee yet: throughput still rising at {_workers(w)} ({top:.0f} samples/s, the largest tried; "
                    f"{_workers(counts[-2])}: {ys[-2]:.0f})",
                )
            if t is peak:
                text = f"the {top:.0f} samples/s peak at {_workers(w)}; no fewer workers within {_pct(t_band)}"
            else:
                text = f"{_workers(w)} within {_pct(t_band)} of {peak_text}"
            return Knee(w, "noise band", text + drop_text)
    raise AssertionError("the peak is always within its own band")  # pragma: no cover


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
