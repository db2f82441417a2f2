"""How the engine's reasons and search notes write their numbers: one style for every sentence."""

from __future__ import annotations

from loadertop.core.model.results import TrialResult


def sps(t: TrialResult) -> float:
    """A trial's samples/s, 0 when not measured (the comparable unit across batch sizes)."""
    return float(t.samples_per_s or 0.0)


def workers(n: int) -> str:
    return f"{n} worker" if n == 1 else f"{n} workers"


NONE = "–"  # a figure not measured, in every face


def pct(fraction: float | None, *, signed: bool = False) -> str:
    """The one percent format: whole percents from 10% or when whole (5%, 100%), one decimal below (0.8%)."""
    if fraction is None:
        return NONE
    value = fraction * 100.0
    digits = 0 if abs(value) >= 10 or abs(value - round(value)) < 0.05 else 1
    value = round(value, digits)
    sign = ("+" if value >= 0 else "−") if signed else ("−" if value < 0 else "")
    return f"{sign}{abs(value):.{digits}f}%"


def signed(x: float) -> str:
    """A signed share with one decimal, for the search trace: +3.2%, −16.9%."""
    return f"{'+' if x >= 0 else '−'}{abs(x) * 100:.1f}%"


def cpu_text(t: TrialResult, cpus: int | None) -> str:
    """A trial's CPU use (of `cpus`) and stall, for the search trace: " (CPU 1.4/2, stall 12%)"."""
    if t.cpu_percent is None:
        return ""
    of = f"/{cpus}" if cpus else ""
    return f" (CPU {t.cpu_percent / 100:.1f}{of}, stall {pct(t.stall_fraction or 0.0)})"
