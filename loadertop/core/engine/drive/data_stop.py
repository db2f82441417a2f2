"""Stop a sweep whose data fails in every configuration: that is bad input, not a measurement.

A dataset that returns PIL images without a transform fails every trial in default_collate; running the rest of
the sweep only prints the same TypeError again and ends with no recommendation. Once two attempts (the ceiling's
batch or a trial) have raised the same error from the user's code, and nothing has finished, the sweep stops with
a DataError (a UsageError: one line with the fix, exit code 2). Failures a smaller configuration would avoid (the
memory guard, the OOM killer, /dev/shm, open files) and failures without an exception (a hang, a signal) never
count: a smaller configuration may still run.

A sweep that ends with no trial finished and a failure on the data is a DataError too (`finish`), however the
failures were worded: the errors of two corrupt files, or of one file met at different places, differ, and the
sweep still has nothing to recommend. No run folder is left (engine/drive/driver.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from loadertop.core.datasets.fixes import bad_data, is_resource, same_error
from loadertop.core.model.config import DataError
from loadertop.core.model.results import Ceiling, TrialResult

_NOT_MEASURED = "not measured ("  # engine/drive/ceiling_requests.py: how a ceiling that failed says why


class SameFailure:
    """Watches the ceiling and each trial; `trial` raises DataError at the first repeat of a data failure, `finish`
    when the sweep ends with none finished and a failure on the data."""

    def __init__(self) -> None:
        self.finished = False  # a trial measured: the data works in some configuration
        self._seen: dict[str, str] = {}  # the error without where it happened -> who met it first
        self._first: tuple[str, int] | None = None  # the first data failure: its error, its trial's number

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
        if self._first is None:
            self._first = (raised, trial.index + 1)  # with its place: the sample and the file, where known
        key = same_error(raised)
        first = self._seen.setdefault(key, f"trial {trial.index + 1}")
        if first != f"trial {trial.index + 1}":
            where = f"{first} and trial {trial.index + 1} fail the same way, so every configuration would"
            raise DataError(bad_data(key, where), key)

    def finish(self, trials: Sequence[TrialResult]) -> None:
        """At the end of a sweep that was not stopped: DataError when no trial (of the whole result, a row rerun's
        folded in) finished and one failed on the data."""
        if self._first is None or any(t.status == "ok" for t in trials):
            return
        error, number = self._first
        failed = sum(t.status == "failed" for t in trials)
        trials_text = f"{failed} trial{'s' if failed != 1 else ''}"
        where = f"every configuration failed ({trials_text}, none finished), trial {number} on the data"
        raise DataError(bad_data(error, where), same_error(error))
