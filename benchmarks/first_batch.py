"""Issue 21's first-batch forecast, measured: the forecast from the rungs below against each worker count's first batch.

    python benchmarks/first_batch.py [--repeats 1] [--out benchmarks/FIRST_BATCH.md] [--keep DIR]

For each workload (synthetic cost models: mixed, CPU-bound, waiting, a large batch) a real grid sweep over
0,1,2,4,8,32 fork workers (`loadertop --headless --search grid --trial-seconds 1`), then the sweep's own `first_batch`
pre-flight checks from its JSON: at 4, 8 and 32 workers, the forecast from the counts below it and the measurement.
The goal is ±20%. Run it on a quiet machine: the first batch at 32 workers is mostly CPU shared by 32 processes.
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

HERE = Path(__file__).resolve().parent
WORKERS = "0,1,2,4,8,32"
WORKLOADS = {
    "mixed": "cpu_ms=0.5,io_ms=1,kb=64",
    "cpu-bound": "cpu_ms=2,io_ms=0,kb=64",
    "waiting": "cpu_ms=0.1,io_ms=5,kb=16",
    "1 MB samples": "cpu_ms=0.5,io_ms=1,kb=1024",
}


def sweep(spec: str, folder: Path) -> dict:
    out = folder / "result.json"
    cmd = [
        sys.executable, "-m", "loadertop", "--headless", "--dataset", f"synthetic:{spec}", "--workers", WORKERS,
        "--search", "grid", "--trial-seconds", "1", "--json", str(out), "--out", str(folder / "runs"),
    ]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True, env={**os.environ, "PYTHONPATH": str(HERE.parent)})
    return json.loads(out.read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", type=Path, default=HERE / "FIRST_BATCH.md")
    parser.add_argument("--keep", type=Path, help="keep each sweep's result JSON in this folder")
    args = parser.parse_args()
    rows, held, total = [], 0, 0
    for name, spec in WORKLOADS.items():
        for run in range(1, args.repeats + 1):
            with tempfile.TemporaryDirectory() as tmp:
                result = sweep(spec, Path(tmp))
            if args.keep:
                args.keep.mkdir(parents=True, exist_ok=True)
                (args.keep / f"{name.replace(' ', '_')}-{run}.json").write_text(json.dumps(result))
            for check in result["preflight"]:
                n = check["numbers"]
                if check["check"] != "first_batch" or "predicted_s" not in n or "start_method" in n:
                    continue
                within = n["ratio"] is not None and abs(n["ratio"] - 1) <= 0.2
                held, total = held + within, total + 1
                rows.append(
                    f"| {name} | {run} | {n['workers']} | {n['fit_counts']} | {n['predicted_s']:.3f} | "
                    f"{n['measured_s']:.3f} | ×{n['ratio']:.2f} | {'yes' if within else '**no**'} |"
                )
                print(rows[-1], flush=True)
    load = os.getloadavg()[0]
    lines = [
        "# The first batch: forecast from the rungs below against the measurement",
        "",
        f"Produced by `python benchmarks/first_batch.py --repeats {args.repeats}` on {time.strftime('%Y-%m-%d %H:%M')}"
        f" (1-minute load {load:.1f} at the end). Each sweep: `loadertop --headless --dataset synthetic:SPEC "
        f"--workers {WORKERS} --search grid --trial-seconds 1`; its `first_batch` pre-flight checks from its JSON.",
        "",
        "| workload | run | workers | forecast from | forecast s | measured s | ratio | within ±20% |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"Within ±20%: {held} of {total}. Workloads: "
        + "; ".join(f"{name} `synthetic:{spec}`" for name, spec in WORKLOADS.items())
        + ".",
        "",
    ]
    args.out.write_text("\n".join(lines))
    print(f"within ±20%: {held} of {total}; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
