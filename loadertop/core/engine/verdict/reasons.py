"""What bounds a trial, in one phrase from its measured evidence, and how it compares with the best of the sweep.

Categories: epoch-bound (the epoch boundary takes a large share of the time), transport-bound (transport_bound.py),
memory-bound (a guard or the OOM killer stopped it), else the CPU, consumer, main-process, I/O or loader bound that
bound.py decides from the machine's CPU share (the one place that decides it)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from loadertop.core.engine.verdict.band import Noise, finished, merge_repeats, noise_band
from loadertop.core.engine.verdict.bound import CONSUMER_BOUND, CPU_BOUND, IO_BOUND, MAIN_BOUND, bound_of, in_process
from loadertop.core.engine.verdict.epoch import restart_phrase, restart_share, restarts
from loadertop.core.engine.verdict.methods import gil_enabled, method_phrase
from loadertop.core.engine.verdict.transport_bound import consumer_ceilings, transport_phrase
from loadertop.core.engine.wording import pct, sps, workers
from loadertop.core.model.config import TrialConfig
from loadertop.core.model.curves import curve_key, on_curve
from loadertop.core.model.figures import at_least_within
from loadertop.core.model.results import Ceiling, MachineInfo, TrialResult

EPOCH_BOUND_SHARE = 0.2  # share of an epoch spent at its boundary from which the boundary is what bounds a trial
_MEMORY_WORDS = re.compile(r"\b(memory|oom|oom-killer|out of memory)\b", re.IGNORECASE)


def annotate(
    trials: Sequence[TrialResult],
    machine: MachineInfo,
    tolerance: float,
    ceilings: Sequence[Ceiling] = (),
    cpu_step: bool = False,
) -> list[TrialResult]:
    """Every trial with its reason, its share of the consumer's ceiling, and which earlier trial it repeats.

    Reasons compare each trial with the best of the sweep, so they are final only at the end. A configuration
    measured more than once is judged on its runs together (their mean, as its report row and the recommendation
    quote it), so every run of it gives the same reason."""
    by_batch = {c.batch_size: c for c in consumer_ceilings(ceilings)}
    merged = {t.config: t for t in merge_repeats([t for t in trials if t.status == "ok"])}
    best = max(merged.values(), key=sps, default=None)
    peak = sps(best) if best is not None and best.samples_per_s else None
    # "within noise of best" exactly when the ≈ set holds it (band.equivalent: not surely outside the band, by the
    # noise between runs), not by one run's spread: a row said "within noise" of a configuration the
    # recommendation called 5.1% behind, outside it
    noise = Noise.of(finished(trials), tolerance)
    first: dict[TrialConfig, int] = {}
    out = []
    for t in trials:
        measured = by_batch.get(t.config.batch_size)
        ceiling, ceiling_spread = (measured.samples_per_s, measured.spread or 0.0) if measured else (None, 0.0)
        earlier = first.setdefault(t.config, t.index)
        repeat_of = earlier if earlier != t.index else None
        judged = merged.get(t.config, t) if t.status == "ok" else t
        transport = transport_phrase(judged, ceilings, list(merged.values())) if t.status == "ok" else ""
        within = not noise.surely_outside(judged, best) if best is not None and t.status == "ok" else None
        reason = trial_reason(
            judged,
            machine,
            peak,
            tolerance,
            ceiling,
            transport,
            cpu_step,
            list(merged.values()),
            within,
            ceiling_spread,
        )
        if repeat_of is not None:
            reason += f" (repeat of #{repeat_of})"
        out.append(
            dataclasses.replace(
                t,
                reason=reason,
                fraction_of_ceiling=ceiling_share(t, ceiling, noise_band(tolerance, t) + ceiling_spread),
                repeat_of=repeat_of,
            )
        )
    return out


def trial_reason(
    trial: TrialResult,
    machine: MachineInfo,
    peak_samples_per_s: float | None,
    tolerance: float = 0.05,
    ceiling: float | None = None,
    transport: str = "",
    cpu_step: bool = False,
    measured: Sequence[TrialResult] = (),
    within: bool | None = None,
    ceiling_spread: float = 0.0,
) -> str:
    """A short phrase for the results table: what bounds this trial (see the module's categories), its share of
    the consumer's `ceiling`, and how it compares with the best. `transport` is its transport-bound phrase, if any
    (engine/verdict/transport_bound.py); `measured` (finished, repeats merged) is what its advice is checked against;
    `within`: whether the equivalence set holds it (band.equivalent); None: judged by one run's band."""
    if trial.status != "ok":
        text = trial.error or trial.status
        return f"memory-bound: {text}" if _memory_related(text) and not text.startswith("memory-bound") else text
    phrase = epoch_bound(trial) or transport or bound_phrase(trial, machine)
    if trial.config.pin_memory and not has_cuda(machine):
        phrase += ", pinning not measured (no CUDA)"
    over = oversubscribed(trial, machine, cpu_step, measured, tolerance)
    if over:
        phrase += f", {over}"
    method = method_phrase(trial, measured, machine.usable_cpus, gil_enabled(), tolerance)
    if method:
        phrase += f"; {method}"
    if ceiling and trial.samples_per_s is not None:
        phrase += ceiling_share_phrase(trial, ceiling, noise_band(tolerance, trial) + ceiling_spread)
    if peak_samples_per_s and trial.samples_per_s is not None:
        ratio = trial.samples_per_s / peak_samples_per_s
        if ratio >= 1.0 - 1e-9:
            phrase += ", best"
        elif within if within is not None else at_least_within(trial.samples_per_s, peak_samples_per_s,
                                                               noise_band(tolerance, trial)):  # fmt: skip
            phrase += ", within noise of best"
        else:
            phrase += f", {pct(ratio)} of best"
    return phrase


def ceiling_share(trial: TrialResult, ceiling: float | None, band: float) -> float | None:
    """The trial's samples/s over the consumer's ceiling; None without either, or when the trial beat the consumer
    alone beyond the noise `band` (the ceiling was measured while the machine did other work: it read low, and no
    share of it means anything)."""
    if not ceiling or trial.samples_per_s is None:
        return None
    share = trial.samples_per_s / ceiling
    return share if share <= 1.0 + band else None


def ceiling_share_phrase(trial: TrialResult, ceiling: float, band: float) -> str:
    """', 81% of ceiling'; or that the ceiling read low (ceiling_share)."""
    share = ceiling_share(trial, ceiling, band)
    if share is not None:
        return f", {pct(share)} of ceiling"
    return f", faster than the consumer alone measured ({ceiling:.0f} samples/s: that ceiling read low)"


def epoch_bound(trial: TrialResult) -> str | None:
    """'epoch-bound (each epoch restarts 2 workers in 6.30 s, 41% of its time: persistent_workers=True keeps them)'
    when the epoch boundary takes EPOCH_BOUND_SHARE or more of the time, else None."""
    share = restart_share(trial)
    if share is None or share < EPOCH_BOUND_SHARE:
        return None
    fix = ": persistent_workers=True keeps them" if restarts(trial) else ""
    return f"epoch-bound ({restart_phrase(trial)}{fix})"


def bound_phrase(trial: TrialResult, machine: MachineInfo) -> str:
    """What bounds a finished trial within its steady window, as bound.py decides it, in the table's words."""
    b, cpus = bound_of(trial, machine), machine.usable_cpus
    of = f"{b.cpus:.1f}/{cpus} CPUs" if b.cpus is not None else ""
    if b.contended and b.machine is not None:
        others = b.machine - (b.cpus or 0.0)
        return f"CPU-bound ({b.machine:.1f}/{cpus} CPUs busy, {others:.1f} of them other processes')"
    if b.kind == CPU_BOUND:
        return f"CPU-bound ({of})"
    if b.kind is None:
        return of or "no CPU or stall data"
    stall = pct(b.stall)
    if b.kind == CONSUMER_BOUND:
        return f"consumer-bound (stall {stall})"
    if b.kind == MAIN_BOUND:
        # Thread workers load inside the training process: its CPU is theirs, one process under one GIL.
        inside = trial.config.num_workers == 0 or in_process(trial)
        doing = "loading in the training process" if inside else "receiving and collating"
        return f"main-process-bound ({doing} at {b.main_cpu:.0f}% CPU, stall {stall})"
    if b.kind == IO_BOUND and b.per_worker is not None:
        return f"I/O-bound ({of}, workers at {b.per_worker:.0f}% CPU each)"
    if b.kind == IO_BOUND and in_process(trial):  # thread workers: no CPU figure of their own, the process's only
        said = [of] if of else []
        if b.main_cpu is not None:
            said.append(f"the training process with its thread workers at {b.main_cpu:.0f}% CPU")
        return f"I/O-bound ({', '.join(said)})" if said else "I/O-bound"
    if b.kind == IO_BOUND:
        return f"I/O-bound (the training process waits, at {b.main_cpu:.0f}% CPU)"
    return f"loader-bound (stall {stall})"


def oversubscribed(
    trial: TrialResult,
    machine: MachineInfo,
    step: bool,
    measured: Sequence[TrialResult] = (),
    tolerance: float = 0.05,
) -> str:
    """'oversubscribed: 2 workers × 1 thread + 2 main-process threads = 4 > 2 usable CPUs (try ...)' when the
    threads that compute at once outnumber the usable CPUs: each worker's intra-op threads (torch's 1 unless
    --worker-threads), and, when a training `step` computes on the CPU beside the loader (--consumer; --step-ms
    sleeps, or runs a GPU kernel, leaving the CPU threads idle), the training process's own, per rank.
    Without a step only extra worker threads count: more single-threaded workers than CPUs is the CPU-bound
    reason's business. A fix the `measured` (finished, repeats merged) trials already tried and found slower is
    not advised: it is said as the fact it is. Else ""."""
    nw, per = trial.config.num_workers, trial.config.worker_threads or 1
    main = (trial.main_threads or 0) if step else 0
    if trial.status != "ok" or (step and trial.main_threads is None) or (not step and per <= 1):
        return ""
    ranks, cpus = max(1, trial.ranks), machine.usable_cpus
    total = ranks * (nw * per + main)
    if total <= cpus:
        return ""
    terms = [f"{nw} worker{_s(nw)} × {per} thread{_s(per)}"] if nw else []
    terms += [f"{main} main-process thread{_s(main)}"] if main else []
    count = " + ".join(terms) if ranks == 1 else f"{ranks} ranks × ({' + '.join(terms)})"
    fit = max(1, cpus // ranks - nw * per)  # what the training process may keep beside its workers
    fixes = [f"torch.set_num_threads({fit}) in the training process"] if main and fit < main else []
    facts = []
    for fix, knob in (("fewer worker threads", "worker_threads"), ("fewer workers", "num_workers")):
        if (knob == "worker_threads" and per <= 1) or (knob == "num_workers" and not nw):
            continue
        slower = _measured_slower(trial, _fewer(trial, measured, knob), tolerance)
        if slower:
            facts.append(f"{fix} measured slower ({slower})")
        else:
            fixes.append(fix)
    text = f"oversubscribed: {count} = {total} > {cpus} usable CPUs"
    text += f" (try {' or '.join(fixes)})" if fixes else ""
    return text + (f", yet {' and '.join(facts)}" if facts else "")


def _fewer(trial: TrialResult, measured: Sequence[TrialResult], knob: str) -> list[TrialResult]:
    """The measured configurations that differ from `trial` only in fewer workers (on its curve) or fewer worker
    threads (None is torch's 1)."""
    c = trial.config
    if knob == "num_workers":
        return [t for t in measured if t.config.num_workers < c.num_workers and on_curve(t.config, curve_key(c))]
    per = c.worker_threads or 1
    same = [t for t in measured if dataclasses.replace(t.config, worker_threads=c.worker_threads) == c]
    return [t for t in same if (t.config.worker_threads or 1) < per]


def _measured_slower(trial: TrialResult, fewer: list[TrialResult], tolerance: float) -> str:
    """'1 worker: 329, 0 workers: 375 vs 486 samples/s' when every one of `fewer` measured slower than `trial` by
    more than their noise band (the fix was tried and lost); '' when none was measured or one kept up."""
    if not fewer or any(at_least_within(sps(t), sps(trial), noise_band(tolerance, t, trial)) for t in fewer):
        return ""
    fewer = sorted(fewer, key=lambda t: (-t.config.num_workers, -(t.config.worker_threads or 1)))
    if all(t.config.num_workers == trial.config.num_workers for t in fewer):
        names = [f"{t.config.worker_threads or 1} thread{_s(t.config.worker_threads or 1)}" for t in fewer]
    else:
        names = [workers(t.config.num_workers) for t in fewer]
    listed = ", ".join(f"{name}: {sps(t):.0f}" for name, t in zip(names, fewer, strict=True))
    return f"{listed} vs {sps(trial):.0f} samples/s"


def _s(n: int) -> str:
    return "" if n == 1 else "s"


def _memory_related(text: str) -> bool:
    return _MEMORY_WORDS.search(text) is not None


def has_cuda(machine: MachineInfo) -> bool:
    """Whether the machine has a GPU to pin memory for (without one, pin_memory=True does nothing)."""
    return bool(machine.gpus)
