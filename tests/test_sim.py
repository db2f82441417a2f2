"""The real adaptive planner against model machines (benchmarks/sim_bench.py, reduced): a regression check.

The full table, its command and what it says are in benchmarks/SIM.md. Here: 6 families × 6 core counts × 2
seeds = 72 cases, asserting what the planner achieves at a margin below the full run's numbers, so a change that
makes the search less accurate or dearer fails here first.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import sim_bench
from sim_machines import draw


@pytest.fixture(scope="module")
def outcomes() -> list[sim_bench.Outcome]:
    return sim_bench.run_all(seeds=2)


def rows(outcomes: list[sim_bench.Outcome], method: str, **where: object) -> list[sim_bench.Outcome]:
    return [o for o in outcomes if o.method == method and all(getattr(o, k) == v for k, v in where.items())]


def test_accuracy_and_cost_over_all_cases(outcomes: list[sim_bench.Outcome]) -> None:
    ada = sim_bench.summary(rows(outcomes, "adaptive"))
    assert ada["n"] == 72
    assert ada["cost_med"] <= 0.10  # issue 12's target: ≤ 0.20 of the exhaustive grid
    assert ada["cost_p90"] <= 0.30
    assert ada["acc_med"] >= 0.97
    assert ada["acc_p10"] >= 0.85  # the target is 0.95: missed on noisy machines (σ ≥ 10%), see SIM.md


def test_quiet_cases_meet_the_accuracy_target(outcomes: list[sim_bench.Outcome]) -> None:
    quiet = sim_bench.summary(rows(outcomes, "adaptive", noise="σ < 5%"))
    assert quiet["acc_p10"] >= 0.93 and quiet["acc_med"] >= 0.99


def test_the_search_beats_the_rules_of_thumb_and_matches_the_coarse_grid(outcomes: list[sim_bench.Outcome]) -> None:
    ada = sim_bench.summary(rows(outcomes, "adaptive"))
    for rule in sim_bench.RULES:
        assert ada["acc_p10"] > sim_bench.summary(rows(outcomes, rule))["acc_p10"] + 0.3
    coarse = sim_bench.summary(rows(outcomes, "coarse grid"))
    assert ada["acc_p10"] >= coarse["acc_p10"]


@pytest.mark.parametrize("family", ["cpu-bound", "io-bound", "consumer-bound", "retrograde"])
def test_shapes_the_search_handles(outcomes: list[sim_bench.Outcome], family: str) -> None:
    s = sim_bench.summary(rows(outcomes, "adaptive", family=family))
    assert s["acc_med"] >= 0.95 and s["acc_p10"] >= 0.85 and s["cost_med"] <= 0.10


def test_big_machines_cost_a_few_percent_of_the_grid(outcomes: list[sim_bench.Outcome]) -> None:
    for cpus in (128, 256):
        assert sim_bench.summary(rows(outcomes, "adaptive", cpus=cpus))["cost_p90"] <= 0.06


def test_a_retrograde_curve_is_not_climbed_past_a_trusted_peak() -> None:
    # The observation, on the model: the climb stops at the fitted peak instead of doubling past it.
    model = draw("retrograde", 64, 0)
    planner = sim_bench.AdaptivePlanner(sim_bench.settings_for(model))
    trials, _ = sim_bench.drive(planner, model, "peak")
    peak = max(range(1, model.top + 1), key=model.true)
    assert max(t.config.num_workers for t in trials) < 4 * peak
    assert any("puts the peak at" in s.message or "noise band" in s.message for s in planner.trace if s.phase == "stop")


def test_memory_capped_climbs_stop_at_the_budget(outcomes: list[sim_bench.Outcome]) -> None:
    for o in rows(outcomes, "adaptive", family="memory-capped"):
        assert o.accuracy > 0  # never chose past the budget
    model = draw("memory-capped", 64, 1)
    planner = sim_bench.AdaptivePlanner(sim_bench.settings_for(model))
    trials, _ = sim_bench.drive(planner, model, "memory")
    assert all(t.status == "ok" for t in trials)  # the budget stopped the climb: no trial hit the guard
    assert any("memory budget" in s.message for s in planner.trace)
