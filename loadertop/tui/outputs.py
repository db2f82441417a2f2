"""Files the app writes on request: exports (`e`) and the recommended snippet (`y`)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from loadertop.core.results import Recommendation, SweepResult

EXPORT_NAMES = {"json": "result.json", "csv": "results.csv", "markdown": "results.md"}


def export_all(result: SweepResult, run_dir: Path) -> list[Path]:
    """JSON, CSV and Markdown into the run folder, through the engine's writers when present."""
    try:
        # Imported here, not at the top: the engine's module may not exist yet, and tests patch it.
        from loadertop.core import export as writers
    except ImportError:
        writers = None
    run_dir.mkdir(parents=True, exist_ok=True)
    paths = {kind: run_dir / name for kind, name in EXPORT_NAMES.items()}
    if writers is not None:
        writers.write_json(result, paths["json"])
        writers.write_csv(result, paths["csv"])
        writers.write_markdown(result, paths["markdown"])
    else:
        _write_json(result, paths["json"])
        _write_csv(result, paths["csv"])
        _write_markdown(result, paths["markdown"])
    return list(paths.values())


def write_snippet(rec: Recommendation, run_dir: Path) -> Path:
    """snippet.py: the DataLoader line with the reason as a comment, ready to paste."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "snippet.py"
    body = rec.snippet.strip()
    if "DataLoader(" in body and "import" not in body:
        head = body.split("DataLoader(", 1)[0]
        if "=" not in head:
            body = f"loader = {body}"
        body = f"from torch.utils.data import DataLoader\n\n{body}"
    lines = [
        f"# Recommended by loadertop: {rec.config.label()}, {rec.samples_per_s:,.0f} samples/s measured.",
        *(f"# {line}" for line in rec.reason.splitlines()),
        body,
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


# ---- fallbacks, used only while loadertop.core.export is missing ---------------------------------

_COLUMNS = (
    "num_workers",
    "batch_size",
    "prefetch_factor",
    "pin_memory",
    "persistent_workers",
    "start_method",
    "status",
    "samples_per_s",
    "batches_per_s",
    "spread",
    "first_batch_s",
    "stall_fraction",
    "total_pss_mb",
    "rss_mb",
    "cpu_percent",
    "gpu_util",
    "error",
    "reason",
)


def _flat(trial: dict) -> dict:
    row = {**trial["config"], **{k: v for k, v in trial.items() if k != "config"}}
    return {name: row.get(name) for name in _COLUMNS}


def _write_json(result: SweepResult, path: Path) -> None:
    path.write_text(json.dumps(result.to_dict(), indent=2) + "\n")


def _write_csv(result: SweepResult, path: Path) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=_COLUMNS)
        writer.writeheader()
        for trial in result.trials:
            writer.writerow(_flat(trial.to_dict()))


def _write_markdown(result: SweepResult, path: Path) -> None:
    lines = ["| workers | batch | samples/s | spread | stall | status |", "|---:|---:|---:|---:|---:|---|"]
    for t in result.trials:
        sps = f"{t.samples_per_s:,.0f}" if t.samples_per_s is not None else ""
        spread = f"{t.spread:.1%}" if t.spread is not None else ""
        stall = f"{t.stall_fraction:.0%}" if t.stall_fraction is not None else ""
        status = t.status if t.status == "ok" else f"{t.status}: {t.error or t.reason}"
        lines.append(f"| {t.config.num_workers} | {t.config.batch_size} | {sps} | {spread} | {stall} | {status} |")
    if result.recommendation:
        rec = result.recommendation
        lines += ["", f"**Recommended**: {rec.config.label()}: {rec.reason}", "", "```python", rec.snippet, "```"]
    path.write_text("\n".join(lines) + "\n")
