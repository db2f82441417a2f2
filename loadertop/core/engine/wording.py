"""How the engine's reasons and search notes write their numbers: one style for every sentence."""

from __future__ import annotations

from loadertop.core.model.results import TrialResult


def sps(t: TrialResult) -> float:
    """A trial's samples/s, 0 when not measured (the comparable unit across batch sizes)."""
    return float(t.samples_per_s or 0.0)


def workers(n: int) -> str:
    return f"{n} worker" if n == 1 else f"{n} workers"


def pct(x: float) -> str:
    """0.05 → '5%', 0.025 → '2.5%': a decimal only where it says something."""
    value = x * 100.0
    return f"{value:.0f}%" if abs(value - round(value)) < 0.05 or abs(value) >= 10 else f"{value:.1f}%"


def signed_pct(x: float) -> str:
    value = x * 100.0
    return f"−{abs(value):.0f}%" if value < 0 else f"+{value:.0f}%"
