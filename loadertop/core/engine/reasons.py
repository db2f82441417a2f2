"""What bounds a trial, in one phrase from its measured evidence, and how it compares with the best of the sweep.

Categories: epoch-bound (the epoch boundary takes a large share of the time), CPU-bound (all processes together
near the usable CPUs), consumer-bound (the training step hardly waits: the stall is small), main-process-bound (the
training process itself is busy receiving, collating or pinning), I/O-bound (workers mostly blocked), memory-bound
(a guard or the OOM killer stopped it), else loader-bound (more workers may help)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from loadertop.core.engine.band import merge_repeats, noise_band
from loadertop.core.engine.transport import consumer_ceilings, transport_phrase
from loadertop.core.engine.wording import pct
from loadertop.core.model.config import TrialConfig
from loadertop.core.model.results import Ceiling, MachineInfo, TrialResult

CPU_SATURATED = 0.85  # fraction of usable CPUs x 100 at which the loader counts as CPU-bound
CONSUMER_BOUND_STALL = 0.05  # the consumer waits less than this: the loader keeps up
IO_WAIT_WORKER_CPU = 50.0  # percent of one CPU per worker below which busy-stalled workers are waiting on I/O
EPOCH_BOUND_SHARE = 0.2  # share of an epoch spent at its boundary from which the boundary is what bounds a trial
MAIN_PROCESS_BUSY = 90.0  # percent of one CPU: the training process itself is the bottleneck
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
    by_batch = {c.batch_size: c.samples_per_s for c in consumer_ceilings(ceilings)}
    merged = {t.config: t for t in merge_repeats([t for t in trials if t.status == "ok"])}
    peak = max((t.samples_per_s for t in merged.values() if t.samples_per_s), default=None)
    first: dict[TrialConfig, int] = {}
    out = []
    for t in trials:
        ceiling = by_batch.get(t.config.batch_size)
        earlier = first.setdefault(t.config, t.index)
        repeat_of = earlier if earlier != t.index else None
        judged = merged.get(t.config, t) if t.status == "ok" else t
        transport = transport_phrase(judged, ceilings, list(merged.values()), tolerance) if t.status == "ok" else ""
        reason = trial_reason(judged, machine, peak, tolerance, ceiling, transport, cpu_step)
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


def trial_reason(
    trial: TrialResult,
    machine: MachineInfo,
    peak_samples_per_s: float | None,
    tolerance: float = 0.05,
    ceiling: float | None = None,
    transport: str = "",
    cpu_step: bool = False,
) -> str:
    """A short phrase for the results table: what bounds this trial (see the module's categories), its share of
    the consumer's `ceiling`, and how it compares with the best. `transport` is its transport-bound phrase, if any
    (engine/transport.py)."""
    if trial.status != "ok":
        text = trial.error or trial.status
        return f"memory-bound: {text}" if _memory_related(text) and not text.startswith("memory-bound") else text
    phrase = _epoch_bound(trial) or transport or _bound(trial, machine)
    if trial.config.pin_memory and not has_cuda(machine):
        phrase += ", pinning not measured (no CUDA)"
    over = oversubscribed(trial, machine, step=cpu_step)
    if over:
        phrase += f", {over}"
    if ceiling and trial.samples_per_s is not None:
        phrase += f", {pct(trial.samples_per_s / ceiling)} of ceiling"
    if peak_samples_per_s and trial.samples_per_s is not None:
        ratio = trial.samples_per_s / peak_samples_per_s
        if ratio >= 1.0 - 1e-9:
            phrase += ", best"
        elif ratio >= 1.0 - noise_band(tolerance, trial):
            phrase += ", within noise of best"
        else:
            phrase += f", {pct(ratio)} of best"
    return phrase


def _epoch_bound(trial: TrialResult) -> str | None:
    """'epoch-bound (...)' when the epoch boundary takes EPOCH_BOUND_SHARE or more of the time, else None."""
    boundary = _boundary_share(trial)
    if boundary is None or boundary < EPOCH_BOUND_SHARE or trial.epoch_restart_s is None:
        return None
    keep = trial.config.num_workers and not trial.config.persistent_workers
    fix = "; persistent_workers=True keeps them" if keep else ""
    return (
        f"epoch-bound (each {trial.epoch_batches}-batch epoch waits {trial.epoch_restart_s:.2f} s at its "
        f"boundary, {pct(boundary)} of its time{fix})"
    )


def _bound(trial: TrialResult, machine: MachineInfo) -> str:
    """What bounds a finished trial within its steady window: the CPUs, the consumer, the main process, I/O or
    the loader."""
    stall, main = trial.stall_fraction, trial.main_cpu_percent
    if trial.cpu_percent is not None and trial.cpu_percent >= CPU_SATURATED * capacity(machine):
        return f"CPU-bound ({trial.cpu_percent / 100:.1f}/{machine.usable_cpus} CPUs)"
    if stall is None:
        if trial.cpu_percent is not None:
            return f"{trial.cpu_percent / 100:.1f}/{machine.usable_cpus} CPUs"
        return "no CPU or stall data"
    if stall < CONSUMER_BOUND_STALL:
        return f"consumer-bound (stall {pct(stall)})"
    if main is not None and main >= MAIN_PROCESS_BUSY:
        doing = "loading in the training process" if trial.config.num_workers == 0 else "receiving and collating"
        return f"main-process-bound ({doing} at {main:.0f}% CPU, stall {pct(stall)})"
    per_worker = per_worker_cpu(trial)
    if per_worker is not None and per_worker < IO_WAIT_WORKER_CPU:
        return f"I/O-bound (workers at {per_worker:.0f}% CPU each)"
    if trial.config.num_workers == 0 and main is not None and main < IO_WAIT_WORKER_CPU and stall >= 0.5:
        # Mostly loading (a large stall), yet mostly idle: the loading itself waits. (A low CPU with a small stall
        # is just the training step's time.)
        return f"I/O-bound (the training process waits, at {main:.0f}% CPU)"
    return f"loader-bound (stall {pct(stall)})"


def oversubscribed(trial: TrialResult, machine: MachineInfo, step: bool) -> str:
    """'oversubscribed: 2 workers × 1 thread + 2 main-process threads = 4 > 2 usable CPUs (try ...)' when the
    threads that compute at once outnumber the usable CPUs: each worker's intra-op threads (torch's 1 unless
    --worker-threads), and, when a training `step` computes on the CPU beside the loader (--consumer; --step-ms
    sleeps, or runs a GPU kernel, leaving the CPU threads idle), the training process's own, per rank.
    Without a step only extra worker threads count: more single-threaded workers than CPUs is the CPU-bound
    reason's business. Else ""."""
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
    fixes += (["fewer worker threads"] if per > 1 else []) + (["fewer workers"] if nw else [])
    return f"oversubscribed: {count} = {total} > {cpus} usable CPUs (try {' or '.join(fixes)})"


def _s(n: int) -> str:
    return "" if n == 1 else "s"


def _boundary_share(trial: TrialResult) -> float | None:
    """The share of an epoch's time spent at its boundary, for a trial measured over whole epochs."""
    if not trial.epoch_batches or trial.epoch_restart_s is None or not trial.batches_per_s:
        return None
    return min(1.0, trial.epoch_restart_s * trial.batches_per_s / trial.epoch_batches)


def _memory_related(text: str) -> bool:
    return _MEMORY_WORDS.search(text) is not None


def has_cuda(machine: MachineInfo) -> bool:
    """Whether the machine has a GPU to pin memory for (without one, pin_memory=True does nothing)."""
    return bool(machine.gpus)


def capacity(machine: MachineInfo) -> float:
    """The usable CPUs in percent of one CPU, the unit of `cpu_percent`."""
    return max(1, machine.usable_cpus) * 100.0


def per_worker_cpu(t: TrialResult) -> float | None:
    """The workers' CPU (all processes less the main one) per worker, in percent of one CPU."""
    nw = t.config.num_workers
    if nw <= 0 or t.cpu_percent is None:
        return None
    workers_cpu = t.cpu_percent - (t.main_cpu_percent or 0.0) if t.main_cpu_percent is not None else t.cpu_percent
    return max(0.0, workers_cpu) / nw
