"""Tune in place vs an exhaustive sweep, on two synthetic models with a fixed training step.

    python benchmarks/tune_bench.py [--budget 30] [--max-workers 12] [--step-ms 5] [--models io,cpu]
    python benchmarks/tune_bench.py --models io6 --batch 32 --step-ms 20 --budget 60 --max-workers 0 \
        --sweep-workers 0,1,2,4,8,12,16,24,32      # issue 18's case: tune's own default range

io:  each sample sleeps 2 ms (I/O wait, little CPU); cpu: each sample is 1 ms of busy work; io6: each sample sleeps
6 ms and then works 0.25 ms (issue 18's I/O-bound loader). The training step sleeps `--step-ms` per batch (a GPU
step leaves the CPU free), so the step's ceiling is batch_size / step time. `--max-workers 0` leaves tune's range
at its default (as `loadertop.tune(loader, budget_s=...)` has it).

For each model: `loadertop.tune(loader, budget_s=...)` inside a training loop until it settles, then three more
epochs with the choice (throughput after settling, each epoch's start-up buffer skipped); and an exhaustive sweep
over the same num_workers range measured the same way (a fresh loader per point, its start-up buffer skipped,
`--span` seconds of steps). Prints a markdown table (benchmarks/TUNE.md keeps the results).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from torch.utils.data import DataLoader, Dataset

import loadertop
from loadertop.core.job.resume import start_up_buffer
from loadertop.core.model.config import TrialConfig

SAMPLES = 4000


class Synthetic(Dataset[int]):
    def __init__(self, kind: str, sample_ms: float, busy_ms: float = 0.0) -> None:
        self.kind, self.sample_s, self.busy_s = kind, sample_ms / 1000.0, busy_ms / 1000.0

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, i: int) -> int:
        if self.kind == "io":
            time.sleep(self.sample_s)
        busy = self.sample_s if self.kind == "cpu" else self.busy_s
        end = time.perf_counter() + busy
        x = 0
        while time.perf_counter() < end:
            x += 1
        return i


def steps(
    batches: Any, step_s: float, skip: int, span_s: float | None, seen: list[int] | None = None
) -> tuple[int, float]:
    """Run training steps; (samples, seconds) after the first `skip` batches, up to `span_s` seconds if given.
    `seen` collects every index handed out."""
    samples, start = 0, None
    for n, batch in enumerate(batches):
        if seen is not None:
            seen += batch.tolist()
        time.sleep(step_s)
        if n + 1 == skip:
            start = time.perf_counter()
        elif n + 1 > skip:
            start = start if start is not None else time.perf_counter()
            samples += len(batch)
            if span_s is not None and time.perf_counter() - start >= span_s:
                break
    return samples, time.perf_counter() - start if start is not None else 0.0


def sweep_point(data: Synthetic, nw: int, batch: int, step_s: float, span_s: float) -> float:
    loader = DataLoader(data, batch_size=batch, num_workers=nw, prefetch_factor=2 if nw else None)
    it = iter(loader)
    skip = start_up_buffer(TrialConfig(nw, batch, 2 if nw else None))
    samples, seconds = steps(it, step_s, skip, span_s)
    del it
    return samples / seconds if seconds > 0 else 0.0


def run_tune(data: Synthetic, budget: float, max_workers: int | None, batch: int, step_s: float) -> dict[str, Any]:
    loader = DataLoader(data, batch_size=batch, shuffle=True)
    tuned = loadertop.tune(loader, budget_s=budget, max_workers=max_workers)
    t0 = time.perf_counter()
    exact = True  # every epoch saw every sample exactly once
    for _ in range(1000):
        if tuned.choice is not None:
            break
        seen: list[int] = []
        steps(iter(tuned), step_s, 0, None, seen)
        exact = exact and sorted(seen) == list(range(len(data)))
    settle_wall = time.perf_counter() - t0
    rates = []
    for _ in range(3):
        skip = start_up_buffer(tuned.choice)
        seen = []
        samples, seconds = steps(iter(tuned), step_s, skip, None, seen)
        exact = exact and sorted(seen) == list(range(len(data)))
        rates.append(samples / seconds)
    return {
        "choice": tuned.choice,
        "tuning_s": tuned.tuning_s,
        "wall_s": settle_wall,
        "switch_s": sum(s.switch_s for s in tuned.trace),
        "trials": len(tuned.trace),
        "after": sorted(rates)[1],
        "trace": [s.message for s in tuned.trace],
        "decisions": list(getattr(tuned, "decisions", [])),
        "snippet": tuned.snippet,
        "exact": exact,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=30.0)
    ap.add_argument("--max-workers", type=int, default=12)
    ap.add_argument("--step-ms", type=float, default=5.0)
    ap.add_argument("--span", type=float, default=3.0)
    ap.add_argument("--models", default="io,cpu")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--sweep-workers", default="", help="the sweep's worker counts (default 0..--max-workers)")
    args = ap.parse_args()
    step_s = args.step_ms / 1000.0
    ceiling = args.batch / step_s
    models = {"io": ("io", 2.0), "cpu": ("cpu", 1.0), "io6": ("io", 6.0, 0.25)}
    counts = [int(n) for n in args.sweep_workers.split(",")] if args.sweep_workers else range(args.max_workers + 1)
    rows = []
    for name in args.models.split(","):
        data = Synthetic(*models[name])
        tuned = run_tune(data, args.budget, args.max_workers or None, args.batch, step_s)
        print(
            f"loadertop.tune settled in {tuned['wall_s']:.1f} s of wall time; every epoch saw every sample exactly "
            f"once: {tuned['exact']}; after settling: {tuned['after']:.0f} samples/s, "
            f"{tuned['after'] / ceiling:.0%} of the step's ceiling",
            file=sys.stderr,
        )
        sweep = {nw: sweep_point(data, nw, args.batch, step_s, args.span) for nw in counts}
        best_nw = max(sweep, key=lambda n: sweep[n])
        print(f"\n{name}: tune trace", file=sys.stderr)
        for line in tuned["trace"]:
            print(f"  {line}", file=sys.stderr)
        for line in tuned["decisions"]:
            print(f"  decided: {line}", file=sys.stderr)
        print(f"  sweep: {', '.join(f'{n}:{sweep[n]:.0f}' for n in sweep)}", file=sys.stderr)
        rows.append((name, tuned, sweep, best_nw, ceiling))
    print("\n| model | tune chose | samples/s after | sweep best | sweep at tune's choice | after / best "
          "| after / ceiling | tuning s (switching) | trials |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for name, t, sweep, best_nw, ceil in rows:
        nw = t["choice"].num_workers
        print(
            f"| {name} | {t['choice'].label()} | {t['after']:.0f} | w={best_nw}: {sweep[best_nw]:.0f} | "
            f"{sweep.get(nw, float('nan')):.0f} | {t['after'] / sweep[best_nw]:.0%} | {t['after'] / ceil:.0%} | "
            f"{t['tuning_s']:.1f} ({t['switch_s']:.1f}) | {t['trials']} |"
        )
    print(f"\nstep {args.step_ms:g} ms, batch {args.batch}: the step's ceiling is {ceiling:.0f} samples/s")


if __name__ == "__main__":
    main()
