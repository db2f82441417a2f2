"""What `--ranks R` means for the advice: processes per node, the rule of thumb, uneven ranks (no torch here)."""

from __future__ import annotations

import dataclasses
import math

from loadertop.core.engine.wording import workers as n_workers
from loadertop.core.model.results import TrialResult

UNEVEN = 0.9  # a rank below this fraction of the fastest one holds the others back in synchronous training


def rule_of_thumb(usable_cpus: int, ranks: int) -> float:
    """The common advice for workers per rank: min(16, 0.75 × cores ÷ ranks)."""
    return min(16.0, 0.75 * usable_cpus / max(1, ranks))


def processes(workers: int, ranks: int) -> int:
    """Processes a node runs for loading: every rank's main process plus its workers."""
    return ranks * (workers + 1)


def ranks_note(workers: int, ranks: int, usable_cpus: int) -> str:
    """'per rank; 2 ranks × (3 workers + 1) = 8 processes on 2 usable CPUs; rule of thumb min(16, 0.75 × 2 ÷ 2)
    = 0.75 → 0 workers per rank'."""
    thumb = rule_of_thumb(usable_cpus, ranks)
    total = processes(workers, ranks)
    over = " (more than the CPUs)" if total > usable_cpus else ""
    advice = math.floor(thumb)
    compare = "matches" if advice == workers else ("is below" if advice < workers else "is above")
    return (
        f"workers are per rank: {ranks} ranks × ({n_workers(workers)} + 1) = {total} processes on {usable_cpus} "
        f"usable CPUs{over}; the rule of thumb min(16, 0.75 × {usable_cpus} ÷ {ranks}) = {thumb:.2f} → "
        f"{n_workers(advice)} per rank {compare} the measured choice"
    )


def with_notes(trial: TrialResult, ranks: int, usable_cpus: int) -> TrialResult:
    """The trial's reason, plus what it found wrong with the data and, with several ranks, the node's process
    count and each rank's share."""
    notes = list(trial.warnings)
    # Many nodes: rank_samples_per_s holds every node's ranks, and node_rows.pacing says what the slowest costs.
    if ranks > 1 and trial.status == "ok" and not trial.node_trials:
        total = processes(trial.config.num_workers, ranks)
        shares = " + ".join(f"{r:.0f}" for r in trial.rank_samples_per_s)
        notes.append(f"{ranks} ranks ({shares} samples/s), {total} processes on {usable_cpus} CPUs")
        rates = trial.rank_samples_per_s
        if rates and min(rates) < UNEVEN * max(rates):
            # DDP steps in lockstep: the node goes at its slowest rank.
            lockstep = ranks * min(rates)
            notes.append(f"uneven ranks: in lockstep training {ranks} × the slowest = {lockstep:.0f} samples/s")
    if not notes:
        return trial
    reason = "; ".join([trial.reason, *notes] if trial.reason else notes)
    return dataclasses.replace(trial, reason=reason)
