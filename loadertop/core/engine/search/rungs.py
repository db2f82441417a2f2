"""The rungs of the adaptive search's ladder: worker counts from the sweep's range, doubling from 0 (0, 1, 2, 4, ...),
always ending on the top of the range."""

from __future__ import annotations

from collections.abc import Sequence

from loadertop.core.model.results import TrialResult


def ladder(counts: Sequence[int], start: int, top: int) -> list[int]:
    """The rungs from `start` up to `top`: each the first count at or past double the one below."""
    rungs = [start]
    n = start
    while True:
        nxt = at_least(counts, 1 if n == 0 else 2 * n, above=n)
        if nxt is None or nxt > top:
            break
        rungs.append(nxt)
        n = nxt
    if rungs[-1] < top:
        rungs.append(top)
    return rungs


def at_least(counts: Sequence[int], target: int, above: int) -> int | None:
    """The smallest count at or past `target` and above `above`; None when the range ends first."""
    options = [m for m in counts if m >= target and m > above]
    return min(options) if options else None


def top_above(counts: Sequence[int], n: int) -> int | None:
    """The top of the range when it lies above `n`."""
    options = [m for m in counts if m > n]
    return max(options) if options else None


def memory_cap(n: int, t: TrialResult, budget_mb: float | None) -> int | None:
    """The most workers whose projected memory (rung `n`'s total plus its per-worker cost for each added worker)
    fits in the budget; None when either is unknown."""
    if budget_mb is None or n == 0 or t.total_pss_mb is None:
        return None
    per_worker = sum(t.worker_uss_mb) / len(t.worker_uss_mb) if t.worker_uss_mb else None
    if not per_worker or per_worker <= 0:
        return None
    return n + int((budget_mb - t.total_pss_mb) // per_worker)


def plan_rungs(counts: Sequence[int], start: int, cpus: int | None, fits: int | None) -> list[int]:
    """The rungs a plan lists from `start`: the ladder, but none past the memory budget (`fits`: the most workers
    it allows), and past the usable CPUs no more than one rung ahead. An I/O-bound loader may climb far past the
    cores, but only while the rung it measured paid: the plan shows the next rung when the climb chooses it,
    rather than promising rungs a CPU-bound loader never reaches."""
    rungs = [r for r in ladder(counts, start, counts[-1]) if fits is None or r <= fits or r == start]
    if cpus:
        past = next((i for i, r in enumerate(rungs) if r > cpus), None)
        if past is not None:
            rungs = rungs[: past + 1]
    return rungs
