"""What `loadertop.tune` tries next and what it settles on: the sweep's own adaptive planner and recommendation
(engine/verdict/analysis.py `analyze`: the band rule of engine/verdict/band.py, and the sweep's reason), fed with what
the training loop measured. It takes them from the engine's search entry (engine/search/__init__.py).

The job's own configuration is measured first (the loader it built, nothing to switch), and tune switches away from
it only on evidence: another configuration measured, and the pick faster than the job's own beyond the noise band
(engine/verdict/band.py `win_over`). Otherwise it keeps the job's loader and says why, in the words of the command
that started it (`Terms`: tune()'s arguments, or `run --tune`'s budget).

Two phases: the planner climbs num_workers (the user's prefetch_factor and pin_memory) as far as the sweep would,
bisects and repeats the finalists; then the other knobs are tried at the worker count the rule keeps, one at a time,
and again at the new count should a knob move the choice. Trying them at a count chosen before the repeats would
measure them where tune may not stay.

The consumer ceiling (the most the step allows: batch size ÷ step time) comes from the step times measured so far,
so the climb stops once a configuration is within noise of what the training step can take.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass

from loadertop.core.engine.tune_entry import (
    BUDGET,
    TUNE_TERMS,
    AdaptivePlanner,
    Stop,
    Terms,
    UserArgs,
    analyze,
    noise_band,
    pct,
    snippet,
    win_over,
)
from loadertop.core.machine.facts import machine_info
from loadertop.core.machine.gpu import GpuProbe
from loadertop.core.model.config import DEFAULT_PREFETCH, Settings, TrialConfig, adaptive_cap
from loadertop.core.model.figures import at_least_within
from loadertop.core.model.results import Ceiling, MachineInfo, TrialResult

SPAN_SHARE = 1 / 12  # a configuration's measured span, as a share of the budget ...
SPAN_MIN_S, SPAN_MAX_S = 0.5, 4.0  # ... within these bounds ("a few seconds")


@dataclass(frozen=True)
class Choice:
    config: TrialConfig
    samples_per_s: float | None
    reason: str
    snippet: str
    kept: bool = False  # the job's own configuration, kept for want of evidence that another beats it


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
    """The sweep's own cap (64, or 4 per usable CPU on bigger machines): an I/O-bound loader gains far past the
    cores (the sweep's answers reach 32-56 workers), and the climb stops by itself once throughput stops growing,
    at the step's ceiling, or at the memory budget. A cap of 8 on 2 CPUs left tune at 0.75 of the ceiling."""
    return adaptive_cap(usable_cpus)


def span_s(budget_s: float) -> float:
    return min(SPAN_MAX_S, max(SPAN_MIN_S, budget_s * SPAN_SHARE))


class Tuner:
    """The planner's side of tuning: next configuration, results in, the choice out."""

    def __init__(
        self,
        settings: Settings,
        machine: MachineInfo,
        user: UserArgs | None = None,
        *,
        terms: Terms = TUNE_TERMS,
        budget_s: float | None = None,
    ) -> None:
        self.settings = settings
        self.machine = machine
        self.user = user or UserArgs()
        self.terms, self.budget_s = terms, budget_s  # how the advice names the command's options; for the reason
        # The job's own configuration, measured first: what a switch must beat (None: not known, nothing first)
        self.own = self.as_measured(self.user.config) if self.user.config is not None else None
        self._own_first = self.own is not None
        self._asked: Counter[TrialConfig] = Counter()  # how often the planner proposed each configuration
        self.results: list[TrialResult] = []
        self.decisions: list[str] = []  # the planner's notes and the knobs' phase: why each configuration was tried
        self._step_s: float | None = None  # the fastest mean step measured: the consumer ceiling's step
        climb = dataclasses.replace(
            settings,
            prefetch_factors=settings.prefetch_factors[:1],
            pin_memory=settings.pin_memory[:1],
        )  # the other knobs wait for the count the rule keeps
        self.planner = AdaptivePlanner(climb)
        self.planner.setup(machine, ())
        self._climbing = True
        self._pending: TrialConfig | None = None  # chosen by next(), not yet fed back: the budget may end first

    def ceilings(self) -> tuple[Ceiling, ...]:
        if not self._step_s:
            return ()
        bs = self.settings.batch_sizes[0]
        return (Ceiling(bs, bs / self._step_s, note="the training step measured by tune"),)

    def next(self) -> TrialConfig | None:
        self._pending = self._next()
        return self._pending

    def as_measured(self, config: TrialConfig) -> TrialConfig:
        """A job's configuration as tune measures it (workers not kept between epochs, batches in order): the one
        of tune's space with its knobs, else those knobs alone."""
        knobs = ("num_workers", "batch_size", "prefetch_factor", "pin_memory")
        same = (c for c in self.settings.trial_configs() if all(getattr(c, k) == getattr(config, k) for k in knobs))
        found = next(same, None)
        if found is not None:
            return found
        nw = config.num_workers
        method = self.settings.start_methods[0] if nw and self.settings.start_methods else None
        pf = config.prefetch_factor if nw else None
        return TrialConfig(nw, config.batch_size, pf, config.pin_memory, start_method=method)

    def _next(self) -> TrialConfig | None:
        if self._own_first and self.own is not None:
            self._own_first = False
            self.decisions.append(
                f"baseline: the job's own configuration first ({self.own.label()}): a switch must beat it beyond "
                "the noise"
            )
            return self.own
        if self._climbing:
            self.planner.setup(self.machine, self.ceilings())  # the ceiling moves as steps are measured
            config = self._ask_planner()
            if config is not None and self._reuses_own(config):
                config = self._ask_planner()  # the climb reads the job's own run as that rung's
            if config is not None:
                return config
            self._climbing = False
        return self._next_knob()

    def _ask_planner(self) -> TrialConfig | None:
        config = self.planner.next(self.results)
        self.decisions += [f"{s.phase}: {s.message}" for s in self.planner.take_notes()]
        if config is not None:
            self._asked[config] += 1
        return config

    def _reuses_own(self, config: TrialConfig) -> bool:
        """Whether the planner's proposal is a climb's rung that the job's own run, measured first, already is: the
        climb's first proposal of it (a repeat, a duel, must run again), with a finished run to read."""
        trace = self.planner.trace
        climbing = bool(trace) and trace[-1].phase in ("plan", "climb")
        finished = any(t.config == config and t.status == "ok" for t in self.results)
        return config == self.own and self._asked[config] == 1 and climbing and finished

    def _next_knob(self) -> TrialConfig | None:
        """The first configuration not yet measured that differs from the kept one in one knob (prefetch_factor,
        then pin_memory), at the kept worker count; None when each has been measured."""
        kept = self.kept()
        alts = self._knobs_left(kept) if kept is not None else []
        if kept is None or not alts:
            return None
        name, alt = alts[0]
        self.decisions.append(f"knobs: at the kept count ({kept.label()}): try {name}={getattr(alt, name)}")
        return alt

    def _knobs_left(self, kept: TrialConfig) -> list[tuple[str, TrialConfig]]:
        """(knob, configuration) not yet measured that differ from `kept` in that knob alone, in the order tried."""
        return [
            (name, alt)
            for name in ("prefetch_factor", "pin_memory")
            for alt in self.settings.trial_configs()
            if getattr(alt, name) != getattr(kept, name)
            and all(getattr(alt, k) == getattr(kept, k) for k in _FIELDS if k != name)
            and not self._measured(alt)
        ]

    def _unmeasured(self, kept: TrialConfig) -> str:
        """What the budget ended before measuring, for the reason ('' when the plan ran its course): the
        configuration chosen next, the knobs at the kept count."""
        left = [self._pending.label()] if self._pending is not None else []  # (a climb it ended says so itself)
        knobs = list(dict.fromkeys(name for name, alt in self._knobs_left(kept) if alt != self._pending))
        if knobs and (self._climbing or self._pending is not None):
            left.append(f"{' and '.join(knobs)} at {kept.num_workers} workers")
        return ", ".join(left)

    def kept(self) -> TrialConfig | None:
        """What the sweep's rule keeps over what was measured so far."""
        measured = [t.config.num_workers for t in self.results if t.status == "ok"]
        budget_ended = self._climbing and bool(measured) and max(measured) < max(self.settings.workers)
        stop = Stop("", BUDGET, max(measured)).step() if budget_ended else None  # the budget, not the range
        rec = analyze(self.results, self.settings, self.machine, self.ceilings(), stop)[1]
        return rec.config if rec is not None else None

    def _measured(self, config: TrialConfig) -> bool:
        return any(t.config == config for t in self.results)

    def feed(self, result: TrialResult, mean_step_s: float | None) -> None:
        if result.config == self._pending:
            self._pending = None
        self.results.append(dataclasses.replace(result, index=len(self.results)))
        if mean_step_s and mean_step_s > 0 and result.status == "ok":
            self._step_s = min(self._step_s or mean_step_s, mean_step_s)
            ceiling = self.ceilings()[0].samples_per_s
            if ceiling and result.samples_per_s:
                self.results[-1] = dataclasses.replace(
                    self.results[-1], fraction_of_ceiling=result.samples_per_s / ceiling
                )

    def choice(self, fallback: TrialConfig) -> Choice:
        """The sweep's recommendation over what was measured (its rule: the fewest workers surely within the
        noise band of the fastest, repeats merged; and its reason) when it beats the job's own configuration
        (`fallback` where the Tuner was not told it) beyond the noise band; else the job's own, kept, and why."""
        own = self.own or self.as_measured(fallback)
        pick = self._rule_choice()
        why = self._why_kept(own, pick)
        if pick is not None and why is None:
            return pick
        rate = next((t.samples_per_s for t in reversed(self.results) if t.config == own and t.status == "ok"), None)
        reason = f"kept {own.label()}, the job's own: {why}"
        return Choice(own, rate, reason, self._line(own), kept=True)

    def _why_kept(self, own: TrialConfig, pick: Choice | None) -> str | None:
        """Why the job's own configuration stays: too little measured to judge, the rule's own pick, or no win
        beyond the noise. None when the pick replaces it."""
        measured = list(dict.fromkeys(t.config for t in self.results if t.status == "ok"))
        budget = f"the {self.budget_s:g} s budget" if self.budget_s else "the budget"
        more = self.terms.more_budget
        if not measured or pick is None:
            return f"nothing was measured in {budget}; {more} measures the others"
        if own not in measured:
            ran = next((f" (its run: {t.error})" for t in reversed(self.results) if t.config == own), "")
            return f"it was not measured in {budget}{ran}, so nothing can be compared with it; {more} measures it"
        if len(measured) == 1:
            return f"only 1 configuration fit {budget}, nothing to compare it with; {more} measures the others"
        if pick.config == own:
            return pick.reason
        win = win_over(pick.config, own, self.results, self.settings.tolerance)
        if win is None or win.sure:
            return None
        return (
            f"{pick.config.label()} measured {win.samples_per_s:.0f} samples/s against its "
            f"{win.ref_samples_per_s:.0f}, not faster beyond the {pct(win.band)} noise band: a switch must win "
            "beyond the noise"
        )

    def _rule_choice(self) -> Choice | None:
        """The sweep's recommendation over what was measured, with its reason; None when nothing was measured."""
        measured = [t.config.num_workers for t in self.results if t.status == "ok"]
        budget_ended = self._climbing and bool(measured) and max(measured) < max(self.settings.workers)
        stop = Stop("", BUDGET, max(measured)).step() if budget_ended else None  # the budget, not the range
        rec = analyze(self.results, self.settings, self.machine, self.ceilings(), stop, self.terms)[1]
        if rec is None:
            return None
        ceiling = self.ceilings()[0].samples_per_s if self.ceilings() else None
        share = f", {pct(rec.samples_per_s / ceiling)} of what the training step can take" if ceiling else ""
        kept = self.results[rec.trial_index]
        if ceiling and at_least_within(rec.samples_per_s, ceiling, noise_band(self.settings.tolerance, kept)):
            # The climb stopped at the step's ceiling: a wider range would not help, whatever the curve did
            share += " (within noise of its ceiling: more workers cannot make the step faster)"
            quiet = dataclasses.replace(self.terms, wider="")
            rec = analyze(self.results, self.settings, self.machine, self.ceilings(), stop, quiet)[1] or rec
        reason = self._count_reason(rec.config, rec.samples_per_s) or rec.reason
        why = f"{rec.samples_per_s:.0f} samples/s{share}: {reason}"
        if left := self._unmeasured(rec.config):  # the reason's rule held over what was measured, not over all
            why += f"; the budget ended before {left} could be measured ({self.terms.more_budget} measures them)"
        return Choice(rec.config, rec.samples_per_s, why, self._line(rec.config))

    def _count_reason(self, config: TrialConfig, samples_per_s: float | None) -> str | None:
        """When a knob tried at the kept count won (prefetch 4), the sweep's reason over that configuration alone
        would read its one-point curve as "still rising at the largest count tried". The count's reason comes from
        the climb's curve instead, and a clause says what the knob added. None when the climb's knobs were kept."""
        climb = self.planner.settings
        pf, pin = climb.prefetch_factors[0], climb.pin_memory[0]
        if config.num_workers == 0 or (config.prefetch_factor == pf and config.pin_memory == pin):
            return None
        on_climb = [t for t in self.results if t.config.num_workers == 0 or
                    (t.config.prefetch_factor == pf and t.config.pin_memory == pin)]  # fmt: skip
        base = analyze(on_climb, self.settings, self.machine, self.ceilings(), terms=self.terms)[1]
        if base is None or base.config.num_workers != config.num_workers or not samples_per_s:
            return None
        changed = [f"{k}={getattr(config, k)}" for k in ("prefetch_factor", "pin_memory")
                   if getattr(config, k) != getattr(base.config, k)]  # fmt: skip
        return (
            f"{base.reason}; {', '.join(changed)} at {config.num_workers} workers: {samples_per_s:.0f} vs "
            f"{base.samples_per_s:.0f} samples/s (at the same count the rule keeps the lighter in memory, then "
            "the faster)"
        )

    def _line(self, config: TrialConfig) -> str:
        """The snippet: the user's loader with what tune changed. persistent_workers and in_order are theirs (tune
        measures without them and keeps them as they were)."""
        mine = self.user.config
        if mine is not None:
            config = dataclasses.replace(config, persistent_workers=mine.persistent_workers, in_order=mine.in_order)
        return snippet(config, self.machine.default_start_method, user=self.user)


_FIELDS = [f.name for f in dataclasses.fields(TrialConfig)]


def step_message(result: TrialResult, switch_s: float) -> str:
    """One line per measured configuration (the TuneStep's message and the debug log)."""
    if result.status != "ok" or result.samples_per_s is None:
        return f"{result.config.label()}: {result.error or result.status}"
    share = f", {pct(result.fraction_of_ceiling)} of the step's ceiling" if result.fraction_of_ceiling else ""
    return (
        f"{result.config.label()}: {result.samples_per_s:.0f} samples/s{share}, stall "
        f"{pct(result.stall_fraction or 0.0)}, switch {switch_s:.2f} s"
    )
