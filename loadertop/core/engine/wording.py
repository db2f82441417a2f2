"""How loadertop writes its numbers: the one formatter set of every face and of the engine's own sentences.

The faces (headless, the TUI, `attach`) print a figure only through these, so a not-measured figure reads NONE
everywhere and samples/s reads the same in the table, the panes and the reasons."""

from __future__ import annotations

from collections.abc import Sequence

from loadertop.core.model.figures import mean_of
from loadertop.core.model.results import TrialResult


def sps(t: TrialResult) -> float:
    """A trial's samples/s, 0 when not measured (the comparable unit across batch sizes)."""
    return float(t.samples_per_s or 0.0)


def workers(n: int) -> str:
    return f"{n} worker" if n == 1 else f"{n} workers"


NONE = "–"  # a figure not measured, in every face


def num(value: float | None, digits: int = 0, unit: str = "") -> str:
    """The one number format: fixed digits, no separators, NONE when not measured."""
    return NONE if value is None else f"{value:.{digits}f}{unit}"


def rate(value: float | None) -> str:
    """samples/s or batches/s: whole, without separators (1234, as every reason writes it); one decimal below 10
    (4.5 batches/s of large batches)."""
    if value is None:
        return NONE
    return num(value, 1 if abs(value) < 10 else 0)


def pct(fraction: float | None, *, signed: bool = False) -> str:
    """The one percent format: whole percents from 10% or when whole (5%, 100%), one decimal below (0.8%)."""
    if fraction is None:
        return NONE
    value = fraction * 100.0
    digits = 0 if abs(value) >= 10 or abs(value - round(value)) < 0.05 else 1
    value = round(value, digits)
    sign = ("+" if value >= 0 else "−") if signed else ("−" if value < 0 else "")
    return f"{sign}{abs(value):.{digits}f}%"


def percent(value: float | None) -> str:
    """A figure already in percent (CPU as percent of one CPU, GPU utilization): whole, '%' after it."""
    return num(value, 0, "%")


def utilization(now: float | None, values: Sequence[float], *, scale: float = 1.0) -> str:
    """A utilization now, then its mean and peak over `values` (scaled by `scale` into percent), fixed width:
    ' 78% avg  80% max  91%'; NONE where nothing was read."""
    mean = (mean_of(values) or 0.0) * scale if values else None
    peak = max(values) * scale if values else None
    now = None if now is None else now * scale
    return f"{percent(now):>4} avg {percent(mean):>4} max {percent(peak):>4}"


def mb(value: float | None, *, short: bool = False) -> str:
    """Megabytes with their unit: MB below a GiB (one decimal below 10), GB above; `short` ('2.0G', '512M') for
    narrow cells. A table's MB column prints `num` under its header instead."""
    if value is None:
        return NONE
    text = f"{value / 1024:.1f} GB" if value >= 1024 else f"{value:.{0 if value >= 10 else 1}f} MB"
    return text.replace(" ", "").rstrip("B") if short else text


def slope(value: float | None, err: float | None = None) -> str:
    """A worker's USS growth: '+1.2 MB/min', with its standard error '+1.2±0.3 MB/min'."""
    if value is None:
        return NONE
    return f"{value:+.1f}±{err:.1f} MB/min" if err is not None else f"{value:+.1f} MB/min"


def seconds(value: float | None) -> str:
    """A short duration (the first batch, an epoch's restart): '0.15 s', '12 s' from 10 s."""
    if value is None:
        return NONE
    return num(value, 2 if value < 10 else 0, " s")


def clock(value: float | None) -> str:
    """Elapsed or remaining time as m:ss (h:mm:ss past an hour)."""
    if value is None:
        return NONE
    total = max(0, round(value))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def duration_text(value: float) -> str:
    """A long duration in words: '1 h 10 min', '25 min', '40 s'."""
    if value < 60:
        return f"{max(0, round(value))} s"
    minutes = round(value / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def signed(x: float) -> str:
    """A signed share with one decimal, for the search trace: +3.2%, −16.9%."""
    return f"{'+' if x >= 0 else '−'}{abs(x) * 100:.1f}%"


def cpu_text(t: TrialResult, cpus: int | None) -> str:
    """A trial's CPU use (of `cpus`) and stall, for the search trace: " (CPU 1.4/2, stall 12%)"."""
    if t.cpu_percent is None:
        return ""
    of = f"/{cpus}" if cpus else ""
    return f" (CPU {t.cpu_percent / 100:.1f}{of}, stall {pct(t.stall_fraction or 0.0)})"
