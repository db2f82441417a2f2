"""The real adaptive planner against model machines (benchmarks/sim_bench.py, reduced): a regression check.

The full table, its command and what it says are in benchmarks/SIM.md. Here: 6 families × 6 core counts × 2
seeds = 72 cases, asserting what the planner achieves at a margin below the full run's numbers, so a change that
makes the search less accurate or dearer fails here first.
"""

from __future__ import annotations

import itertools
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


@pytest.mark.heavy
def test_accuracy_and_cost_over_all_cases(outcomes: list[sim_bench.Outcome]) -> None:
    ada = sim_bench.summary(rows(outcomes, "adaptive"))
    assert ada["n"] == 72
    assert ada["cost_med"] <= 0.15  # the target: ≤ 0.20 of the exhaustive grid
    assert ada["cost_p90"] <= 0.45
    assert ada["acc_med"] >= 0.97
    assert ada["acc_p10"] >= 0.95  # the target (0.965 here; 0.959-0.964 over three sets of 360, SIM.md)


@pytest.mark.unit
def test_quiet_cases_meet_the_accuracy_target(outcomes: list[sim_bench.Outcome]) -> None:
    quiet = sim_bench.summary(rows(outcomes, "adaptive", noise="σ < 5%"))
    assert quiet["acc_p10"] >= 0.95 and quiet["acc_med"] >= 0.99


@pytest.mark.unit
def test_the_search_beats_the_rules_of_thumb_and_matches_the_coarse_grid(outcomes: list[sim_bench.Outcome]) -> None:
    ada = sim_bench.summary(rows(outcomes, "adaptive"))
    for rule in sim_bench.RULES:
        assert ada["acc_p10"] > sim_bench.summary(rows(outcomes, rule))["acc_p10"] + 0.3
    coarse = sim_bench.summary(rows(outcomes, "coarse grid"))
    assert ada["acc_p10"] >= coarse["acc_p10"]


@pytest.mark.unit
@pytest.mark.parametrize("family", ["cpu-bound", "io-bound", "consumer-bound", "retrograde"])
def test_shapes_the_search_handles(outcomes: list[sim_bench.Outcome], family: str) -> None:
    s = sim_bench.summary(rows(outcomes, "adaptive", family=family))
    assert s["acc_med"] >= 0.95 and s["acc_p10"] >= 0.90 and s["cost_med"] <= 0.15


@pytest.mark.unit
def test_big_machines_cost_a_few_percent_of_the_grid(outcomes: list[sim_bench.Outcome]) -> None:
    for cpus in (128, 256):
        assert sim_bench.summary(rows(outcomes, "adaptive", cpus=cpus))["cost_p90"] <= 0.08


@pytest.mark.unit
def test_a_retrograde_curve_is_not_climbed_past_a_trusted_peak() -> None:
    # The observation, on the model: the climb stops at the fitted peak instead of doubling past it.
    model = draw("retrograde", 64, 0)
    planner = sim_bench.AdaptivePlanner(sim_bench.settings_for(model))
    trials, _ = sim_bench.drive(planner, model, "peak")
    peak = max(range(1, model.top + 1), key=model.true)
    assert max(t.config.num_workers for t in trials) < 4 * peak
    assert any("puts the peak at" in s.message or "band" in s.message for s in planner.trace if s.phase == "stop")


@pytest.mark.unit
def test_a_noisy_rung_decided_early_does_not_end_the_climb() -> None:
    # σ 18% on 128 CPUs: 8 workers read 17% below 4 in three agreeing blocks (decided early, a clear loss within the
    # trial). Its blocks agree, but the run is far from the next: the climb takes one more rung instead of stopping
    # at 4-8 workers (it did, and chose 7: accuracy 0.30).
    model = draw("retrograde", 128, 0)
    assert model.sigma > 0.15
    planner = sim_bench.AdaptivePlanner(sim_bench.settings_for(model))
    trials, _ = sim_bench.drive(planner, model, "trace")
    assert any(t.decided for t in trials)
    assert max(t.config.num_workers for t in trials) > 16
    assert sim_bench.accuracy(model, sim_bench.chosen_workers(trials)) >= 0.9


@pytest.mark.unit
def test_memory_capped_climbs_stop_at_the_budget(outcomes: list[sim_bench.Outcome]) -> None:
    for o in rows(outcomes, "adaptive", family="memory-capped"):
        assert o.accuracy > 0  # never chose past the budget
    model = draw("memory-capped", 64, 1)
    planner = sim_bench.AdaptivePlanner(sim_bench.settings_for(model))
    trials, _ = sim_bench.drive(planner, model, "memory")
    assert all(t.status == "ok" for t in trials)  # the budget stopped the climb: no trial hit the guard
    assert any("memory budget" in s.message for s in planner.trace)


@pytest.mark.unit
def test_noisy_finalists_are_compared_head_to_head_alternately() -> None:
    # σ 15%: one run each cannot tell the finalists apart. They are measured again A B A B ..., each repeat a full
    # trial (start-up and measurement: the simulated cost counts it), until the sequential test or the cap decides.
    model = draw("saturating", 32, 0)
    assert model.sigma > 0.10
    planner = sim_bench.AdaptivePlanner(sim_bench.settings_for(model))
    trials, _ = sim_bench.drive(planner, model, "duel")
    repeats = [s for s in planner.trace if s.phase == "repeat"]
    again = [s.config for s in repeats if "measured again" in s.message]
    first = list(itertools.takewhile(lambda s: not s.message.startswith("head to head"), repeats))
    assert len(first) >= 4 and all(a.config != b.config for a, b in itertools.pairwise(first))  # A B A B ...
    verdicts = [s.message for s in repeats if s.message.startswith("head to head")]
    assert verdicts and "run-to-run noise" in verdicts[0]  # the noise estimate from the repeats
    assert len(trials) - len({t.config for t in trials}) == len(again)


@pytest.mark.unit
def test_repeats_buy_accuracy_on_noisy_machines(outcomes: list[sim_bench.Outcome]) -> None:
    # The finalists' head-to-head repeats are where the noisy cases' extra trials go, and they pay: on noisy
    # machines the search chooses better than the exhaustive grid, which measures every count once.
    noisy = [o for o in rows(outcomes, "adaptive") if o.noise != "σ < 5%"]
    grid = [o for o in rows(outcomes, "grid") if o.noise != "σ < 5%"]
    assert sim_bench.statistics.median(o.repeats for o in noisy) >= 4
    assert sim_bench.summary(noisy)["acc_p10"] >= sim_bench.summary(grid)["acc_p10"]
