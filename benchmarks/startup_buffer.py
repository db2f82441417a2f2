"""How much the start-up prefetch buffer inflates throughput, at 16 and 32 workers on an I/O-heavy loader.

    python benchmarks/startup_buffer.py [--workers 16,32] [--trial-seconds 20]

Numbers per worker count, all on real DataLoaders:
  plain loop, clock after first batch   time 100 batches right after the first one
  plain loop, first step slow           the same, but the first training step takes 3 s (CUDA init, cudnn
                                        autotune, torch.compile): meanwhile the workers fill the prefetch
                                        buffer, and the loop times the buffer draining
  loadertop, no skip                    loadertop's measured loop with the start-up skip turned off
  loadertop, skip                       loadertop's measured loop (skips prefetch × workers + workers batches,
                                        then measures blocks until stable): what it reports
"""

from __future__ import annotations

import argparse
import time

from loadertop.core.engine.drive.driver import Sweep
from loadertop.core.model.config import Settings

SPEC = "synthetic:io_ms=40,cpu_ms=0.2,kb=16"  # each worker: 25 samples/s, almost all of it waiting


def naive_loop(workers: int, batches: int, first_step_s: float = 0.0, batch_size: int = 32) -> float:
    """samples/s over `batches` batches after the first, like `for batch in loader` with a stopwatch."""
    import torch.utils.data as tud

    from loadertop.core.datasets.spec import load_dataset

    dataset, _ = load_dataset(SPEC)
    loader = tud.DataLoader(dataset, batch_size=batch_size, num_workers=workers, prefetch_factor=2)
    it = iter(loader)
    next(it)  # workers are up once the first batch is here; the article's loop starts its clock around here too
    time.sleep(first_step_s)  # the first training step
    start = time.perf_counter()
    for _ in range(batches):
        next(it)
    elapsed = time.perf_counter() - start
    del it
    return batches * batch_size / elapsed


def loadertop_trial(workers: int, skip: bool, trial_seconds: float) -> tuple[float, float, bool]:
    settings = Settings(dataset=SPEC, workers=(workers,), skip_warmup=skip, trial_seconds=trial_seconds)
    trial = Sweep(settings).run().trials[0]
    assert trial.samples_per_s is not None, trial.error
    return trial.samples_per_s, trial.spread or 0.0, trial.stable


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", default="16,32")
    parser.add_argument("--trial-seconds", type=float, default=20.0)
    args = parser.parse_args()
    print(f"dataset {SPEC}, batch_size 32, prefetch_factor 2; ideal = workers × 25 samples/s")
    print("| workers | ideal | plain loop | plain loop, first step 3 s | loadertop, no skip | loadertop, skip |")
    print("|---|---|---|---|---|---|")
    for workers in (int(w) for w in args.workers.split(",")):
        naive = naive_loop(workers, batches=100)
        slow_first = naive_loop(workers, batches=100, first_step_s=3.0)
        no_skip, ns_spread, ns_stable = loadertop_trial(workers, False, args.trial_seconds)
        skip, s_spread, s_stable = loadertop_trial(workers, True, args.trial_seconds)
        print(
            f"| {workers} | {workers * 25} | {naive:.0f} | {slow_first:.0f} | {no_skip:.0f} ± {ns_spread:.1%}"
            f"{'' if ns_stable else ' (not stable)'} | {skip:.0f} ± {s_spread:.1%}"
            f"{'' if s_stable else ' (not stable)'} |"
        )


if __name__ == "__main__":
    main()
