"""A row rerun's whole picture: the previous result with the rerun rows replaced, ready to be concluded again.

A row rerun (`Sweep(settings, previous=result, only=[configs])`) measures a few configurations again. Its
conclusion must judge every row, not just the rerun ones, and keep what the rerun did not measure anew: the
ceilings, the search trace, whether the dataset is iterable (the --ranks snippet shards with a DistributedSampler
only when it is not). A plain `previous` (a full rerun, --compare) is only a baseline and goes through none of this.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.results import Ceiling, SearchStep, SweepResult, TrialResult


@dataclass(frozen=True)
class Evidence:
    """What a sweep's conclusion is drawn from (engine/verdict/outcome.py `conclude`)."""

    trials: tuple[TrialResult, ...]
    settings: Settings
    ceilings: tuple[Ceiling, ...]
    search_trace: tuple[SearchStep, ...]
    iterable: bool


def fold_rerun(previous: SweepResult, rerun: Evidence) -> Evidence:
    """The previous result with the rerun's trials in place of its rows of the same configurations.

    Settings stay the previous ones: they describe the sweep's space and most of its rows (a row rerun only measures
    harder). Ceilings are the rerun's fresh ones where it measured them, else the previous'. The trace reads on
    from the previous one with what the rerun added."""
    return Evidence(
        trials=tuple(merge_trials(previous.trials, rerun.trials)),
        settings=previous.settings,
        ceilings=merge_ceilings(previous.ceilings, rerun.ceilings),
        search_trace=(*previous.search_trace, *rerun.search_trace),
        iterable=rerun.iterable or previous.iterable,
    )


def merge_trials(previous: Sequence[TrialResult], rerun: Sequence[TrialResult]) -> list[TrialResult]:
    """Every row once: a configuration the rerun measured takes the place of its first previous row (all its runs
    together, its previous runs dropped); the others keep their order and runs; a configuration new to the table goes
    last. Indexes are renumbered in that order, so a repeat still follows the run it repeats. A configuration the
    rerun did not finish (cancelled before it ended) keeps its previous rows."""
    fresh: dict[TrialConfig, list[TrialResult]] = {}
    for t in rerun:
        fresh.setdefault(t.config, []).append(t)
    out: list[TrialResult] = []
    for t in previous:
        if t.config not in fresh:
            out.append(t)
        elif t.config not in {o.config for o in out}:
            out.extend(fresh[t.config])
    placed = {t.config for t in out}
    out.extend(t for config, runs in fresh.items() if config not in placed for t in runs)
    return [dataclasses.replace(t, index=i) for i, t in enumerate(out)]


def merge_ceilings(previous: Sequence[Ceiling], fresh: Sequence[Ceiling]) -> tuple[Ceiling, ...]:
    """Per ceiling (`Ceiling.key`: kind, batch size, worker count, pinning): the fresh one when it was measured,
    else the previous one when that was, else whatever says why there is none."""
    by_batch = {c.key: c for c in previous}
    for c in fresh:
        held = by_batch.get(c.key)
        if c.samples_per_s is not None or held is None or held.samples_per_s is None:
            by_batch[c.key] = c
    return tuple(by_batch.values())
