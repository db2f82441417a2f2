"""Number and text formatting shared by the panes: one place decides how a number reads."""

from __future__ import annotations

from collections.abc import Sequence

_BARS = "▁▂▃▄▅▆▇█"


def rate(value: float | None) -> str:
    """Samples or batches per second: thousands separated, one decimal only when small."""
    if value is None:
        return "—"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}"


def mb(value: float | None, short: bool = False) -> str:
    """Megabytes as MB below a GiB, GB above; `short` drops the space and the B for table cells."""
    if value is None:
        return "—"
    if value >= 1024:
        text = f"{value / 1024:.1f} GB"
    elif value >= 10:
        text = f"{value:.0f} MB"
    else:
        text = f"{value:.1f} MB"
    return text.replace(" ", "").rstrip("B") if short else text


def seconds(value: float | None) -> str:
    if value is None:
        return "—"
    if value < 10:
        return f"{value:.2f}s"
    return f"{value:.0f}s"


def clock(value: float | None) -> str:
    """Elapsed or remaining time as m:ss (h:mm:ss past an hour)."""
    if value is None:
        return "—"
    total = max(0, round(value))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def slope(value: float | None) -> str:
    return "—" if value is None else f"{value:+.1f} MB/min"


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
