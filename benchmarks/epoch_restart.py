"""The epoch boundary as a cost: loadertop's rows with and without persistent workers beside a plain loop's.

    python benchmarks/epoch_restart.py --result after.json [--epochs 3] [--runs 2] [--clips 300]

The workload is benchmarks/workloads/audio_logmel.py with `lazy=1`: a library imported inside `__getitem__`, which
every fresh worker pays on its first sample, and a few hundred clips, so epochs are short and each one restarts its
workers. `--result` is a sweep's JSON on it (the default sweep: `loadertop --headless --dataset
benchmarks/workloads/audio_logmel.py:audio --dataset-arg clips=300 --dataset-arg lazy=1 --json after.json`); its
rows at each worker count it measured with persistent workers are listed, and each of those configurations is
measured again in rounds, interleaved (a shuffled order per round, so the machine's load at each moment weighs on
both columns alike): loadertop's own trial of it (a grid sweep of that one configuration: nothing added) and a plain
loop, a fresh DataLoader per run, `for batch in loader` over `--epochs` whole epochs after a first one (its start-up
apart, as loadertop reports first_batch apart), time.perf_counter from the first epoch's end to the last one's, so
every boundary crossed is in the time. The plain loop's boundary wait is the time from an epoch's last batch to the
next one's first. It prints the table recorded in benchmarks/EPOCH_RESTART.md.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE / "workloads")]

from loadertop.core.engine.verdict.band import merge_repeats  # noqa: E402
from loadertop.core.model.results import SweepResult  # noqa: E402

Config = tuple[int, bool]  # (num_workers, persistent_workers)
SPEC = f"{HERE / 'workloads' / 'audio_logmel.py'}:audio"


def plain_loop(dataset: Any, config: Config, epochs: int, batch_size: int) -> tuple[float, float]:
    """(samples/s over `epochs` whole epochs after the first, the median wait at their boundaries in s)."""
    from torch.utils.data import DataLoader

    workers, persistent = config
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, drop_last=True, num_workers=workers,
                        persistent_workers=persistent, multiprocessing_context="fork")  # fmt: skip
    for _ in loader:  # the first epoch: the start-up, reported apart
        pass
    samples, waits = 0, []
    start = last = time.perf_counter()
    for _ in range(epochs):
        first = True
        for batch in loader:
            now = time.perf_counter()
            if first:
                waits.append(now - last)
                first = False
            samples += len(batch[1])
            last = now
    del loader
    return samples / (last - start), statistics.median(waits)


def loadertop_rows(result: SweepResult) -> dict[Config, tuple[float, float | None]]:
    """(workers, persistent) -> (the sweep's samples/s over its runs, its epoch restart s) at each worker count that
    has a persistent row."""
    ok = merge_repeats([t for t in result.trials if t.status == "ok" and t.samples_per_s is not None])
    kept = {t.config.num_workers for t in ok if t.config.persistent_workers}
    return {
        (t.config.num_workers, t.config.persistent_workers): (t.samples_per_s or 0.0, t.epoch_restart_s)
        for t in ok
        if t.config.num_workers in kept
    }


def loadertop_trial(config: Config, clips: int, batch_size: int) -> tuple[float, float]:
    """(samples/s, epoch restart s) of loadertop's own trial of this one configuration (a grid of one, so nothing
    is added), measured in the same round as the plain loop."""
    from loadertop.core.engine.drive.driver import Sweep
    from loadertop.core.model.config import Settings

    workers, persistent = config
    settings = Settings(dataset=SPEC, dataset_args=(("clips", str(clips)), ("lazy", "1")), workers=(workers,),
                        persistent_workers=(persistent,), batch_sizes=(batch_size,), start_methods=("fork",),
                        search="grid")  # fmt: skip
    with tempfile.TemporaryDirectory() as runs:
        sweep = Sweep(settings, out_dir=Path(runs))
        list(sweep.events())
    assert sweep.result is not None
    (trial,) = sweep.result.trials
    return trial.samples_per_s or 0.0, trial.epoch_restart_s or 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--result", type=Path, required=True)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--clips", type=int, default=300)
    args = parser.parse_args()
    import audio_logmel

    result = SweepResult.from_dict(json.loads(args.result.read_text()))
    rows = loadertop_rows(result)
    built = audio_logmel.audio(clips=args.clips, lazy=1)
    dataset, batch = built["dataset"], result.trials[0].config.batch_size
    plain: dict[Config, list[tuple[float, float]]] = {c: [] for c in rows}
    ours: dict[Config, list[tuple[float, float]]] = {c: [] for c in rows}
    rng = random.Random(0)
    for run in range(args.runs):
        order = [(c, way) for c in rows for way in ("plain", "loadertop")]
        rng.shuffle(order)
        for config, way in order:
            if way == "plain":
                got = plain_loop(dataset, config, args.epochs, batch)
                plain[config].append(got)
            else:
                got = loadertop_trial(config, args.clips, batch)
                ours[config].append(got)
            print(f"run {run + 1}: w={config[0]} persistent={config[1]} {way}: {got[0]:.1f} samples/s, "
                  f"boundary {got[1]:.2f} s", flush=True)  # fmt: skip
    print(table(rows, plain, ours))


def table(
    rows: dict[Config, tuple[float, float | None]],
    plain: dict[Config, list[tuple[float, float]]],
    ours: dict[Config, list[tuple[float, float]]],
) -> str:
    lines = [
        "| workers | persistent | the sweep's row | loadertop trial, interleaved (runs) | plain loop (runs) | "
        "loadertop vs plain | sweep's epoch restart | loadertop trial's | plain loop's boundary wait |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for config in sorted(rows):
        sps, restart = rows[config]
        mine, theirs = statistics.mean(r[0] for r in ours[config]), statistics.mean(r[0] for r in plain[config])
        each = ", ".join(f"{r[0]:.1f}" for r in ours[config])
        each_plain = ", ".join(f"{r[0]:.1f}" for r in plain[config])
        shown = "–" if restart is None else f"{restart:.2f} s"
        wait = statistics.median(r[1] for r in plain[config])
        restart_ours = statistics.median(r[1] for r in ours[config])
        lines.append(f"| {config[0]} | {'on' if config[1] else 'off'} | {sps:.1f} | {mine:.1f} ({each}) | "
                     f"{theirs:.1f} ({each_plain}) | {mine / theirs - 1.0:+.0%} | {shown} | {restart_ours:.2f} s | "
                     f"{wait:.2f} s |")  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    main()
