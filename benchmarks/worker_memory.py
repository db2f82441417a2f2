"""Per-worker USS against RSS: what each worker really costs versus what `top` says.

    python benchmarks/worker_memory.py [--workers 4] [--dataset synthetic]

RSS counts every page the worker can touch, including the parent's copy-on-write pages (torch, Python,
the dataset object) that are shared, not copied. USS counts only pages private to the worker.
"""

from __future__ import annotations

import argparse

from loadertop.core.engine.drive.driver import Sweep
from loadertop.core.model.config import Settings
from loadertop.core.model.events import ProbeSample


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--dataset", default="synthetic")
    args = parser.parse_args()
    last: ProbeSample | None = None
    sweep = Sweep(Settings(dataset=args.dataset, workers=(args.workers,), trial_seconds=8, target_spread=0.0))
    for event in sweep.events():
        if (
            isinstance(event, ProbeSample)
            and len(event.workers) == args.workers
            and all(w.uss_mb for w in event.workers)
        ):
            last = event
    assert last is not None and sweep.result is not None
    trial = sweep.result.trials[0]
    print(f"{args.workers} workers, {args.dataset}; main process RSS {last.main_rss_mb:.0f} MB")
    print("| worker pid | RSS MB (includes shared pages) | USS MB (private) | RSS / USS |")
    print("|---|---|---|---|")
    for w in last.workers:
        assert w.uss_mb is not None
        print(f"| {w.pid} | {w.rss_mb:.0f} | {w.uss_mb:.1f} | {w.rss_mb / w.uss_mb:.0f}× |")
    rss_sum = sum(w.rss_mb for w in last.workers) + (last.main_rss_mb or 0)
    print(f"| **total** (main + workers) | {rss_sum:.0f} (sum of RSS) | PSS {last.total_pss_mb:.0f} | |")
    medians = [round(u, 1) for u in trial.worker_uss_mb]
    print(f"trial: {trial.samples_per_s:.0f} samples/s, worker USS medians {medians}")


if __name__ == "__main__":
    main()
