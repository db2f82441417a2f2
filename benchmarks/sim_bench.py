"""The real planner against model machines: accuracy and cost over hundreds of seeded cases, in seconds.

    python benchmarks/sim_bench.py [--seeds 10] [--out benchmarks/SIM.md] [--trace retrograde:128]

Every case is a model machine and workload from benchmarks/sim_machines.py (8 to 256 usable CPUs; six curve
families; noise 1-20%; slow drift; trial cost growing with workers, fork or spawn). The same AdaptivePlanner the
sweeps use (loadertop.core.engine.search.adaptive) picks each trial; a simulated trial answers it. For each case:

  accuracy = true samples/s at the chosen configuration ÷ the true best in the range (within the memory budget)
  cost     = Σ simulated trial time ÷ Σ of the exhaustive grid over the same range (every worker count, once)

The choice of every measured method is the sweeps' rule, "cheapest within the noise band of the best", on its
own noisy measurements (band.choose: repeats merged, the band narrowed by them and widened by their disagreement).
The adaptive search's head-to-head repeats of its finalists (engine/search/finalists.py) are trials like any other: each
pays its workers' start-up and its measurement again, and the machine drifts on between them.

Beside the adaptive search: the exhaustive grid itself (noise fools it too), a coarse grid (0 and the powers of
two up to the top), and rules of thumb read off the true curve, at no cost: num_workers = usable CPUs, = 4 × GPUs
(one GPU per 32 CPUs, at least one), = 8. A rule of thumb past the memory budget scores 0 (the job would not fit).

tests/test_sim.py runs a reduced version as a regression check on the planner.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from sim_machines import FAMILIES, Model, draw

from loadertop.core.engine.search.adaptive import AdaptivePlanner
from loadertop.core.engine.search.planners import GridPlanner
from loadertop.core.engine.verdict.band import Noise, choose, choose_merged, equivalent, finished, merge_repeats
from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.results import TrialResult

CORES = (8, 16, 32, 64, 128, 256)
TOLERANCE = 0.05
BATCH = 32
RULES: dict[str, Callable[[int], int]] = {
    "rule: CPUs": lambda cpus: cpus,
    "rule: 4×GPUs": lambda cpus: 4 * max(1, cpus // 32),
    "rule: 8": lambda cpus: 8,
}


@dataclass(frozen=True)
class Outcome:
    family: str
    cpus: int
    noise: str  # the case's noise level, as a bucket
    method: str  # adaptive, grid, coarse, or a rule
    chosen: int | None
    accuracy: float
    cost: float  # simulated seconds ÷ the exhaustive grid's
    trials: int
    seconds: float  # simulated seconds
    reach: float  # the accuracy of the best configuration it measured: what a perfect choice among them would get
    repeats: int = 0  # trials of a configuration measured before (the finalists' head-to-head runs)


def settings_for(model: Model) -> Settings:
    return Settings(
        workers=tuple(range(model.top + 1)),
        batch_sizes=(BATCH,),
        start_methods=(model.method,),
        search="adaptive",
        tolerance=TOLERANCE,
    )


def drive(planner: AdaptivePlanner | GridPlanner, model: Model, seed: str) -> tuple[list[TrialResult], float]:
    """The planner against the model until it says stop: its trials and their simulated wall time."""
    rng = random.Random(seed)
    model.clock_s = 0.0
    planner.setup(model.machine(), model.ceilings(BATCH))
    done: list[TrialResult] = []
    spent = 0.0
    parked: set[TrialConfig] = set()  # the finalists whose workers wait for their next run (trial/parked.py)
    while (config := planner.next(done)) is not None:
        keep = planner.keep()
        warm = keep and config in parked
        parked = parked | {config} if keep else set()
        result, cost = model.trial(len(done), config, rng, planner.decision(), warm)
        done.append(result)
        spent += cost
        if len(done) > 4 * (model.top + 1):
            raise RuntimeError(f"{model.family}/{model.cpus}: the planner does not stop")
    return done, spent


def chosen_workers(trials: Sequence[TrialResult]) -> int | None:
    chosen = choose(trials, TOLERANCE)
    return None if chosen is None else chosen[1].config.num_workers


def accuracy(model: Model, n: int | None) -> float:
    if n is None or not model.feasible(n):
        return 0.0
    return model.true(n) / model.best()


def run_case(
    family: str, cpus: int, seed: int, *, top: int | None = None, method: str = "fork", seen: float = 1.0
) -> list[Outcome]:
    model = draw(family, cpus, seed, top=top, method=method, seen=seen)
    s = settings_for(model)
    tag = f"{family}/{cpus}/{seed}/{top}/{method}"
    noise = "σ < 5%" if model.sigma < 0.05 else "σ 5-10%" if model.sigma < 0.10 else "σ 10-20%"
    grid_trials, grid_s = drive(GridPlanner(s.trial_configs()), model, tag + "/grid")
    n = chosen_workers(grid_trials)
    reach = _reach(model, grid_trials)
    out = [Outcome(family, cpus, noise, "grid", n, accuracy(model, n), 1.0, len(grid_trials), grid_s, reach)]
    coarse = [c for c in s.trial_configs() if c.num_workers in _powers(model.top)]
    for name, planner in (("adaptive", AdaptivePlanner(s)), ("coarse grid", GridPlanner(coarse))):
        trials, spent = drive(planner, model, f"{tag}/{name}")
        n = chosen_workers(trials)
        cost = spent / grid_s
        repeats = len(trials) - len({t.config for t in trials})
        reach = _reach(model, trials)
        out.append(Outcome(family, cpus, noise, name, n, accuracy(model, n), cost, len(trials), spent, reach, repeats))
    for name, rule in RULES.items():
        n = min(rule(cpus), model.top)
        out.append(Outcome(family, cpus, noise, name, n, accuracy(model, n), 0.0, 0, 0.0, accuracy(model, n)))
    return out


def _reach(model: Model, trials: Sequence[TrialResult]) -> float:
    return max((accuracy(model, t.config.num_workers) for t in trials if t.status == "ok"), default=0.0)


def _powers(top: int) -> set[int]:
    return {0, top} | {2**k for k in range(top.bit_length()) if 2**k <= top}


def run_all(
    seeds: int, cores: Sequence[int] = CORES, families: Sequence[str] = FAMILIES, seen: float = 1.0
) -> list[Outcome]:
    return [o for f in families for c in cores for s in range(seeds) for o in run_case(f, c, s, seen=seen)]


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def summary(outcomes: Sequence[Outcome]) -> dict[str, float]:
    acc = [o.accuracy for o in outcomes]
    cost = [o.cost for o in outcomes]
    return {
        "n": len(outcomes),
        "acc_p10": quantile(acc, 0.10),
        "acc_med": statistics.median(acc),
        "acc_worst": min(acc),
        "cost_med": statistics.median(cost),
        "cost_p90": quantile(cost, 0.90),
        "cost_worst": max(cost),
        "trials_med": statistics.median(o.trials for o in outcomes),
        "reach_p10": quantile([o.reach for o in outcomes], 0.10),
        "repeats_med": statistics.median(o.repeats for o in outcomes),
    }


METHODS = ("adaptive", "coarse grid", "grid", *RULES)


def table(outcomes: Sequence[Outcome], key: Callable[[Outcome], object], title: str) -> list[str]:
    lines = [
        f"| {title} | method | cases | accuracy p10 | median | worst | reach p10 | cost median | p90 | worst "
        "| trials | repeats |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    groups = sorted({key(o) for o in outcomes}, key=lambda g: (isinstance(g, str), g))  # type: ignore[arg-type]
    for group in (*groups, "all"):
        for method in METHODS:
            rows = [o for o in outcomes if o.method == method and (group == "all" or key(o) == group)]
            if not rows:
                continue
            s = summary(rows)
            cost = f"{s['cost_med']:.3f} | {s['cost_p90']:.3f} | {s['cost_worst']:.3f}"
            cost = "— | — | —" if method.startswith("rule") else cost
            lines.append(
                f"| {group} | {method} | {s['n']:.0f} | {s['acc_p10']:.3f} | {s['acc_med']:.3f} | {s['acc_worst']:.3f} "
                f"| {s['reach_p10']:.3f} | {cost} | {s['trials_med']:.0f} | {s['repeats_med']:.0f} |"
            )
    return lines


def growth(seeds: int, cpus: int = 64, families: Sequence[str] = ("io-bound", "retrograde")) -> list[str]:
    """The adaptive search's simulated seconds, and the grid's, as the range grows, with fork and with spawn."""
    lines = [
        "| range | start | adaptive s (median) | grid s (median) | cost median | cost worst | accuracy p10 |",
        "|---|---|---|---|---|---|---|",
    ]
    for top in (64, 128, 256):
        for method in ("fork", "spawn"):
            rows = [o for f in families for s in range(seeds) for o in run_case(f, cpus, s, top=top, method=method)]
            ada = [o for o in rows if o.method == "adaptive"]
            grid = [o for o in rows if o.method == "grid"]
            lines.append(
                f"| 0-{top} | {method} | {statistics.median(o.seconds for o in ada):.0f} "
                f"| {statistics.median(g.seconds for g in grid):.0f} | {statistics.median(o.cost for o in ada):.3f} "
                f"| {max(o.cost for o in ada):.3f} | {quantile([o.accuracy for o in ada], 0.1):.3f} |"
            )
    return lines


def picks(trials: Sequence[TrialResult]) -> tuple[int, set[int]]:
    """A sweep's pick and its `equivalent` set (the counts within noise of the best), as the recommendation has them."""
    ok = merge_repeats(finished(trials))
    noise = Noise.of(trials, TOLERANCE)
    best, rec = choose_merged(ok, TOLERANCE, noise)
    return rec.config.num_workers, {t.config.num_workers for t in equivalent(ok, best, noise)}


def repeated(family: str, cpus: int, seed: int, runs: int = 3) -> tuple[bool, list[int], float, float]:
    """The same workload swept `runs` times (fresh noise each time): whether every pick lies in every other run's
    equivalent set, the picks, the worst accuracy and the median cost."""
    model = draw(family, cpus, seed)
    grid_s = drive(GridPlanner(settings_for(model).trial_configs()), model, f"{family}/{cpus}/{seed}/grid")[1]
    found, costs = [], []
    for k in range(runs):
        trials, spent = drive(AdaptivePlanner(settings_for(model)), model, f"{family}/{cpus}/{seed}/run{k}")
        found.append(picks(trials))
        costs.append(spent / grid_s)
    mutual = all(p in eq for p, _ in found for _, eq in found)
    chosen = [p for p, _ in found]
    return mutual, chosen, min(accuracy(model, n) for n in chosen), statistics.median(costs)


def reproducibility(seeds: int, cores: Sequence[int] = (2, 4, 8), families: Sequence[str] = FAMILIES) -> list[str]:
    """Issue 18.1: each case swept 3 times; the share of cases whose 3 picks are mutually equivalent."""
    lines = [
        "| family | CPUs | cases | mutually equivalent | picks differ | accuracy p10 (worst of 3) | cost median |",
        "|---|---|---|---|---|---|---|",
    ]
    for family in families:
        for cpus in cores:
            rows = [repeated(family, cpus, s) for s in range(seeds)]
            mutual = sum(r[0] for r in rows) / len(rows)
            differ = sum(len(set(r[1])) > 1 for r in rows) / len(rows)
            acc = quantile([r[2] for r in rows], 0.1)
            cost = statistics.median(r[3] for r in rows)
            lines.append(f"| {family} | {cpus} | {len(rows)} | {mutual:.2f} | {differ:.2f} | {acc:.3f} | {cost:.3f} |")
    return lines


def trace(family: str, cpus: int, seed: int = 0) -> list[str]:
    model = draw(family, cpus, seed)
    planner = AdaptivePlanner(settings_for(model))
    trials, spent = drive(planner, model, "trace")
    n = chosen_workers(trials)
    lines = [f"{family}, {cpus} CPUs, noise σ={model.sigma:.1%}, {model.method}: {model.params}"]
    lines += [f"loadertop: info: search ({s.phase}): {s.message}" for s in planner.trace]
    best_n = max((m for m in range(model.top + 1) if model.feasible(m)), key=model.true)
    lines.append(f"chosen {n} workers: accuracy {accuracy(model, n):.3f} (true best {best_n}), {spent:.0f} s simulated")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10, help="cases per family and core count (default 10)")
    parser.add_argument("--out", type=Path, help="write the tables to this markdown file")
    parser.add_argument("--trace", help="print the search trace of one case, FAMILY:CPUS, and stop")
    parser.add_argument("--repeat", action="store_true", help="only the reproducibility table (3 sweeps per case)")
    args = parser.parse_args(argv)
    if args.repeat:
        print("\n".join(reproducibility(args.seeds)))
        return 0
    if args.trace:
        family, _, cpus = args.trace.partition(":")
        print("\n".join(trace(family, int(cpus or 128))))
        return 0
    start = time.perf_counter()
    outcomes = run_all(args.seeds)
    lines = ["## By curve family", "", *table(outcomes, lambda o: o.family, "family"), ""]
    lines += ["## By usable CPUs", "", *table(outcomes, lambda o: o.cpus, "CPUs"), ""]
    lines += ["## By noise (σ of one trial's mean)", "", *table(outcomes, lambda o: o.noise, "noise"), ""]
    hidden = run_all(args.seeds, seen=0.25)
    lines += ["## Noise the trials cannot see (spread shows a quarter of σ)", ""]
    lines += [*table(hidden, lambda o: o.noise, "noise"), ""]
    lines += ["## Cost growth with the range (64 CPUs, io-bound and retrograde)", "", *growth(args.seeds), ""]
    lines += ["## The same case swept 3 times (2-8 CPUs)", "", *reproducibility(args.seeds), ""]
    lines.append(f"{len(outcomes) // len(METHODS)} cases in {time.perf_counter() - start:.1f} s")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
