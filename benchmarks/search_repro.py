"""Issue 18's proof, per workload: the adaptive search run several times against a recorded grid and reference.

    python benchmarks/search_repro.py [--only io,cpu,consumer,images,contended,tvimages,text] [--repeats 3]
                                      [--from benchmarks/search_results.json] [--json benchmarks/repro_results.json]
                                      [--out benchmarks/REPRO.md] [--budget-min 60] [--fresh] [--report-only]
                                      [--tolerance 0.05]

For each workload: the exhaustive grid and the reference with repeats (search_reference.py) are properties of the
workload on this machine, not of the search, so they are taken from `--from` (search_bench.py's record) when it has
them, else measured here first (the grid over 0..--max-workers, then its 5 fastest counts and its own pick 2 more
times each, interleaved). Then the adaptive search runs `--repeats` times. Each run is scored (repro_score.py):

  accuracy = reference mean at its pick ÷ the best reference mean    (target ≥ 0.97 on every run)
             a pick the reference did not measure gets a top-up: the pick and the reference best, 3 runs each,
             interleaved; accuracy = mean(pick) ÷ max(mean(pick), mean(best))
  cost     = the search's wall time (runner start, ceiling, every trial, its repeats) ÷ the grid's wall time
                                                                      (target ≤ 0.30 on every run)
  mutual   = every run's pick lies in every run's `equivalent` set    (target: yes)

Resumable and time-bounded: the JSON is written after every phase; a rerun of the same command carries on where it
stopped (grids, references and finished searches are kept), and `--budget-min` stops before a phase that would not
fit. `--fresh` sets the recorded searches aside (as the earlier runs; grids and references stay): use it once after
a change to the search. `--remeasure KEYS` measures those workloads' grid and reference again (a quiet machine).
The machine's 1-minute load average is kept at the start and end of every phase: a load above the usable CPUs
means something else competed, and those numbers should be measured again on a quiet machine.
"""

from __future__ import annotations

import argparse
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
from search_bench import HERE, WORKLOADS, Timed, Workload, make_jpegs, run_sweep
from search_reference import REFERENCE_RUNS, candidates, summarise

from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.results import SweepResult

SEARCH_SHARE = 0.35  # a search is budgeted at this share of its grid's wall time (the ceiling)


def main() -> int:
    args = parse()
    keys = args.only.split(",")
    known = {w.key: w for w in WORKLOADS}
    if unknown := sorted(set(keys) - set(known)):
        print(f"search_repro: unknown workload {', '.join(unknown)} (known: {', '.join(known)})", file=sys.stderr)
        return 2
    state_path = Path(args.json)
    state = json.loads(state_path.read_text()) if state_path.exists() else {"workloads": {}}
    if args.report_only:
        return write_report(state, args)
    recorded = recorded_runs(Path(args.source)) if args.source else {}
    deadline = time.monotonic() + 60 * args.budget_min
    state.setdefault("sessions", []).append({"started": time.strftime("%Y-%m-%d %H:%M:%S"), "code": code_version()})
    for key in keys:
        entry = state["workloads"].setdefault(key, {"searches": []})
        session = len(state["sessions"])
        if key in args.remeasure.split(",") and entry.get("remeasured_in_session") != session:
            for stale in ("grid", "reference", "grid_from"):
                entry.pop(stale, None)
            entry["remeasured_in_session"] = session
        if (args.fresh or entry.get("remeasured_in_session") == session) and entry.get("fresh_in_session") != session:
            if entry["searches"]:  # kept apart, not lost: the report shows them as the earlier runs
                entry.setdefault("earlier", []).append(entry["searches"])
            entry["searches"], entry["fresh_in_session"] = [], session
        done = measure_workload(known[key], entry, recorded.get(key), args, deadline, lambda: save(state, args))
        if not done:
            print("search_repro: budget spent; rerun the same command to resume", flush=True)
            break
    state["sessions"][-1]["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    save(state, args)
    return write_report(state, args)


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default=",".join(w.key for w in WORKLOADS), help="comma-separated workload keys")
    p.add_argument("--repeats", type=int, default=3, help="adaptive search runs per workload")
    p.add_argument(
        "--from",
        dest="source",
        default=str(HERE / "search_results.json"),
        help="search_bench.py's JSON: grids and references to reuse ('' measures them here)",
    )
    p.add_argument("--json", default=str(HERE / "repro_results.json"))
    p.add_argument("--out", default=str(HERE / "REPRO.md"))
    p.add_argument("--budget-min", type=float, default=60.0, help="stop before a phase that would not fit")
    p.add_argument("--fresh", action="store_true", help="drop the recorded searches (keep grids, references)")
    p.add_argument(
        "--remeasure",
        default="",
        metavar="KEYS",
        help="measure these workloads' grid and reference again here (e.g. on a quiet machine)",
    )
    p.add_argument("--report-only", action="store_true", help="rewrite the report from --json, measure nothing")
    p.add_argument("--trial-seconds", type=float, default=5.0, help="for grids measured here")
    p.add_argument("--max-workers", type=int, default=32, help="for grids measured here")
    p.add_argument("--images", type=int, default=2000, help="JPEGs of the Pillow `images` workload")
    p.add_argument("--tolerance", type=float, default=0.05, help="the searches' noise band (loadertop's default 0.05)")
    return p.parse_args()


def recorded_runs(path: Path) -> dict[str, dict[str, Any]]:
    """search_bench.py's runs by workload key: each has `grid` (with bench_wall_s) and `reference`."""
    if not path.exists():
        return {}
    raw = json.loads(path.read_text())
    return {item["score"]["workload"]: item for item in raw["runs"] if "reference" in item}


def dataset_spec(w: Workload, images_count: int) -> str:
    """The workload's spec with its data in the bench cache (the Pillow JPEGs are made here once, seed 0 as in
    search_bench.py, so they are the files its grid measured)."""
    sys.path.insert(0, str(HERE / "workloads"))
    import bench_cache

    images = bench_cache.cache_root() / f"pillow-images-{images_count}"
    if "{images}" in w.spec:
        bench_cache.ensure(images, lambda tmp: make_jpegs(tmp, images_count))
    return w.spec.format(images=images, here=HERE)


def settings_for(w: Workload, spec: str, grid: dict[str, Any] | None, args: argparse.Namespace) -> Settings:
    """The sweep settings of search_bench.py, with the recorded grid's trial length and range when there is one."""
    recorded = grid["settings"] if grid else {}
    workers = recorded.get("workers") or list(range(args.max_workers + 1))
    return Settings(
        search="grid",
        dataset=spec,
        batch_sizes=(w.batch_size,),
        step_ms=w.step_ms,
        trial_seconds=float(recorded.get("trial_seconds", args.trial_seconds)),
        start_methods=("fork",),
        workers=tuple(workers),
        interval=0.25,
        tolerance=args.tolerance,
    )


def measure_workload(
    w: Workload, entry: dict[str, Any], recorded: dict[str, Any] | None, args: argparse.Namespace,
    deadline: float, save_now: Any,
) -> bool:  # fmt: skip
    """Grid and reference (reused or measured), then the searches still missing; False when the budget ran out."""
    import dataclasses

    spec = dataset_spec(w, args.images)
    entry.update(title=w.title, spec=w.spec, batch_size=w.batch_size, why=w.why)
    if "grid" not in entry and recorded is not None and entry.get("remeasured_in_session") is None:
        entry["grid"], entry["reference"] = recorded["grid"], recorded["reference"]
        entry["grid_from"] = f"{Path(args.source).name} (measured {recorded.get('measured', 'with it')})"
    settings = settings_for(w, spec, entry.get("grid"), args)
    with tempfile.TemporaryDirectory(prefix="loadertop-repro-") as tmp:
        runs = Path(tmp)
        if "grid" not in entry:
            print(f"== {w.title}: grid (measured here)", flush=True)
            entry["grid"] = timed_dict(run_sweep(settings, runs))
            entry["grid_from"] = f"measured here {time.strftime('%Y-%m-%d %H:%M')}"
            save_now()
        if "reference" not in entry:
            entry["reference"] = measure_reference(settings, SweepResult.from_dict(entry["grid"]), runs)
            save_now()
        grid_wall = float(entry["grid"]["bench_wall_s"])
        while len(entry["searches"]) < args.repeats:
            if time.monotonic() + SEARCH_SHARE * grid_wall > deadline:
                return False
            n = len(entry["searches"]) + 1
            print(f"== {w.title}: adaptive search, run {n} of {args.repeats}", flush=True)
            search = timed_dict(run_sweep(dataclasses.replace(settings, search="adaptive"), runs), key="result")
            search["code"] = code_version()
            search["topup"] = topup(settings, search, entry["reference"], runs)
            entry["searches"].append(search)
            save_now()
    return True


def timed_dict(timed: Timed, key: str = "") -> dict[str, Any]:
    """A sweep's result as JSON, with the bench's wall time, per-trial seconds and the load around it."""
    body = {**timed.result.to_dict(), "trial_s": timed.trial_s, "bench_wall_s": timed.wall_s, "load": timed.load}
    if key:
        return {key: timed.result.to_dict(), "wall_s": timed.wall_s, "trial_s": timed.trial_s, "load": timed.load}
    return body


def measure_reference(settings: Settings, grid: SweepResult, runs: Path) -> dict[str, Any]:
    """The grid's fastest counts and its own pick, REFERENCE_RUNS - 1 more runs each, interleaved."""
    configs = candidates(grid, grid)  # no search pick yet: the reference belongs to the workload
    print(f"== reference: {len(configs)} candidates, {REFERENCE_RUNS - 1} more runs each", flush=True)
    timed = run_sweep(settings, runs, only=configs * (REFERENCE_RUNS - 1))
    ref = summarise(configs, grid, timed.result, grid)
    for row in ref["candidates"]:
        row["picks"] = ["grid's band rule"] if "grid's band rule" in row["picks"] else []
    ref.pop("accuracy", None)
    return {**ref, "wall_s": timed.wall_s, "load": list(timed.load), "measured": time.strftime("%Y-%m-%d %H:%M")}


def topup(settings: Settings, search: dict[str, Any], ref: dict[str, Any], runs: Path) -> dict[str, Any] | None:
    """When the reference never measured the search's pick: the pick and the reference best, interleaved."""
    rec = SweepResult.from_dict(search["result"]).recommendation
    configs = [TrialConfig.from_dict(row["config"]) for row in ref["candidates"]]
    if rec is None or rec.config in configs:
        return None
    best = next(TrialConfig.from_dict(r["config"]) for r in ref["candidates"] if r["label"] == ref["best_label"])
    print(f"    top-up: {rec.config.label()} against the reference best {best.label()}", flush=True)
    timed = run_sweep(settings, runs, only=[rec.config, best] * REFERENCE_RUNS)
    got = {
        c: [t.samples_per_s for t in timed.result.trials if t.config == c and t.samples_per_s]
        for c in (rec.config, best)
    }
    mean = {c: sum(v) / len(v) if v else None for c, v in got.items()}
    return {"pick_runs": got[rec.config], "best_runs": got[best], "pick_mean": mean[rec.config],
            "best_mean": mean[best], "wall_s": timed.wall_s, "load": list(timed.load)}  # fmt: skip


def code_version() -> str:
    """The commit the search ran from (and whether the tree had changes), so a record says what it measured."""

    def git(*cmd: str) -> str:
        return subprocess.run(["git", *cmd], cwd=HERE, capture_output=True, text=True).stdout.strip()

    dirty = git("status", "--porcelain", "--", "../loadertop")
    return git("rev-parse", "--short", "HEAD") + (" (modified)" if dirty else "")


def save(state: dict[str, Any], args: argparse.Namespace) -> None:
    state["machine_load_now"] = os.getloadavg()[0]
    Path(args.json).write_text(json.dumps(state, indent=1) + "\n")


def write_report(state: dict[str, Any], args: argparse.Namespace) -> int:
    Path(args.out).write_text(repro_report.render(state))
    print(f"wrote {args.out} and {args.json}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
