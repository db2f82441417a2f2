"""What `loadertop.tune` tries next and what it settles on: the sweep's own adaptive planner and recommendation
rule, fed with what the training loop measured.

The consumer ceiling (the most the step allows: batch size ÷ step time) comes from the step times measured so far,
so the climb stops once a configuration is within noise of what the training step can take.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from loadertop.core.engine.analysis import snippet
from loadertop.core.engine.band import Noise, choose
from loadertop.core.engine.search import AdaptivePlanner
from loadertop.core.engine.wording import pct, sps
from loadertop.core.machine.facts import machine_info
from loadertop.core.machine.gpu import GpuProbe
from loadertop.core.model.config import DEFAULT_PREFETCH, Settings, TrialConfig, adaptive_cap
from loadertop.core.model.results import Ceiling, MachineInfo, TrialResult

SPAN_SHARE = 1 / 12  # a configuration's measured span, as a share of the budget ...
SPAN_MIN_S, SPAN_MAX_S = 0.5, 4.0  # ... within these bounds ("a few seconds")


@dataclass(frozen=True)
class Choice:
    config: TrialConfig
    samples_per_s: float | None
    reason: str
    snippet: str


def read_machine() -> MachineInfo:
    probe = GpuProbe()
    try:
        return machine_info(probe)
    finally:
        probe.close()


def tune_settings(
    user: TrialConfig, machine: MachineInfo, max_workers: int | None, tolerance: float, cuda: bool
) -> Settings:
    """The space tune searches: num_workers 0..max_workers at the user's batch size; prefetch_factor the user's
    and one more; pin_memory both ways only where a GPU makes it matter. Workers never persist while tuning."""
    cap = max_workers if max_workers is not None else default_max_workers(machine.usable_cpus)
    prefetch = user.prefetch_factor or DEFAULT_PREFETCH
    other = 4 if prefetch != 4 else 2
    pins = (user.pin_memory, not user.pin_memory) if cuda else (False,)
    return Settings(
        workers=tuple(range(0, max(0, cap) + 1)),
        batch_sizes=(user.batch_size,),
        prefetch_factors=(prefetch, other),
        pin_memory=pins,
        persistent_workers=(False,),
        start_methods=(user.start_method or machine.default_start_method,),
        tolerance=tolerance,
        search="adaptive",
    )


def default_max_workers(usable_cpus: int) -> int:
    """4 per usable CPU, at least 8 (I/O-bound loaders gain past the cores), at most the sweep's own cap."""
    return min(adaptive_cap(usable_cpus), max(8, 4 * usable_cpus))


def span_s(budget_s: float) -> float:
    return min(SPAN_MAX_S, max(SPAN_MIN_S, budget_s * SPAN_SHARE))


class Tuner:
    """The planner's side of tuning: next configuration, results in, the choice out."""

    def __init__(self, settings: Settings, machine: MachineInfo) -> None:
        self.settings = settings
        self.machine = machine
        self.planner = AdaptivePlanner(settings)
        self.results: list[TrialResult] = []
        self._step_s: float | None = None  # the fastest mean step measured: the consumer ceiling's step
        self.planner.setup(machine, ())

    def ceilings(self) -> tuple[Ceiling, ...]:
        if not self._step_s:
            return ()
        bs = self.settings.batch_sizes[0]
        return (Ceiling(bs, bs / self._step_s, note="the training step measured by tune"),)

    def next(self) -> TrialConfig | None:
        self.planner.setup(self.machine, self.ceilings())  # the ceiling moves as steps are measured
        return self.planner.next(self.results)

    def feed(self, result: TrialResult, mean_step_s: float | None) -> None:
        self.results.append(dataclasses.replace(result, index=len(self.results)))
        if mean_step_s and mean_step_s > 0 and result.status == "ok":
            self._step_s = min(self._step_s or mean_step_s, mean_step_s)
            ceiling = self.ceilings()[0].samples_per_s
            if ceiling and result.samples_per_s:
                self.results[-1] = dataclasses.replace(
                    self.results[-1], fraction_of_ceiling=result.samples_per_s / ceiling
                )

    def notes(self) -> list[str]:
        return [step.message for step in self.planner.take_notes()]

    def choice(self, fallback: TrialConfig) -> Choice:
        """The sweep's rule over what was measured (the fewest workers within the noise band of the fastest,
        repeats merged); the user's own configuration when nothing was."""
        chosen = choose(self.results, self.settings.tolerance)
        if chosen is None:
            return Choice(
                fallback, None, "nothing was measured in the budget: kept your configuration", self._line(fallback)
            )
        best, rec = chosen
        band = Noise.of(self.results, self.settings.tolerance).band(rec, best)  # the band the choice used
        ceiling = self.ceilings()[0].samples_per_s if self.ceilings() else None
        share = f", {pct(sps(rec) / ceiling)} of what the training step can take" if ceiling else ""
        if rec.config == best.config:
            why = f"the fastest ({sps(rec):.0f} samples/s{share}), nothing cheaper within the {pct(band)} noise band"
        else:
            why = (
                f"{sps(rec):.0f} samples/s{share}: the fewest workers within the {pct(band)} noise band of the "
                f"fastest ({best.config.label()}, {sps(best):.0f})"
            )
        return Choice(rec.config, rec.samples_per_s, why, self._line(rec.config))

    def _line(self, config: TrialConfig) -> str:
        return snippet(config, self.machine.default_start_method)


def step_message(result: TrialResult, switch_s: float) -> str:
    """One line per measured configuration (the TuneStep's message and the debug log)."""
    if result.status != "ok" or result.samples_per_s is None:
        return f"{result.config.label()}: {result.error or result.status}"
    share = f", {pct(result.fraction_of_ceiling)} of the step's ceiling" if result.fraction_of_ceiling else ""
    return (
        f"{result.config.label()}: {result.samples_per_s:.0f} samples/s{share}, stall "
        f"{pct(result.stall_fraction or 0.0)}, switch {switch_s:.2f} s"
    )
