"""search_repro.py's judgements, pure functions over recorded results: each search run's accuracy against the
reference with repeats, its cost against the exhaustive grid, and whether repeated runs' picks are mutually
equivalent.

Equivalence is the search's own (docs/search.md): `recommendation.equivalent` holds the configurations on the
run's worker curve within noise of its best. Picks p₁ … pₖ are mutually equivalent when every pᵢ lies in every
run's equivalent set (pᵢ ∈ Eⱼ for all i, j): each run would have accepted every other run's answer as within noise
of its own best. Identical picks are trivially so.
"""

from __future__ import annotations

from typing import Any

from loadertop.core.model.config import TrialConfig
from loadertop.core.model.results import SweepResult

ACCURACY_TARGET = 0.97
COST_TARGET = 0.30
RUNS_NEEDED = 3  # one run is trivially "mutually equivalent": the verdict waits for the repeats


def pick(result: SweepResult) -> TrialConfig | None:
    return result.recommendation.config if result.recommendation else None


def equivalent(result: SweepResult) -> set[TrialConfig]:
    """The run's equivalent set, its pick always among them (older results kept no set)."""
    rec = result.recommendation
    if rec is None:
        return set()
    return {*rec.equivalent, rec.config}


def mutual(results: list[SweepResult]) -> dict[str, Any]:
    """Whether the runs' picks lie in each other's equivalent sets; the failing pairs as (i, j): pick i ∉ E_j."""
    picks = [pick(r) for r in results]
    sets = [equivalent(r) for r in results]
    misses = [[i, j] for i, p in enumerate(picks) for j, e in enumerate(sets) if i != j and (p is None or p not in e)]
    return {"mutual": bool(results) and not misses, "misses": misses}


def reference_accuracy(ref: dict[str, Any], config: TrialConfig) -> float | None:
    """mean(config) ÷ the best mean, from the reference's candidate rows; None when config is not a candidate."""
    for row in ref["candidates"]:
        if TrialConfig.from_dict(row["config"]) == config and row["mean"] is not None and ref["best"]:
            return float(row["mean"]) / float(ref["best"])
    return None


def topup_accuracy(topup: dict[str, Any]) -> float | None:
    """From a top-up (the pick and the reference best, interleaved): mean(pick) ÷ max(mean(pick), mean(best)). A
    pick read faster than the reference best scores 1.00 (the raw ratio stays in the JSON)."""
    p, b = topup.get("pick_mean"), topup.get("best_mean")
    if not p or not b:
        return None
    return float(p) / max(float(p), float(b))


def run_score(search: dict[str, Any], ref: dict[str, Any], grid_wall_s: float) -> dict[str, Any]:
    """One search run: its pick (workers), equivalent set (workers), accuracy and where it came from, cost."""
    result = SweepResult.from_dict(search["result"])
    chosen = pick(result)
    accuracy = reference_accuracy(ref, chosen) if chosen else None
    source = "reference"
    if accuracy is None and search.get("topup"):
        accuracy, source = topup_accuracy(search["topup"]), "top-up"
    return {
        "pick": chosen.num_workers if chosen else None,
        "label": chosen.label() if chosen else None,
        "equivalent": sorted(c.num_workers for c in equivalent(result)),
        "close": bool(result.recommendation and result.recommendation.close),
        "accuracy": accuracy,
        "accuracy_from": source if accuracy is not None else None,
        "cost": search["wall_s"] / grid_wall_s if grid_wall_s else None,
        "wall_s": search["wall_s"],
        "trials": len(result.trials),
        "repeats": sum(1 for t in result.trials if t.repeat_of is not None),
        "load": search.get("load"),
    }


def workload_score(entry: dict[str, Any]) -> dict[str, Any]:
    """Every recorded search run of one workload scored, the mutual equivalence of their picks, and the verdict
    against the targets (accuracy ≥ ACCURACY_TARGET and cost ≤ COST_TARGET on every run, picks mutual)."""
    grid_wall = float(entry["grid"]["bench_wall_s"])
    runs = [run_score(s, entry["reference"], grid_wall) for s in entry["searches"]]
    together = mutual([SweepResult.from_dict(s["result"]) for s in entry["searches"]])
    accs = [r["accuracy"] for r in runs]
    costs = [r["cost"] for r in runs]
    meets = (
        len(runs) >= RUNS_NEEDED
        and all(a is not None and a >= ACCURACY_TARGET for a in accs)
        and all(c is not None and c <= COST_TARGET for c in costs)
        and together["mutual"]
    )
    return {
        "runs": runs,
        **together,
        "worst_accuracy": min((a for a in accs if a is not None), default=None),
        "worst_cost": max((c for c in costs if c is not None), default=None),
        "meets_targets": meets,
    }
