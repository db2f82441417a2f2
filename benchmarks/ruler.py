"""The independent ruler: what a plain training loop measures, with no measurement code of loadertop's.

    python benchmarks/ruler.py --dataset SPEC --batch-size 32 --workers 0,1,2,4,8 [--runs 3] [--seconds 10]
                               [--step-ms 0] [--prefetch 2] [--pin-memory] [--persistent] [--start-method fork]
                               [--dataset-arg K=V ...] [--json out.json]

What a user would write to check loadertop with their own stopwatch. Per run: a fresh `DataLoader` over the
dataset (built once per process, as a training script builds it), `for batch in loader` over as many epochs as it
takes, `time.perf_counter()`; the first prefetch_factor × workers + workers batches (the start-up buffer: they come
out of the queue at once) are taken but not timed, then at least --seconds are: samples ÷ seconds. The consumer is
`time.sleep(step_ms)` per batch, or nothing. Runs are interleaved: every configuration once per round, in a shuffled
order per round, for --runs rounds. Per configuration: its runs, their mean, the standard deviation of a run about
that mean (relative), and half their range (relative).

The only loadertop code imported here builds the workload from its spec (`loadertop.core.datasets.spec`: the
dataset and the DataLoader arguments its factory fixes, such as shuffle). Nothing of loadertop's trial, runner,
driver, probes or statistics is used: a bias those share cannot show in this ruler. tests/test_ruler.py checks the
imports. The JSON is written after every run, and a rerun with the same --json and settings carries on where it
stopped.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import multiprocessing
import os
import random
import sys
import time
import warnings
from pathlib import Path
from typing import Any

MIN_TIMED_BATCHES = 10  # a run stops after --seconds, but not before timing this many batches


def rows_in(batch: Any) -> int:
    """The samples in a batch: the leading size of its first tensor (or sequence)."""
    if isinstance(batch, dict):
        return rows_in(next(iter(batch.values())))
    if isinstance(batch, list | tuple):
        return rows_in(batch[0])
    shape = getattr(batch, "shape", None)
    return int(shape[0]) if shape else len(batch)


def start_up_buffer(workers: int, prefetch: int) -> int:
    """Batches queued before the first one is taken: prefetch per worker, plus a round to drain them."""
    return prefetch * workers + workers if workers else 1


def one_run(dataset: Any, extra: dict[str, Any], workers: int, args: argparse.Namespace) -> dict[str, float]:
    """One fresh DataLoader, timed as a plain loop times it."""
    from torch.utils.data import DataLoader

    knobs: dict[str, Any] = {}
    if workers:
        knobs = {
            "prefetch_factor": args.prefetch,
            "persistent_workers": args.persistent,
            "multiprocessing_context": multiprocessing.get_context(args.start_method),
        }
    loader = DataLoader(
        dataset, batch_size=args.batch_size, num_workers=workers, pin_memory=args.pin_memory, **knobs, **extra
    )
    skip, step = start_up_buffer(workers, args.prefetch), args.step_ms / 1000.0
    taken = timed_batches = samples = 0
    began = time.perf_counter()
    first = t0 = now = 0.0
    epochs = 0
    while True:
        for batch in loader:
            if step:
                time.sleep(step)
            taken += 1
            if taken == 1:
                first = time.perf_counter() - began
            if taken == skip:
                t0 = time.perf_counter()
            elif taken > skip:
                timed_batches += 1
                samples += rows_in(batch)
                now = time.perf_counter()
                if now - t0 >= args.seconds and timed_batches >= MIN_TIMED_BATCHES:
                    break
        else:
            epochs += 1
            continue
        break
    del batch, loader
    gc.collect()  # the iterator's workers shut down here, before the next run starts its own
    return {
        "samples_per_s": samples / (now - t0),
        "seconds": now - t0,
        "batches": timed_batches,
        "epochs_crossed": epochs,
        "first_batch_s": first,
        "wall_s": time.perf_counter() - began,
    }


def summary(runs: list[float]) -> dict[str, float | None]:
    mean = sum(runs) / len(runs)
    sd = math.sqrt(sum((x - mean) ** 2 for x in runs) / (len(runs) - 1)) if len(runs) > 1 else None
    return {
        "mean": mean,
        "sd_rel": sd / mean if sd is not None and mean else None,
        "half_range_rel": (max(runs) - min(runs)) / 2 / mean if mean else None,
    }


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", required=True)
    p.add_argument("--dataset-arg", action="append", default=[], metavar="K=V")
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--workers", required=True, help="comma-separated worker counts")
    p.add_argument("--runs", type=int, default=3, help="interleaved rounds: runs per configuration")
    p.add_argument("--seconds", type=float, default=10.0, help="timed seconds per run, after the start-up buffer")
    p.add_argument("--step-ms", type=float, default=0.0, help="a training step emulated by sleeping, per batch")
    p.add_argument("--prefetch", type=int, default=2)
    p.add_argument("--pin-memory", action="store_true")
    p.add_argument("--persistent", action="store_true")
    p.add_argument("--start-method", default="fork")
    p.add_argument("--seed", type=int, default=0, help="of each round's order")
    p.add_argument("--json", default="", help="write (and resume) the record here")
    return p.parse_args(argv)


def settings_of(args: argparse.Namespace) -> dict[str, Any]:
    keys = ("dataset", "dataset_arg", "batch_size", "seconds", "step_ms", "prefetch", "pin_memory", "persistent")
    return {k: getattr(args, k) for k in (*keys, "start_method")}


def load_record(path: str, settings: dict[str, Any]) -> dict[str, Any]:
    """The record to carry on: the file's when it measured with the same settings, else a new one."""
    if path and Path(path).exists():
        old = json.loads(Path(path).read_text())
        if old.get("settings") == settings:
            return old
    return {"settings": settings, "configs": {}, "rounds": []}


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    warnings.filterwarnings("ignore", message="This DataLoader will create")  # torch's note on workers > cores
    sys.path.insert(0, str(Path(__file__).resolve().parent / "workloads"))
    from loadertop.core.datasets.spec import load_spec  # the workload, not a ruler: see the docstring

    loaded = load_spec(args.dataset, dict(kv.split("=", 1) for kv in args.dataset_arg))
    counts = [int(w) for w in args.workers.split(",")]
    record = load_record(args.json, settings_of(args))
    for r in range(args.runs):
        order = counts[:]
        random.Random(args.seed + r).shuffle(order)
        for workers in order:
            entry = record["configs"].setdefault(str(workers), {"workers": workers, "runs": []})
            if len(entry["runs"]) > r:
                continue  # measured before the record was resumed
            load = os.getloadavg()[0]
            run = {**one_run(loaded.dataset, dict(loaded.extra), workers, args), "round": r, "load": load}
            entry["runs"].append(run)
            entry.update(summary([x["samples_per_s"] for x in entry["runs"]]))
            print(
                f"round {r + 1}/{args.runs}  {workers:>3} workers  {run['samples_per_s']:8.1f} samples/s "
                f"({run['batches']} batches in {run['seconds']:.1f} s, load {load:.1f})",
                flush=True,
            )
            if args.json:
                Path(args.json).write_text(json.dumps(record, indent=1) + "\n")
    for workers in counts:
        e = record["configs"][str(workers)]
        sd = "–" if e["sd_rel"] is None else f"{100 * e['sd_rel']:.1f}%"
        runs = ", ".join(f"{x['samples_per_s']:.0f}" for x in e["runs"])
        print(f"{workers:>3} workers: mean {e['mean']:.1f} samples/s, sd {sd} ({runs})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
