"""Widen or narrow the swept worker counts (`+`/`-`): a ladder like `auto_workers`, not a free range."""

from __future__ import annotations

from collections.abc import Iterable


def _ladder(upto: int) -> set[int]:
    rungs = {0, 1, 2}
    n = 2
    while n <= upto:
        rungs.update({n, n + n // 2})
        n *= 2
    return {r for r in rungs if r <= upto} | {upto}


def widen(workers: Iterable[int]) -> tuple[int, ...]:
    """Double the top (at least to 2) and add the ladder rungs in between: 0,1,2,4 -> 0,1,2,4,6,8."""
    current = sorted(set(workers)) or [0]
    top = current[-1]
    new_top = max(2, top * 2)
    added = {r for r in _ladder(new_top) if r > top}
    return tuple(sorted(set(current) | added))


def narrow(workers: Iterable[int]) -> tuple[int, ...] | None:
    """Drop the rungs above half the top: 0,1,2,4,6,8 -> 0,1,2,4. None when two values are all that is left."""
    current = sorted(set(workers))
    if len(current) <= 2:
        return None
    top = current[-1]
    kept = [w for w in current if w <= top // 2]
    if len(kept) < 2:
        kept = current[:2]
    return tuple(kept)
