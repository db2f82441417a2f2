"""How far a sweep has got, from its event stream: the trial total a face shows, and why it grew.

An adaptive search starts from a plan (the climb's ladder) and adds trials as it learns: a refine midpoint, a knob
tried at the choice, a finalist measured again. Each trial the search chooses is announced by a search Notice
(`Notice.search`, its phase) carrying the trial's index, before the trial is launched; a launch whose total is above
the one shown so far was added by that decision. Every face counts with this one fold, so the TUI's header and the
headless counter say the same thing: "trial 9/9 (8 planned +1 refine)", never a total that grows without a word.
The same fold times the trials on the sweep's clock (its probe ticks), for the time left.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from loadertop.core.engine.wording import clock
from loadertop.core.model.events import (
    Event,
    Notice,
    ProbeSample,
    SweepStarted,
    TrialFinished,
    TrialLaunched,
    TrialStarted,
)

STARTUP_S = 2.0  # a trial's start-up beyond its budget, guessed until one has finished


@dataclass
class TrialCount:
    planned: int = 0  # the plan when the sweep started
    total: int = 0  # the plan so far: never below the trials launched
    added: dict[str, int] = field(default_factory=dict)  # trials past the first plan, by the phase that chose them
    _phases: dict[int, str] = field(default_factory=dict)  # trial index -> the phase of the decision that chose it
    t: float = 0.0  # the sweep's clock: its latest probe tick
    finished_at: list[float] = field(default_factory=list)  # the clock at each trial's end
    launched_at: float | None = None  # the clock when the running trial was launched (None between trials)
    trial_seconds: float = 8.0  # the sweep's trial budget

    def apply(self, event: Event) -> bool:
        """Fold one event in; True when the counter's text changed."""
        if isinstance(event, SweepStarted):
            self.planned = self.total = len(event.planned)
            self.added, self._phases = {}, {}
            self.t, self.finished_at, self.trial_seconds = 0.0, [], event.settings.trial_seconds
            self.launched_at = None
            return True
        if isinstance(event, ProbeSample):
            self.t = max(self.t, event.t)
            return False
        if isinstance(event, Notice) and event.search is not None and event.index is not None:
            self._phases[event.index] = event.search
            return False
        if isinstance(event, TrialLaunched | TrialStarted):
            if self.launched_at is None:
                self.launched_at = self.t
            return self._grow(event.index, event.total)
        if isinstance(event, TrialFinished):
            self.finished_at.append(self.t)
            self.launched_at = None
            # A trial reported without a launch: one the memory guard or the DataLoader's knob rules skipped.
            unlaunched = "skipped" if event.result.status == "skipped" else "search"
            return self._grow(event.result.index, event.result.index + 1, unlaunched)
        return False

    def _grow(self, index: int, total: int, unknown: str = "search") -> bool:
        total = max(total, index + 1)
        if total <= self.total:
            return False
        phase = self._phases.get(index, unknown)
        self.added[phase] = self.added.get(phase, 0) + total - self.total
        self.total = total
        return True

    def eta(self) -> float | None:
        """Seconds left: the mean finished trial's time (before one has finished, the trial budget and STARTUP_S)
        for each trial to go, less the time the running one has had since its launch (the setup before the first
        trial, the dataset's build and check, is not a trial's). None when the running trial has outlasted that
        guess: how long it has left is not known."""
        remaining = self.total - len(self.finished_at)
        if remaining <= 0:
            return 0.0
        done = self.finished_at[-1] if self.finished_at else 0.0
        per_trial = done / len(self.finished_at) if self.finished_at else self.trial_seconds + STARTUP_S
        if self.launched_at is None:
            return per_trial * remaining
        running = per_trial - (self.t - self.launched_at)
        return None if running <= 0 else running + per_trial * (remaining - 1)

    def left(self) -> str:
        """The time left as a face says it: '~1:05 left', or what is known once the running trial outlasts its
        guess ('last trial over its estimate', '~0:40 left after this trial') rather than a false '~0:00 left'."""
        eta = self.eta()
        if eta is not None:
            return f"~{clock(eta)} left"
        after = self.total - len(self.finished_at) - 1
        if after <= 0:
            return "last trial, over its estimate"
        per_trial = self.finished_at[-1] / len(self.finished_at) if self.finished_at else self.trial_seconds + STARTUP_S
        return f"~{clock(per_trial * after)} left after this trial"

    def why(self) -> str:
        """'8 planned +1 refine +3 repeat' once the search has added trials, else ''."""
        if not self.added:
            return ""
        return " ".join([f"{self.planned} planned", *(f"+{n} {phase}" for phase, n in self.added.items())])

    def ran(self, trials: int) -> str:
        """After the sweep: '5 planned +10 repeat; 3 planned not needed' for `trials` run, the parts adding up to
        them (the search skips rungs of its first plan that it learned it did not need), else ''."""
        if not self.added:
            return ""
        extra = sum(self.added.values())
        kept = max(0, trials - extra)
        parts = [f"{kept} planned", *(f"+{n} {phase}" for phase, n in self.added.items())]
        skipped = self.planned - kept
        return " ".join(parts) + (f"; {skipped} planned not needed" if skipped > 0 else "")

    def counter(self, index: int) -> str:
        """'3/8', or '9/9 (8 planned +1 refine)': trial `index` (0-based) of the total so far, and why it grew."""
        shown = f"{index + 1}/{max(self.total, index + 1)}"
        why = self.why()
        return f"{shown} ({why})" if why else shown
