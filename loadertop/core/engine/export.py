"""Exports of a SweepResult: JSON (the contract), CSV (one row per trial) and Markdown."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from loadertop.core.engine.runfolder import write_atomic
from loadertop.core.engine.table import HEADERS, RSS_FOOTNOTE, marks, trial_cells
from loadertop.core.model.results import SweepResult, TrialResult

CSV_COLUMNS = [
    "index",
    "num_workers",
    "batch_size",
    "prefetch_factor",
    "pin_memory",
    "persistent_workers",
    "start_method",
    "in_order",
    "ranks",
    "status",
    "samples_per_s",
    "batches_per_s",
    "spread",
    "first_batch_s",
    "epoch_restart_s",
    "stall_fraction",
    "worker_uss_mb",
    "total_pss_mb",
    "rss_mb",
    "cpu_percent",
    "gpu_util",
    "reason",
    "error",
]


def write_json(result: SweepResult, path: Path) -> Path:
    write_atomic(Path(path), json.dumps(result.to_dict(), indent=2) + "\n")
    return Path(path)


def csv_row(trial: TrialResult) -> dict[str, object]:
    row: dict[str, object] = {**trial.config.to_dict(), **trial.to_dict()}
    row["worker_uss_mb"] = " ".join(f"{v:.1f}" for v in trial.worker_uss_mb)
    return {k: row.get(k) for k in CSV_COLUMNS}


def write_csv(result: SweepResult, path: Path) -> Path:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS)
    writer.writeheader()
    for trial in result.trials:
        writer.writerow(csv_row(trial))
    write_atomic(Path(path), out.getvalue())
    return Path(path)


def markdown_table(result: SweepResult) -> str:
    rows = [HEADERS, tuple("---" for _ in HEADERS)]
    for trial in result.trials:
        cells = trial_cells(trial)
        note = ", ".join(marks(trial, result))
        if note:
            cells[-1] = f"**{note}** {cells[-1]}"
        rows.append(tuple(cells))
    return "\n".join("| " + " | ".join(row) + " |" for row in rows) + f"\n\n{RSS_FOOTNOTE}\n"


def markdown(result: SweepResult) -> str:
    parts = [f"# loadertop run\n\n{result.machine.summary()}\n", markdown_table(result)]
    if result.recommendation:
        r = result.recommendation
        parts.append(f"**Use:** `{r.snippet}`\n\n{r.reason}\n")
    if result.knee:
        parts.append(f"**Knee:** {result.knee.reason}\n")
    return "\n".join(parts)


def write_markdown(result: SweepResult, path: Path) -> Path:
    write_atomic(Path(path), markdown(result))
    return Path(path)
