"""What the driver asks of a search, and the two plain planners: the grid (every configuration) and a row rerun.

The driver asks `next(done)` before each trial until it answers None. `planned()` is the current plan (for progress
displays); an adaptive strategy may grow or shrink it as it learns. `setup()` hands the planner the machine and the
consumer's ceiling before the first trial; `take_notes()` returns its decisions since the last call, one line each,
so the driver can put them in the event stream. `reruns_rows` says the sweep measures a few rows of a previous
result again: its conclusion is that result with those rows replaced (engine/verdict/rerun.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from loadertop.core.model.config import TrialConfig
from loadertop.core.model.results import Ceiling, MachineInfo, SearchStep, TrialResult


class Planner(Protocol):
    reruns_rows: bool

    @property
    def trace(self) -> list[SearchStep]: ...

    def planned(self) -> tuple[TrialConfig, ...]: ...

    def next(self, done: Sequence[TrialResult]) -> TrialConfig | None: ...

    def setup(self, machine: MachineInfo, ceilings: Sequence[Ceiling]) -> None: ...

    def take_notes(self) -> list[SearchStep]: ...

    def decision(self) -> tuple[float | None, float | None]:
        """For the configuration `next` just gave: the (below, above) samples/s beyond which its trial may stop
        early, its decision made (TrialRequest.decide_below/above); (None, None) when it must run its course."""
        ...

    def keep(self) -> bool:
        """Whether the configuration `next` just gave will be measured again soon (a finalist): its trial then
        keeps its workers, idle, for that run (TrialRequest.park)."""
        ...


class GridPlanner:
    """Every configuration of the sweep space, in order: the exhaustive baseline."""

    reruns_rows = False

    def __init__(self, configs: Sequence[TrialConfig]) -> None:
        self._configs = tuple(configs)
        self.trace: list[SearchStep] = []
        self._read = 0

    def planned(self) -> tuple[TrialConfig, ...]:
        return self._configs

    def next(self, done: Sequence[TrialResult]) -> TrialConfig | None:
        return self._configs[len(done)] if len(done) < len(self._configs) else None

    def setup(self, machine: MachineInfo, ceilings: Sequence[Ceiling]) -> None:
        pass

    def take_notes(self) -> list[SearchStep]:
        notes = self.trace[self._read :]
        self._read = len(self.trace)
        return notes

    def decision(self) -> tuple[float | None, float | None]:
        return None, None  # every grid point is a reference: measured to the end

    def keep(self) -> bool:
        return False


class RowRerun(GridPlanner):
    """A row rerun (`Sweep(settings, previous=..., only=[...])`): the given configurations measured again, each
    noted in the search trace so the previous trace reads on with what the rerun added."""

    reruns_rows = True

    def __init__(self, configs: Sequence[TrialConfig]) -> None:
        super().__init__(configs)
        for config in dict.fromkeys(self._configs):
            self.trace.append(
                SearchStep("rerun", f"{config.label()} measured again at the user's request", config.label())
            )
