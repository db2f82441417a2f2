"""What only a terminal draws: sparklines, the no-GPU line, a worker list. Every figure is printed through the
engine's formatters (loadertop.core.engine: NONE, rate, pct, mb, slope, seconds, clock, ...)."""

from __future__ import annotations

from collections.abc import Sequence

_BARS = "▁▂▃▄▅▆▇█"


def spark(
    values: Sequence[float],
    width: int,
    *,
    lo: float | None = None,
    hi: float | None = None,
    min_range: float = 0.0,
) -> str:
    """The last `width` values as block characters, right-aligned.

    The scale is the visible window's min..max (widened to `min_range`, so noise does not look like
    a climb) unless `lo`/`hi` pin it. Callers print the absolute numbers beside it.
    """
    if width <= 0:
        return ""
    tail = list(values)[-width:]
    if not tail:
        return " " * width
    low = min(tail) if lo is None else lo
    high = max(tail) if hi is None else hi
    if high - low < min_range:
        mid = (high + low) / 2
        low, high = mid - min_range / 2, mid + min_range / 2
        if lo is not None and low < lo:
            low, high = lo, lo + min_range
    span = high - low
    chars = []
    for v in tail:
        level = 0 if span <= 0 else round((min(max(v, low), high) - low) / span * (len(_BARS) - 1))
        chars.append(_BARS[level])
    return " " * (width - len(chars)) + "".join(chars)


def no_gpu_line(reason: str | None) -> str:
    """One line that says why there is no GPU pane: 'no NVIDIA GPU: NVML library not found'."""
    text = (reason or "no GPU reported").strip()
    if text.lower().startswith("unavailable:"):
        text = text.split(":", 1)[1].strip()
    if text.lower().startswith("no nvidia gpu"):
        return text
    return f"no NVIDIA GPU: {text}"


def worker_list(workers: tuple[int, ...]) -> str:
    """`0,1,2,3,4,8` → `0-4,8`: a sweep over 0..64 must not take three header lines."""
    runs: list[list[int]] = []
    for n in sorted(workers):
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ",".join(map(str, r)) for r in runs)
