"""Thread workers against process workers at the same worker count (`--worker-method process,thread`): the CPU
each kind kept busy, what the GIL does to the threads, speed and memory (total PSS) side by side."""

from __future__ import annotations

from collections.abc import Sequence

from loadertop.core.engine.verdict.band import noise_band
from loadertop.core.engine.wording import sps
from loadertop.core.model.results import TrialResult

# Thread workers using less than this share of the CPUs they could use: the GIL serialises them.
GIL_HELD_SHARE = 0.75


def counterpart(trial: TrialResult, measured: Sequence[TrialResult]) -> TrialResult | None:
    """The measured trial that differs from `trial` in the worker method only (the other method's knobs that threads
    do not have, start method and persistence, taken as measured)."""
    other = "process" if trial.config.worker_method == "thread" else "thread"
    for t in measured:
        c = t.config
        if c.worker_method != other or t.status != "ok" or not t.samples_per_s:
            continue
        if c.num_workers == trial.config.num_workers and _same_knobs(c, trial.config):
            return t
    return None


def _same_knobs(a: object, b: object) -> bool:
    keep = ("batch_size", "prefetch_factor", "pin_memory", "in_order")
    return all(getattr(a, k) == getattr(b, k) for k in keep)


def method_phrase(
    trial: TrialResult, measured: Sequence[TrialResult], usable_cpus: int, gil: bool, tolerance: float = 0.05
) -> str:
    """'thread workers: 0.9 CPUs busy of 2, the GIL holds them; process workers are 2.1× faster here (2100 samples/s
    with processes vs 1000 with threads; PSS 220 MB with processes vs 130 MB with threads)' for a trial with a
    measured counterpart of the other method at the same worker count; else ''. Within the noise band: 'as fast
    here'."""
    other = counterpart(trial, measured)
    threads = trial if trial.config.worker_method == "thread" else other
    if other is None or threads is None or trial.status != "ok" or not trial.samples_per_s:
        return ""
    procs = other if threads is trial else trial
    nw = trial.config.num_workers
    reach = min(nw, max(1, usable_cpus))
    busy = (threads.cpu_percent or 0.0) / 100.0
    text = f"thread workers: {busy:.1f} CPUs busy of {reach}"
    if not gil:
        text += ", free-threaded Python (no GIL)"
    elif busy < GIL_HELD_SHARE * reach:
        text += ", the GIL holds them"
    ratio = sps(procs) / sps(threads)
    as_fast = abs(ratio - 1.0) <= noise_band(tolerance, threads, procs)
    if as_fast:
        text += "; process and thread workers are as fast here"
    elif ratio > 1.0:
        text += f"; process workers are {ratio:.1f}× faster here"
    else:
        text += f"; thread workers are {1.0 / ratio:.1f}× faster here"
    # The faster method's figures first, as the sentence names it (processes when as fast), each one labelled
    pair = [(procs, "processes"), (threads, "threads")]
    (a, a_name), (b, b_name) = pair if as_fast or ratio > 1.0 else pair[::-1]
    figures = [f"{sps(a):.0f} samples/s with {a_name} vs {sps(b):.0f} with {b_name}"]
    if a.total_pss_mb is not None and b.total_pss_mb is not None:
        figures.append(f"PSS {a.total_pss_mb:.0f} MB with {a_name} vs {b.total_pss_mb:.0f} MB with {b_name}")
    return f"{text} ({'; '.join(figures)})"


def gil_enabled() -> bool:
    """False on a free-threaded Python running without its GIL (3.13t+); True everywhere else."""
    import sys

    check = getattr(sys, "_is_gil_enabled", None)
    return True if check is None else bool(check())
