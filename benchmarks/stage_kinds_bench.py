"""`loadertop stages` beyond a map-style Dataset: WebDataset shards and Hugging Face streaming (the read apart from
the decode) and a torchdata.nodes graph (its source and map functions), each table with its stages' sum against
the 0-worker time; then each graph's thread workers' ceiling against the graph run as built (2 thread workers,
a plain loop, `perf_counter`: a ruler loadertop did not build), its map function's work in Python code (which
holds the GIL) or in torch's C code (which releases it).

    python benchmarks/stage_kinds_bench.py [--seconds 5] [--samples 3000] [--out benchmarks/STAGE_KINDS.md]

The shards are built here (no download): 2 tar shards of 64 random 96×96 JPEGs with a label each, and a Hugging
Face dataset of 512 rows (64 floats and a label) saved in 2 Arrow files, read with `streaming=1`.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import loadertop  # noqa: E402
from loadertop.faces.headless_stages import print_stages  # noqa: E402

GRAPH = f"{ROOT / 'tests' / 'stage_datasets.py'}:graph"


def build(folder: Path) -> dict[str, tuple[str, dict[str, str]]]:
    """The pipelines' (spec, dataset arguments), their data written under `folder`."""
    from stage_datasets import write_hf, write_wds

    (folder / "wds").mkdir()
    return {
        "webdataset: tar shards of JPEGs": (f"webdataset:{write_wds(folder / 'wds', 2, 64)}", {}),
        "Hugging Face streaming (streaming=1)": (f"hf:{write_hf(folder / 'hf', 512)}:streaming=1", {}),
        "graph: sampler → thread mapper (1 ms of Python code) → Batcher → collate": (GRAPH, {"work": "python"}),
        "graph: sampler → thread mapper (torch.mm) → Batcher → collate": (GRAPH, {"work": "torch"}),
    }


def table(report: Any) -> str:
    out = io.StringIO()
    print_stages(report, out)
    return out.getvalue().rstrip()


def graph_as_built(work: str, seconds: float) -> tuple[float, float]:
    """(samples/s, CPUs used) of the graph with its 2 thread workers, as the user built it."""
    import torch
    from stage_datasets import graph
    from torchdata.nodes import Loader

    from loadertop.core.trial.graph import chain

    torch.set_num_threads(1)
    loader = Loader(graph(work))
    batches = iter(loader)
    for _ in range(4):  # its threads started, its prefetch filled
        next(batches)
    samples, start, cpu = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - start < seconds:
        try:
            samples += int(next(batches).shape[0])
        except StopIteration:
            batches = iter(loader)
    elapsed = time.perf_counter() - start
    used = (time.process_time() - cpu) / elapsed
    # torchdata's threads must be stopped: left running at the interpreter's exit, they abort it.
    for node in chain(loader):
        stop = getattr(getattr(node, "_it", None), "_shutdown", None)
        if stop is not None:
            stop()
    return samples / elapsed, used


def thread_check(report: Any, work: str) -> list[str]:
    """The thread workers' ceiling the report gives, against the graph run as built."""
    gil = next(c for c in report.ceilings if c.name.startswith("thread workers"))
    runs = [graph_as_built(work, 3.0) for _ in range(3)]
    return [f"Its thread ceiling against the graph as built (2 thread workers, a Prefetcher; 3 runs of 3 s after 4 "
            f"batches): `loadertop stages` says ~{gil.samples_per_s:.0f} samples/s ({gil.basis}); as built:\n",
            *(f"- {rate:.0f} samples/s, the process using {cpus:.2f} CPUs" for rate, cpus in runs),
            "\nThe range is reached only where the process gets the CPUs it needs: one CPU for the low end, two for "
            "the high end here. Where it got less (the CPUs it used are listed), the runs show only that the graph "
            "stays under the range, not which end it would reach.\n"]  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--samples", type=int, default=3000)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "STAGE_KINDS.md")
    args = parser.parse_args()
    os.environ["COLUMNS"] = "110"
    load = [f"{os.getloadavg()[0]:.1f}"]
    lines = [f"# `loadertop stages` by kind of pipeline\n\n`python benchmarks/stage_kinds_bench.py --seconds "
             f"{args.seconds:g} --samples {args.samples}` on {time.strftime('%Y-%m-%d')}, a VM of "
             f"{os.cpu_count()} CPUs shared with other people's runs (load average LOAD): the wall figures carry "
             "that load, the CPU figures much less.\n"]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for name, (spec, dataset_args) in build(Path(tmp)).items():
            report = loadertop.stages(spec, dataset_args=dataset_args, seconds=args.seconds, samples=args.samples)
            lines += [f"## {name}\n", "```", table(report).replace(tmp, "$TMP"), "```\n"]
            if spec == GRAPH:
                lines += thread_check(report, dataset_args["work"])
    load.append(f"{os.getloadavg()[0]:.1f}")
    text = "\n".join(lines).replace("LOAD", f"{load[0]} at the start, {load[1]} at the end")
    args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
