"""`loadertop stages` on four real pipelines, and three of its suggestions followed by hand.

    python benchmarks/stages_bench.py [--seconds 5] [--measure-s 4] [--repeats 3] [--out benchmarks/STAGES.md]

The pipelines (built locally, nothing downloaded; data generated once into the bench cache, bench_cache.py):
- torchvision ImageFolder with its training transforms (benchmarks/workloads/tv_imagefolder.py, 2500 JPEGs);
- audio: soundfile read + log-mel + masking (benchmarks/workloads/audio_logmel.py, 400 clips);
- text: a BPE tokenizer trained locally with `tokenizers` (benchmarks/workloads/text_tokens.py, 20000 lines);
- webdataset: the same 2500 JPEGs in 8 tar shards, read and decoded by loadertop's `webdataset:` spec (size=160).
Each is measured by `loadertop.stages` (0 workers, one process) and its headless table kept, with the stages' sum
against the 0-worker time, the ceilings and the profiling's overhead.

Then suggestions the reports make, followed by hand: the ceiling the report predicted against the throughput a real
DataLoader measures after the change (usable CPUs as workers, persistent, batch 32, a consumer that does nothing),
before and after in turn, `--repeats` times; the changed pipeline is measured by `loadertop stages` too. The changed
pipelines are this module's factories (a file spec: benchmarks/stages_bench.py:NAME).
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve()
WORKLOADS = ROOT / "benchmarks" / "workloads"
sys.path.insert(0, str(WORKLOADS))

import bench_cache  # noqa: E402  (benchmarks/workloads, put on the path above)

IMAGES = 2500
SHARDS = 8
PIPELINES = {
    "torchvision ImageFolder, training transforms": (f"{WORKLOADS}/tv_imagefolder.py:imagefolder", {}),
    "audio: soundfile + log-mel + masking": (f"{WORKLOADS}/audio_logmel.py:audio", {}),
    "text: a BPE tokenizer (tokenizers)": (f"{WORKLOADS}/text_tokens.py:text", {}),
    "webdataset: tar shards of JPEGs": (None, {"size": "160"}),  # the spec names the shards once they exist
}
# (pipeline, the advice rule followed, the changed pipeline's factory here, what was changed)
FOLLOWED = (
    ("torchvision ImageFolder, training transforms", "uint8", "imagefolder_uint8",
     "ToTensor + Normalize → PILToTensor (uint8 crosses; Normalize is the training step's, on the GPU)"),
    ("torchvision ImageFolder, training transforms", "cache", "imagefolder_cached",
     "every JPEG decoded once before the workers fork; the loader returns the cached image, the transforms stay"),
    ("text: a BPE tokenizer (tokenizers)", "cache", "text_cached",
     "every line tokenized once (encode_batch), kept on disk and loaded before the workers fork; a sample is a "
     "row of two tensors"),
)  # fmt: skip


# -- the changed pipelines (built in the stages child and in the throughput measurement) --------------------------


def _imagefolder(transform: Any) -> Any:
    import tv_imagefolder

    folder = bench_cache.cache_root() / f"tv-imagefolder-{IMAGES}-s0"
    bench_cache.ensure(folder, lambda tmp: tv_imagefolder.make_jpegs(tmp, IMAGES, 0))
    torchvision = tv_imagefolder.import_torchvision()
    return torchvision.datasets.ImageFolder(str(folder), transform=transform(torchvision))


def imagefolder_uint8() -> Any:
    """The training transforms without the float conversion: uint8 CHW tensors (normalise on the GPU)."""

    def transform(torchvision: Any) -> Any:
        t = torchvision.transforms
        return t.Compose([t.RandomResizedCrop(224), t.RandomHorizontalFlip(), t.PILToTensor()])

    return _imagefolder(transform)


class CachedLoader:
    """ImageFolder's loader over images decoded once (in the main process: fork workers share them)."""

    def __init__(self, paths: list[str]) -> None:
        from PIL import Image

        self.images: dict[str, Any] = {}
        for path in paths:
            with open(path, "rb") as handle:
                self.images[path] = Image.open(handle).convert("RGB")

    def __call__(self, path: str) -> Any:
        return self.images[path]


def imagefolder_cached() -> Any:
    """The same pipeline with the read and decode cached: the random transforms still run per sample."""
    import tv_imagefolder

    dataset = _imagefolder(tv_imagefolder.training_transforms)
    dataset.loader = CachedLoader([path for path, _ in dataset.samples])
    return dataset


class PreTokenized:
    """Every line encoded once: a sample is one row of `input_ids` and `attention_mask`."""

    def __init__(self, ids: Any, mask: Any) -> None:
        self.ids, self.mask = ids, mask

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"input_ids": self.ids[index], "attention_mask": self.mask[index]}


def text_cached() -> PreTokenized:
    """The text pipeline's lines tokenized once (encode_batch) and kept in the bench cache as two tensors."""
    import text_tokens
    import torch

    def write(tmp: Path) -> None:
        source = text_tokens.text()
        encodings = source.tokenizer.encode_batch(source.lines)
        torch.save(torch.tensor([e.ids for e in encodings], dtype=torch.int64), tmp / "ids.pt")
        torch.save(torch.tensor([e.attention_mask for e in encodings], dtype=torch.int64), tmp / "mask.pt")

    folder = bench_cache.ensure(bench_cache.cache_root() / "text-bpe-20000-s0-tokenized-256", write)
    return PreTokenized(torch.load(folder / "ids.pt"), torch.load(folder / "mask.pt"))


def make_shards() -> Path:
    """The ImageFolder's JPEGs in SHARDS tar shards (key, .jpg, .cls), once, in the bench cache."""
    source = _imagefolder(lambda tv: None)

    def write(tmp: Path) -> None:
        for shard in range(SHARDS):
            with tarfile.open(tmp / f"shard-{shard:03d}.tar", "w") as tar:
                for i, (path, label) in enumerate(source.samples[shard::SHARDS]):
                    for name, data in ((f"{shard}_{i:05d}.jpg", Path(path).read_bytes()),
                                       (f"{shard}_{i:05d}.cls", str(label).encode())):  # fmt: skip
                        info = tarfile.TarInfo(name)
                        info.size = len(data)
                        tar.addfile(info, io.BytesIO(data))

    return bench_cache.ensure(bench_cache.cache_root() / f"wds-shards-{IMAGES}", write)


# -- measuring ------------------------------------------------------------------------------------------------------


def cpu_of(pids: list[int]) -> float:
    import psutil

    total = 0.0
    for pid in pids:
        times = psutil.Process(pid).cpu_times()
        total += times.user + times.system
    return total


def throughput(spec: str, workers: int, seconds: float) -> tuple[float, float]:
    """(samples/s, CPU seconds per sample of the main process and its workers) of a real DataLoader over the
    spec's dataset: `workers` persistent workers, batch 32, shuffled, a consumer that does nothing."""
    import psutil
    from torch.utils.data import DataLoader

    from loadertop.core.datasets.spec import load_spec

    loaded = load_spec(spec)
    loader = DataLoader(loaded.dataset, batch_size=32, num_workers=workers, shuffle=True, persistent_workers=True,
                        prefetch_factor=4, drop_last=True)  # fmt: skip
    batches = iter(loader)
    for _ in range(4 * workers):  # the workers' start and their first batches
        next(batches)
    pids = [os.getpid(), *(p.pid for p in psutil.Process().children())]
    start, cpu, samples = time.perf_counter(), cpu_of(pids), 0
    while time.perf_counter() - start < seconds:
        try:
            next(batches)
        except StopIteration:  # an epoch's end: the persistent workers go on
            batches = iter(loader)
            continue
        samples += 32  # drop_last: every batch is whole
    elapsed, used = time.perf_counter() - start, cpu_of(pids) - cpu
    del batches, loader
    return samples / elapsed, used / max(1, samples)


def report_text(report: Any, width: int = 100) -> str:
    from loadertop.faces.headless_stages import print_stages

    os.environ["COLUMNS"] = str(width)
    out = io.StringIO()
    print_stages(report, out)
    return out.getvalue().rstrip()


def key_figures(name: str, report: Any) -> str:
    """One Markdown row: the stages' sum against the 0-worker time, the ceiling, the overheads."""
    from loadertop.core.engine import pct, rate

    m = report.measurement
    unattributed = next((r.stage.wall_s for r in report.rows if r.stage.kind == "unattributed"), None)
    return (
        f"| {name} | {report.stages_wall_s * 1000:.2f} | {report.reference_wall_s * 1000:.2f} | "
        f"{pct(-report.gap, signed=True)} | {'–' if unattributed is None else f'{unattributed * 1000:.2f}'} | "
        f"{report.pipeline_cpu_s * 1000:.2f} | {rate(report.ceilings[0].samples_per_s)} | "
        f"{pct(m.hooks_overhead, signed=True)} | {pct(m.profile_overhead, signed=True)} | {m.samples} |"
    )


def measure_pipelines(seconds: float) -> dict[str, Any]:
    import loadertop

    shards = make_shards()
    reports = {}
    for name, (spec, args) in PIPELINES.items():
        spec = spec or f"webdataset:{shards}/shard-{{000..{SHARDS - 1:03d}}}.tar"
        print(f"stages: {name} ({spec})", file=sys.stderr)
        reports[name] = loadertop.stages(spec, dataset_args=args, seconds=seconds)
    return reports


def follow(reports: dict[str, Any], seconds: float, measure_s: float, repeats: int) -> list[dict[str, Any]]:
    """Each followed suggestion: the advice's predicted ceiling, the changed pipeline's own report, and both
    pipelines' real throughput (before and after in turn)."""
    import loadertop
    from loadertop.core.machine.facts import usable_cpus

    workers = usable_cpus()
    found = []
    for pipeline, rule, factory, change in FOLLOWED:
        before = reports[pipeline]
        advice = next((a for a in before.advice if a.rule == rule), None)
        after_spec = f"{HERE}:{factory}"
        print(f"followed: {pipeline}: {rule} ({after_spec})", file=sys.stderr)
        after = loadertop.stages(after_spec, seconds=seconds)
        runs: dict[str, list[tuple[float, float]]] = {"before": [], "after": []}
        for _ in range(repeats):
            runs["before"].append(throughput(before.measurement.spec, workers, measure_s))
            runs["after"].append(throughput(after_spec, workers, measure_s))
        found.append({"pipeline": pipeline, "rule": rule, "change": change, "advice": advice, "before": before,
                      "after": after, "runs": runs, "workers": workers})  # fmt: skip
    return found


def best(runs: list[tuple[float, float]]) -> tuple[float, float, float]:
    """(the best samples/s, its CPU seconds per sample, the median samples/s): on a shared machine the best run is
    the one the others' jobs disturbed least."""
    top = max(runs)
    return top[0], top[1], statistics.median(r for r, _ in runs)


def followed_rows(found: list[dict[str, Any]]) -> list[str]:
    """One Markdown row per followed suggestion: predicted and measured, side by side."""
    from loadertop.core.engine import rate

    rows = []
    for f in found:
        before, cpu_before, mid_before = best(f["runs"]["before"])
        after, cpu_after, mid_after = best(f["runs"]["after"])
        now, advice = f["before"].ceilings[0].samples_per_s, f["advice"]
        predicted = advice.ceiling if advice else None
        ratio = f" (×{predicted / now:.2f})" if predicted and now else ""
        cells = [
            f"{f['pipeline']}: {f['rule']}",
            f"{rate(now)} → {rate(predicted)}{ratio}",
            rate(f["after"].ceilings[0].samples_per_s),
            f"{rate(before)} → {rate(after)} (×{after / before:.2f}; median {rate(mid_before)} → {rate(mid_after)})",
            f"{before * cpu_before:.2f} / {after * cpu_after:.2f}",
            f"{rate(f['workers'] / cpu_before)} → {rate(f['workers'] / cpu_after)} (×{cpu_before / cpu_after:.2f})",
            f"{f['before'].pipeline_cpu_s * 1000:.2f} → {f['after'].pipeline_cpu_s * 1000:.2f}",
            f"{cpu_before * 1000:.2f} → {cpu_after * 1000:.2f}",
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def markdown(reports: dict[str, Any], found: list[dict[str, Any]], args: argparse.Namespace, load: str) -> str:
    lines = [
        "# `loadertop stages`: four real pipelines, three suggestions followed by hand",
        "",
        f"`python benchmarks/stages_bench.py --seconds {args.seconds:g} --measure-s {args.measure_s:g} --repeats "
        f"{args.repeats}` on {time.strftime('%Y-%m-%d')}, a VM of {os.cpu_count()} CPUs shared with another "
        f"engineer's test runs ({load}): the wall figures carry that load, the CPU figures much less.",
        "",
        "## The stages' sum against the 0-worker time, the ceiling, the profiling's overhead",
        "",
        "| pipeline | stages' sum ms | 0-worker ms | sum vs 0-worker | unattributed ms | pipeline CPU ms | ceiling "
        "samples/s | hooks overhead (CPU) | cProfile overhead (CPU) | samples timed |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *(key_figures(name, report) for name, report in reports.items()),
        "",
    ]
    for name, report in reports.items():
        lines += [f"## {name}", "", "```", report_text(report), "```", ""]
    lines += [
        "## Suggestions followed by hand",
        "",
        "The ceiling the report predicted (before → if the advice is followed), the changed pipeline's own ceiling "
        "(`loadertop stages` on it), and a real DataLoader's throughput (usable CPUs as workers, persistent, batch "
        "32, a consumer that does nothing; before and after in turn, the best run and the median), the best run's "
        "CPU per sample (the main process and its workers), the CPUs it got (samples/s × CPU per sample: on a "
        "shared machine a loader gets less than its CPUs and reaches less than the ceiling) and what it would reach "
        "with its CPUs to itself (usable CPUs ÷ its CPU per sample: the figure the ceiling predicts):",
        "",
        "| pipeline: advice | ceiling: now → predicted if followed | ceiling measured after | DataLoader samples/s "
        "before → after | CPUs the DataLoader got, before / after | its CPUs ÷ its CPU per sample, before → after | "
        "stages' CPU ms per sample | DataLoader CPU ms per sample |",
        "|---|---|---|---|---|---|---|---|",
        *followed_rows(found),
        "",
    ]
    for f in found:
        advice = f["advice"]
        lines += [f"- {f['pipeline']}, {f['rule']}: {f['change']}. The advice: "
                  f"{advice.text if advice else 'not given on this run'}."]  # fmt: skip
    for f in found:
        lines += ["", f"### after: {f['pipeline']}, {f['rule']}", "", "```", report_text(f["after"]), "```"]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="each stages measurement (5)")
    parser.add_argument("--measure-s", type=float, default=4.0, help="each throughput run (4)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "STAGES.md")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    reports = measure_pipelines(args.seconds)
    found = follow(reports, args.seconds, args.measure_s, args.repeats)
    load = f"load average {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    args.out.write_text(markdown(reports, found, args, load))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
