"""The epoch boundary as a cost: what a trial's restart takes of each epoch, whether persistent workers are worth
measuring against it, and how the reasons say it.

Without persistent_workers every epoch shuts its workers down and starts fresh ones: each pays its start-up again
(the process, the dataset handed over, every import its first sample makes, the prefetch buffer refilled). The trial
measures that wait as `epoch_restart_s` (trial/measure.py: the wait for the next epoch's first batch). Its share of an
epoch is that wait against the epoch's own time; when it is beyond the noise band, the same worker counts with
persistent_workers=True could be faster by more than the noise, so the search measures them (search/persist.py)."""

from __future__ import annotations

from loadertop.core.engine.verdict.band import noise_band
from loadertop.core.engine.wording import pct, seconds, workers
from loadertop.core.model.results import TrialResult


def restart_share(trial: TrialResult) -> float | None:
    """The share of an epoch's time spent at its boundary (its restart against its batches at the trial's rate);
    None when the trial measured no epoch length or no boundary."""
    if not trial.epoch_batches or trial.epoch_restart_s is None or not trial.batches_per_s:
        return None
    return min(1.0, trial.epoch_restart_s * trial.batches_per_s / trial.epoch_batches)


def restarts(trial: TrialResult) -> bool:
    """Whether each epoch starts the trial's workers afresh: process workers without persistent_workers."""
    c = trial.config
    return c.num_workers > 0 and not c.persistent_workers and c.worker_method == "process"


def restart_costs(trial: TrialResult, tolerance: float) -> bool:
    """Whether the trial's epoch boundary takes a share of its epoch beyond the noise band (with or without
    persistent workers): the figure is then one to show."""
    share = restart_share(trial)
    return share is not None and share > noise_band(tolerance, trial)


def worth_persisting(trial: TrialResult, tolerance: float) -> bool:
    """Whether persistent workers could beat this finished trial by more than the noise: it restarts its workers
    every epoch and that restart takes a share of the epoch beyond the noise band."""
    return trial.status == "ok" and restarts(trial) and restart_costs(trial, tolerance)


def restart_phrase(trial: TrialResult) -> str:
    """'each epoch restarts 2 workers in 6.30 s, 41% of its time' (or, with persistent workers, what the boundary
    still waits), or '' when the boundary was not measured."""
    share = restart_share(trial)
    if share is None or trial.epoch_restart_s is None:
        return ""
    wait, of = seconds(trial.epoch_restart_s), f"{pct(share)} of its time"
    if restarts(trial):
        return f"each epoch restarts {workers(trial.config.num_workers)} in {wait}, {of}"
    return f"each {trial.epoch_batches}-batch epoch waits {wait} at its boundary, {of}"


# What a restart re-pays, said beside a restart's cost in the recommendation
REPAY = "each fresh worker pays its start-up again (its process, the dataset, every import its first sample makes)"
