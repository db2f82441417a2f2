"""in_order=False against in order, when samples are occasionally slow: loadertop's sweep beside a plain loop.

    python benchmarks/in_order.py [--rounds 3] [--seconds 4] [--out benchmarks/IN_ORDER.md]

The dataset (tests/data/slow_samples.py): every 50th sample sleeps 50 ms, the rest 1 ms; 2 workers, batches of 1.
In order, the batches the idle worker has ready wait behind the one stuck on a slow sample; unordered, they are
handed out as they finish. Per round, in a shuffled order: a plain loop (a fresh DataLoader, `for batch in loader`,
time.perf_counter, the start-up buffer skipped) for each setting, then loadertop's sweep over both. The speed-up
is a property of the machine's load (a busy CPU slows the 1 ms samples and the main process alike and dilutes
it), so it is recorded here rather than asserted by the suite.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from loadertop.core.engine.drive.driver import Sweep
from loadertop.core.model.config import Settings

HERE = Path(__file__).resolve().parent
SPEC = f"{HERE.parent / 'tests' / 'data' / 'slow_samples.py'}:build"
WORKERS = 2


def plain_loop(in_order: bool, seconds: float) -> tuple[float, float]:
    """(samples/s, p99 wait in ms) of a fresh loader, after the start-up buffer (prefetch × workers + workers)."""
    import torch.utils.data as tud

    from loadertop.core.datasets.spec import load_dataset

    dataset, _ = load_dataset(SPEC)
    loader = tud.DataLoader(dataset, batch_size=1, num_workers=WORKERS, prefetch_factor=2, in_order=in_order)
    it = iter(loader)
    for _ in range(2 * WORKERS + WORKERS):
        next(it)
    waits: list[float] = []
    start = last = time.perf_counter()
    while last - start < seconds:
        next(it)
        now = time.perf_counter()
        waits.append(now - last)
        last = now
    del it
    waits.sort()
    return len(waits) / (last - start), waits[int(0.99 * (len(waits) - 1))] * 1e3


def loadertop_sweep(seconds: float) -> dict[bool, tuple[float, float, str]]:
    """in_order -> (samples/s, p99 ms, the recommendation's reason) from one sweep over both settings."""
    with tempfile.TemporaryDirectory() as runs:
        settings = Settings(dataset=SPEC, workers=(WORKERS,), in_order=(True, False), batch_sizes=(1,),
                            start_methods=("fork",), trial_seconds=seconds)  # fmt: skip
        sweep = Sweep(settings, out_dir=Path(runs))
        list(sweep.events())
    result = sweep.result
    assert result is not None
    reason = result.recommendation.reason if result.recommendation else "no recommendation"
    return {t.config.in_order: (t.samples_per_s or 0.0, t.wait_ms_p99 or 0.0, reason) for t in result.trials}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--out", type=Path, default=HERE / "IN_ORDER.md")
    args = parser.parse_args()
    lines = ["| round | ruler in order | ruler unordered | ruler speed-up | loadertop in order | loadertop "
             "unordered | loadertop speed-up | p99 ms in order / unordered (loadertop) | chosen |",
             "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for round_ in range(1, args.rounds + 1):
        ruler: dict[bool, tuple[float, float]] = {}
        for in_order in random.sample([True, False], 2):
            ruler[in_order] = plain_loop(in_order, args.seconds)
        ours = loadertop_sweep(args.seconds)
        chosen = "in_order=False" if "in_order=False" in ours[False][2] else "in order"
        lines.append(
            f"| {round_} | {ruler[True][0]:.0f} | {ruler[False][0]:.0f} | {ruler[False][0] / ruler[True][0]:.2f}× "
            f"| {ours[True][0]:.0f} | {ours[False][0]:.0f} | {ours[False][0] / ours[True][0]:.2f}× "
            f"| {ours[True][1]:.1f} / {ours[False][1]:.1f} | {chosen} |"
        )
        print(lines[-1], flush=True)
    stamp = time.strftime("%Y-%m-%d %H:%M")
    text = (f"# in_order=False with occasionally slow samples\n\n`python benchmarks/in_order.py` ({stamp}, "
            f"{args.rounds} rounds, {args.seconds:g} s per measurement)\n\n" + "\n".join(lines) + "\n")  # fmt: skip
    args.out.write_text(text)


if __name__ == "__main__":
    main()
