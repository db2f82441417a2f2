"""Search strategies: which configuration to measure next, given what has been measured.

The driver asks `next(done)` before each trial until it answers None. `planned()` is the current plan
(for progress displays); an adaptive strategy may grow or shrink it as it learns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from loadertop.core.config import Settings, TrialConfig
from loadertop.core.results import TrialResult


class Planner(Protocol):
    def planned(self) -> tuple[TrialConfig, ...]: ...

    def next(self, done: Sequence[TrialResult]) -> TrialConfig | None: ...


class GridPlanner:
    """Every configuration of the sweep space, in order: the exhaustive baseline."""

    def __init__(self, configs: Sequence[TrialConfig]) -> None:
        self._configs = tuple(configs)

    def planned(self) -> tuple[TrialConfig, ...]:
        return self._configs

    def next(self, done: Sequence[TrialResult]) -> TrialConfig | None:
        return self._configs[len(done)] if len(done) < len(self._configs) else None


def make_planner(settings: Settings, only: Sequence[TrialConfig] | None = None) -> Planner:
    if only:
        return GridPlanner(only)
    return GridPlanner(settings.trial_configs())
