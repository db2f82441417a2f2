"""The adaptive search against an independent ruler: every figure it reports beside a plain training loop's, its
picks' accuracy and cost, and whether repeated runs agree.

    python benchmarks/search_repro.py [--only decode,audio,io,cpu,consumer,images,contended,tvimages,text]
                                      [--repeats 3] [--seconds 10] [--json benchmarks/repro_results.json]
                                      [--out benchmarks/REPRO.md] [--budget-min 150] [--report-only]

Per workload, in this order, on one machine, nothing else running:

    ruler pass 0 · loadertop's grid · search 1 · ruler pass 1 · search 2 · ruler pass 2 · search 3 · ruler pass 3

A ruler pass is benchmarks/ruler.py in its own process: one plain-loop run (a fresh DataLoader, `for batch in
loader`, perf_counter, the start-up buffer skipped, --seconds timed) of each worker count of the workload's ladder,
in a shuffled order. It shares no measurement code with loadertop. The reference of a count is the mean of its
passes' runs (and their standard deviation). A machine drifts by 10-20% over tens of minutes (a VM beside other
tenants), so each loadertop figure is compared with the mean of the two passes around it, measured within the same
minutes: ratio = loadertop's figure ÷ that bracket.

loadertop's grid (one trial per ladder count, loadertop's defaults) is the second ruler, beside the first. Each
search is a default adaptive search over 0-32 workers (`loadertop --workers 0-32`, every other setting its
default); every trial it ran (a rung, a rung decided early, a repeat on parked workers) is compared with the
bracket at its count, and so is the figure its recommendation quotes.

  accuracy = reference mean at the pick ÷ the best reference mean (picks off the ladder are measured by the ruler
             after the searches, 3 interleaved runs with the best)                             (target ≥ 0.95)
  cost     = the search's wall time ÷ the exhaustive loadertop grid's over 0-32 (recorded in this JSON; measured
             here once where missing); beside it ÷ an exhaustive plain-loop grid's (the ruler's per-run wall,
             interpolated over every count 0-32)                                               (target ≤ 0.30)
  mutual   = every run's pick lies in every run's equivalence set                              (target: yes)

Resumable: the JSON is written after every step, a rerun of the same command carries on, and --budget-min stops
before a step that would not fit. `--fresh KEYS` sets those workloads' records aside and measures them again.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import repro_report
from search_bench import HERE, WORKLOADS, Workload, make_jpegs, run_sweep

from loadertop.core.model.config import Settings
from loadertop.core.model.results import SweepResult

LADDER = (0, 1, 2, 3, 4, 6, 8, 16, 32)  # the counts the ruler measures in every pass
TOP = 32  # the searches' and the exhaustive grid's range: 0..TOP workers
RULER = HERE / "ruler.py"


def main() -> int:
    args = parse()
    known = {w.key: w for w in WORKLOADS}
    keys = args.only.split(",")
    if unknown := sorted(set(keys) - set(known)):
        print(f"search_repro: unknown workload {', '.join(unknown)} (known: {', '.join(known)})", file=sys.stderr)
        return 2
    path = Path(args.json)
    state = json.loads(path.read_text()) if path.exists() else {}
    if state.get("format") != 2:  # the record of the loadertop-only reference: only its exhaustive grids' walls stay
        state = {"format": 2, "workloads": {}, "exhaustive_walls": grid_walls(state)}
    if args.report_only:
        return write_report(state, args)
    deadline = time.monotonic() + 60 * args.budget_min
    for key in keys:
        entry = state["workloads"].setdefault(key, {})
        if key in args.fresh.split(","):
            state.setdefault("set_aside", []).append({key: entry})
            entry = state["workloads"][key] = {}
        if not measure(known[key], entry, state, args, deadline, lambda: save(state, path)):
            print("search_repro: budget spent; rerun the same command to resume", flush=True)
            break
    save(state, path)
    return write_report(state, args)


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default=",".join(w.key for w in WORKLOADS), help="comma-separated workload keys")
    p.add_argument("--repeats", type=int, default=3, help="adaptive searches per workload")
    p.add_argument("--seconds", type=float, default=10.0, help="timed seconds of each ruler run")
    p.add_argument("--json", default=str(HERE / "repro_results.json"))
    p.add_argument("--out", default=str(HERE / "REPRO.md"))
    p.add_argument("--budget-min", type=float, default=150.0, help="stop before a step that would not fit")
    p.add_argument("--fresh", default="", metavar="KEYS", help="measure these workloads again from the start")
    p.add_argument("--report-only", action="store_true", help="rewrite the report from --json, measure nothing")
    return p.parse_args()


def spec_of(w: Workload) -> str:
    """The workload's spec, its generated data made once in the bench cache."""
    sys.path.insert(0, str(HERE / "workloads"))
    import bench_cache

    images = bench_cache.cache_root() / "pillow-images-2000"
    if "{images}" in w.spec:
        bench_cache.ensure(images, lambda tmp: make_jpegs(tmp, 2000))
    return w.spec.format(images=images, here=HERE)


def settings_of(w: Workload, spec: str, search: str, workers: tuple[int, ...]) -> Settings:
    """loadertop's defaults, but for the workload and the range (and fork, as the ruler's workers)."""
    return Settings(
        search=search,
        dataset=spec,
        batch_sizes=(w.batch_size,),
        step_ms=w.step_ms,
        start_methods=("fork",),
        workers=workers,
    )


def measure(w: Workload, entry: dict[str, Any], state: dict[str, Any], args: argparse.Namespace, deadline: float,
            save_now: Any) -> bool:  # fmt: skip
    """The workload's steps still missing, in order; False when the budget ran out first."""
    spec = spec_of(w)
    entry.update(title=w.title, spec=w.spec, batch_size=w.batch_size, step_ms=w.step_ms, why=w.why)
    entry.setdefault("passes", [])
    entry.setdefault("searches", [])
    with tempfile.TemporaryDirectory(prefix="loadertop-repro-") as tmp:
        steps: list[tuple[str, Any]] = [("pass", 0), ("grid", None)]
        for i in range(args.repeats):
            steps += [("search", i), ("pass", i + 1)]
        steps.append(("topup", None))
        if "exhaustive_wall_s" not in entry and (recorded := recorded_grid_wall(state, w.key)) is not None:
            entry["exhaustive_wall_s"], entry["exhaustive_from"] = recorded
        if "exhaustive_wall_s" not in entry:
            steps.append(("exhaustive", None))
        for kind, i in steps:
            if done(entry, kind, i):
                continue
            if time.monotonic() + estimate(entry, kind) > deadline:
                return False
            print(f"== {w.title}: {kind}{'' if i is None else f' {i}'}", flush=True)
            if kind == "pass":
                entry["passes"].append(ruler_pass(w, spec, LADDER, args.seconds, seed=i))
            elif kind == "grid":
                entry["grid"] = timed(run_sweep(settings_of(w, spec, "grid", LADDER), Path(tmp)))
            elif kind == "search":
                search = timed(run_sweep(settings_of(w, spec, "adaptive", tuple(range(TOP + 1))), Path(tmp)))
                search["segment"] = len(entry["passes"]) - 1  # between this pass and the next
                search["code"] = code_version()
                entry["searches"].append(search)
            elif kind == "topup":
                entry["topup"] = topup(w, spec, entry, args.seconds)
            elif kind == "exhaustive":
                grid = settings_of(w, spec, "grid", tuple(range(TOP + 1)))
                grid = dataclasses.replace(grid, trial_seconds=5.0)
                entry["exhaustive_wall_s"] = run_sweep(grid, Path(tmp)).wall_s
                entry["exhaustive_from"] = f"measured here {time.strftime('%Y-%m-%d %H:%M')} (5 s trials)"
            save_now()
    return True


def done(entry: dict[str, Any], kind: str, i: int | None) -> bool:
    if kind == "pass":
        return len(entry["passes"]) > (i or 0)
    if kind == "search":
        return len(entry["searches"]) > (i or 0)
    return {"grid": "grid", "topup": "topup", "exhaustive": "exhaustive_wall_s"}[kind] in entry


def estimate(entry: dict[str, Any], kind: str) -> float:
    """A step's likely wall time, from the workload's earlier steps (a guess before any)."""
    passes = [p["wall_s"] for p in entry["passes"]]
    if kind in ("pass", "topup"):
        return max(passes, default=150.0)
    if kind == "exhaustive":
        return 600.0
    return max([s["wall_s"] for s in entry["searches"]] + [entry.get("grid", {}).get("wall_s", 120.0)])


def ruler_pass(w: Workload, spec: str, counts: tuple[int, ...], seconds: float, seed: int, runs: int = 1) -> dict:
    """One plain-loop run of each count (or `runs` interleaved), in its own process."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ruler.json"
        cmd = [sys.executable, str(RULER), "--dataset", spec, "--batch-size", str(w.batch_size), "--workers",
               ",".join(map(str, counts)), "--runs", str(runs), "--seconds", str(seconds), "--step-ms",
               str(w.step_ms), "--seed", str(seed), "--json", str(out)]  # fmt: skip
        load0, started = os.getloadavg()[0], time.monotonic()
        subprocess.run(cmd, check=True, cwd=HERE.parent, stdout=subprocess.DEVNULL)
        record = json.loads(out.read_text())
    runs_by = {int(k): [r["samples_per_s"] for r in v["runs"]] for k, v in record["configs"].items()}
    walls = {int(k): sum(r["wall_s"] for r in v["runs"]) / len(v["runs"]) for k, v in record["configs"].items()}
    return {"runs": runs_by, "run_wall_s": walls, "wall_s": time.monotonic() - started,
            "load": [load0, os.getloadavg()[0]], "at": time.strftime("%Y-%m-%d %H:%M")}  # fmt: skip


def topup(w: Workload, spec: str, entry: dict[str, Any], seconds: float) -> dict[str, Any] | None:
    """The searches' picks the ladder lacks, measured by the ruler with the ladder's best, 3 runs interleaved."""
    picks = {pick_of(s) for s in entry["searches"]} - {None} - set(LADDER)
    if not picks:
        return None
    means = repro_report.reference(entry)
    best = max(means, key=lambda n: means[n][0])
    return ruler_pass(w, spec, (*sorted(p for p in picks if p is not None), best), seconds, seed=99, runs=3)


def pick_of(search: dict[str, Any]) -> int | None:
    rec = SweepResult.from_dict(search["result"]).recommendation
    return rec.config.num_workers if rec else None


def grid_walls(old: dict[str, Any]) -> dict[str, list[Any]]:
    """The exhaustive 0-32 loadertop grids' wall times (5 s trials, this machine) of the earlier record."""
    walls = {}
    for key, entry in old.get("workloads", {}).items():
        if grid := entry.get("grid"):
            walls[key] = [float(grid["bench_wall_s"]), f"recorded by the earlier benchmark ({entry.get('grid_from')})"]
    return walls


def recorded_grid_wall(state: dict[str, Any], key: str) -> tuple[float, str] | None:
    wall = state.get("exhaustive_walls", {}).get(key)
    return (wall[0], wall[1]) if wall else None


def timed(t: Any) -> dict[str, Any]:
    return {"result": t.result.to_dict(), "wall_s": t.wall_s, "load": list(t.load), "notices": t.notices}


def code_version() -> str:
    def git(*cmd: str) -> str:
        return subprocess.run(["git", *cmd], cwd=HERE, capture_output=True, text=True).stdout.strip()

    dirty = git("status", "--porcelain", "--", "../loadertop")
    return git("rev-parse", "--short", "HEAD") + (" (modified)" if dirty else "")


def save(state: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(state, indent=1) + "\n")


def write_report(state: dict[str, Any], args: argparse.Namespace) -> int:
    Path(args.out).write_text(repro_report.render(state))
    print(f"wrote {args.out} and {args.json}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
