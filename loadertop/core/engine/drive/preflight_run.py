"""The sweep's pre-flight, as the driver runs it: the checks said before the first trial (--strict stops there),
the first batch at the top worker count forecast once the first rungs are in, and every forecast checked at the end.
engine/verdict/preflight.py words them; the runner's check (trial/preflight.py) measures what they need."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from loadertop.core.engine.verdict.preflight import (
    before_trials,
    first_batch_checks,
    forecast,
    start_checks,
    strict_error,
)
from loadertop.core.model.config import Settings, TrialConfig, UsageError
from loadertop.core.model.events import Event, Notice
from loadertop.core.model.protocol import Checked
from loadertop.core.model.results import PreflightCheck, TrialResult


class PreflightRun:
    def __init__(self, settings: Settings, emit: Callable[[Event], None]) -> None:
        self.settings = settings
        self._emit = emit
        self.checked: Checked | None = None  # the runner's check: its pre-flight figures
        self.before: tuple[PreflightCheck, ...] = ()  # the checks before the first trial
        self._forecast = False  # the first batch at the top count was forecast from the first rungs

    def before_trials(self, shm_free_mb: float | None, planned: Sequence[TrialConfig]) -> None:
        """/dev/shm and the dataset's pickle, said before the first trial; --strict stops at a warning (exit 2)."""
        if self.checked is not None:
            self.before = before_trials(shm_free_mb, self.checked, self.settings, planned)
        for check in self.before:
            self._emit(Notice(check.level, check.message))
        if self.settings.strict and (error := strict_error(self.before)):
            raise UsageError(error)

    def forecast(self, trials: list[TrialResult], planned: Sequence[TrialConfig], cpus: int) -> None:
        """Once the first rungs are measured: the first batch at the top planned count, to check it against."""
        if self._forecast:
            return
        note = forecast(trials, max(c.num_workers for c in planned), cpus)
        if note is not None:
            self._forecast = True
            self._emit(Notice("info", note))

    def after(self, trials: list[TrialResult], cpus: int) -> tuple[PreflightCheck, ...]:
        """Every check for the result: those before the trials, then the first batches checked (and said)."""
        first_batch = first_batch_checks(trials, cpus) + start_checks(trials, self.checked, cpus)
        for check in first_batch:
            self._emit(Notice(check.level, check.message))
        return self.before + first_batch
