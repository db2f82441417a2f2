"""Exports of a SweepResult: JSON (the contract, one entry per trial), CSV and Markdown (the report's rows)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from loadertop.core.engine.report.rows import HEADERS, Report, ReportRow, build_report
from loadertop.core.engine.report.runfolder import write_atomic
from loadertop.core.model.results import SweepResult
from loadertop.core.model.stages import StagesReport

# The columns from when a line was a trial, kept by name; the report's additions at the end.
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
    "workers_start_s",
    "epoch_restart_s",
    "stall_fraction",
    "wait_ms_p50",
    "wait_ms_p95",
    "wait_ms_p99",
    "worker_uss_mb",
    "total_pss_mb",
    "rss_mb",
    "cpu_percent",
    "gpu_util",
    "reason",
    "error",
    "runs",
    "uss_per_worker_mb",
    "recommended",
    "knee",
    "equivalent",
    "change_vs_previous",
    "worker_threads",
    "main_threads",
    "node_samples_per_s",  # many nodes: each node's samples/s, node 0 first, space-separated
    "slowest_rank",
    "worker_method",  # process (the DataLoader's) or thread (torchdata.nodes); older results: process
]


def write_json(result: SweepResult, path: Path) -> Path:
    write_atomic(Path(path), json.dumps(result.to_dict(), indent=2) + "\n")
    return Path(path)


def write_stages_json(report: StagesReport, path: Path) -> Path:
    """`loadertop stages --json`: the report under a `stages` key (its `version` inside)."""
    write_atomic(Path(path), json.dumps({"stages": report.to_dict()}, indent=2) + "\n")
    return Path(path)


def csv_row(row: ReportRow, result: SweepResult) -> dict[str, object]:
    """One configuration: the report's figures unrounded; the per-trial fields from its latest run."""
    latest = next(t for t in result.trials if t.index == row.runs[-1])
    data: dict[str, object] = {**row.config.to_dict(), **latest.to_dict()}
    data.update(
        status=row.status,
        samples_per_s=row.samples_per_s,
        spread=row.spread,
        stall_fraction=row.stall_fraction,
        cpu_percent=row.cpu_percent,
        runs=" ".join(map(str, row.runs)),
        uss_per_worker_mb=row.uss_per_worker_mb,
        total_pss_mb=row.pss_mb,  # the row's memory: a run read alone (engine/verdict/memory.py), not always the latest
        rss_mb=row.rss_mb,
        recommended=row.recommended,
        knee=row.knee,
        equivalent=row.equivalent,
        change_vs_previous=row.change,
    )
    data["worker_uss_mb"] = " ".join(f"{v:.1f}" for v in latest.worker_uss_mb)
    rates = (n.samples_per_s if n.status == "ok" else None for n in row.nodes)
    data["node_samples_per_s"] = " ".join("nan" if r is None else f"{r:.1f}" for r in rates)
    return {k: data.get(k) for k in CSV_COLUMNS}


def write_csv(result: SweepResult, path: Path, previous: SweepResult | None = None) -> Path:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS)
    writer.writeheader()
    for row in build_report(result, previous).rows:
        writer.writerow(csv_row(row, result))
    write_atomic(Path(path), out.getvalue())
    return Path(path)


def markdown_table(report: Report) -> str:
    columns = report.columns
    lines = [tuple(HEADERS[k] for k in columns), tuple("---" for _ in columns)]
    for row in report.rows:
        cells = report.cells(row)
        lines.append(tuple(" ".join(cells[k].split()).replace("|", "\\|") for k in columns))  # one line per row
    return "\n".join("| " + " | ".join(line) + " |" for line in lines) + f"\n\n{report.footnote}\n"


def markdown_nodes(report: Report) -> str:
    """The recommended configuration, node by node, and what its slowest rank costs ('' on one node)."""
    row = report.recommended
    if row is None or not row.nodes:
        return ""
    columns = report.node_columns
    lines = [tuple(report.node_headers[k] for k in columns), tuple("---" for _ in columns)]
    lines += [tuple(report.node_cells(n)[k].replace("|", "\\|") for k in columns) for n in row.nodes]
    table = "\n".join("| " + " | ".join(line) + " |" for line in lines)
    return f"**Per node ({row.config.label()}):**\n\n{table}\n\n{row.pacing}\n"


def markdown(result: SweepResult, previous: SweepResult | None = None) -> str:
    report = build_report(result, previous)
    parts = [f"# loadertop run\n\n{result.machine.summary()}\n", markdown_table(report)]
    if report.many_nodes:
        parts.append(markdown_nodes(report))
    if result.recommendation:
        r = result.recommendation
        use = f"`{r.snippet}`" if "\n" not in r.snippet else f"\n\n```python\n{r.snippet}\n```"  # a graph's lines
        parts.append(f"**Use:** {use}\n\n{r.reason}\n")
    if result.knee:
        parts.append(f"**Knee:** {result.knee.reason}\n")
    return "\n".join(parts)


def write_markdown(result: SweepResult, path: Path, previous: SweepResult | None = None) -> Path:
    write_atomic(Path(path), markdown(result, previous))
    return Path(path)
