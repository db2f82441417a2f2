"""Stop a sweep whose data fails the same way in every configuration: that is bad input, not a measurement.

A dataset that returns PIL images without a transform fails every trial in default_collate; running the rest of
the sweep only prints the same TypeError again and ends with no recommendation. Once two attempts (the ceiling's
batch or a trial) have raised the same error from the user's code, and nothing has finished, the sweep stops with
a DataError (a UsageError: one line with the fix, exit code 2). Failures a smaller configuration would avoid (the
memory guard, the OOM killer, /dev/shm, open files) and failures without an exception (a hang, a signal) never
count: a smaller configuration may still run.
"""

from __future__ import annotations

from loadertop.core.datasets.fixes import bad_data, is_resource, same_error
from loadertop.core.model.config import DataError
from loadertop.core.model.results import Ceiling, TrialResult

_NOT_MEASURED = "not measured ("  # engine/drive/ceiling_requests.py: how a ceiling that failed says why


class SameFailure:
    """Watches the ceiling and each trial; `trial` raises DataError at the first repeat of a data failure."""

    def __init__(self) -> None:
        self.finished = False  # a trial measured: the data works in some configuration
        self._seen: dict[str, str] = {}  # the error without where it happened -> who met it first

    def ceilings(self, ceilings: tuple[Ceiling, ...]) -> None:
        for ceiling in ceilings:
            if ceiling.kind != "transport" and ceiling.note.startswith(_NOT_MEASURED):
                self._seen.setdefault(same_error(ceiling.note[len(_NOT_MEASURED) : -1]), "the ceiling's batch")
                return

    def trial(self, trial: TrialResult, raised: str | None) -> None:
        """`raised`: what the trial's own code raised (its Failed message), None when it did not raise."""
        if trial.status == "ok":
            self.finished = True
        if trial.status != "failed" or self.finished or not raised or trial.error != raised or is_resource(raised):
            return
        key = same_error(raised)
        first = self._seen.setdefault(key, f"trial {trial.index + 1}")
        if first != f"trial {trial.index + 1}":
            where = f"{first} and trial {trial.index + 1} fail the same way, so every configuration would"
            raise DataError(bad_data(key, where), key)
