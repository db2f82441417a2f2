"""A many-node result through the engine's report and the text faces: the per-node rows, the rank that paces the job
and what it costs, computed once (engine/nodes/node_rows.py) and printed the same by headless, Markdown and CSV.

The two-node result is made from the recorded one-node run (tests/data/recorded_result.json): node 1 measured every
configuration 18% slower, node 0 as recorded; merge_nodes and the engine's conclusion then run for real."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from pathlib import Path

import pytest

from loadertop.core.engine import build_report
from loadertop.core.engine.nodes.merge import merge_nodes
from loadertop.core.engine.report.export import markdown, write_csv
from loadertop.core.engine.verdict.outcome import conclude
from loadertop.core.model.nodes import NodeInfo
from loadertop.core.model.results import SweepResult, TrialResult
from loadertop.faces.headless import Reporter, trial_line

pytestmark = pytest.mark.unit

DATA = Path(__file__).parent / "data"
ONE_NODE = SweepResult.from_dict(json.loads((DATA / "recorded_result.json").read_text()))
NODES = (
    NodeInfo(0, "host-a", usable_cpus=2, mem_total_mb=8000, mem_available_mb=5000, loadertop="0.1"),
    NodeInfo(1, "host-b", usable_cpus=2, mem_total_mb=8000, mem_available_mb=4000, loadertop="0.1"),
)
SLOWER = 0.82


def on_node_1(t: TrialResult) -> TrialResult:
    if t.samples_per_s is None:
        return t
    stall = None if t.stall_fraction is None else min(1.0, t.stall_fraction + 0.1)
    return dataclasses.replace(t, samples_per_s=t.samples_per_s * SLOWER, stall_fraction=stall)


def two_nodes() -> SweepResult:
    merged = [merge_nodes([t, on_node_1(t)], NODES) for t in ONE_NODE.trials]
    done = conclude(merged, ONE_NODE.settings, ONE_NODE.machine, ceilings=ONE_NODE.ceilings).result
    return dataclasses.replace(done, nodes=NODES, run_dir=ONE_NODE.run_dir)


def test_the_report_carries_each_nodes_share_and_who_paces() -> None:
    result = two_nodes()
    report = build_report(result)
    assert report.many_nodes and "nodes" in report.columns
    rec = report.recommended
    assert rec is not None and result.recommendation is not None
    trial = next(t for t in result.trials if t.index == rec.runs[-1])
    node0, node1 = rec.nodes
    assert (node0.hostname, node1.hostname) == ("host-a", "host-b")
    assert node1.samples_per_s == trial.node_trials[1].samples_per_s
    assert node1.paces and not node0.paces and node0.behind == 0.0
    assert abs((node1.behind or 0.0) - (1 - SLOWER)) < 1e-9
    assert rec.slowest_rank == "node 1 (host-b) rank 0"
    assert rec.pacing.startswith("node 1 (host-b) paces the job: its ranks load 18% slower than node 0's")
    job = 2 * (node1.samples_per_s or 0.0)
    assert f"2 ranks × {node1.samples_per_s:.0f} = {job:.0f} samples/s" in rec.pacing
    summed = (node0.samples_per_s or 0.0) + (node1.samples_per_s or 0.0)
    assert f"below the {summed:.0f} its nodes load together" in rec.pacing
    assert report.cells(rec)["nodes"] == f"{node0.samples_per_s:.0f} / {node1.samples_per_s:.0f}"
    cells = report.node_cells(node1)
    assert cells["node"] == "1 ◀" and cells["behind"] == "−18%" and cells["host"] == "host-b"


def test_one_node_shows_no_node_column_and_no_pacing() -> None:
    report = build_report(ONE_NODE)
    assert not report.many_nodes and "nodes" not in report.columns
    assert all(row.nodes == () and row.pacing == "" for row in report.rows)
    out = io.StringIO()
    Reporter(out, io.StringIO(), None).summary(ONE_NODE)
    assert "per node" not in out.getvalue() and "Nodes:" not in out.getvalue()


def test_another_nodes_own_result_reads_as_one_node() -> None:
    """Node 1's own result lists the nodes but its trials are its own (not merged): no per-node column or footnote."""
    result = dataclasses.replace(ONE_NODE, nodes=NODES)
    report = build_report(result)
    assert not report.many_nodes and "nodes" not in report.columns and "Many nodes" not in report.footnote


def test_headless_prints_the_node_table_and_the_pacing_line() -> None:
    result = two_nodes()
    report = build_report(result)
    rec = report.recommended
    assert rec is not None
    out = io.StringIO()
    Reporter(out, io.StringIO(), None).summary(result)
    text = out.getvalue()
    assert f"per node: {rec.config.label()}" in text
    lines = [line for line in text.splitlines() if "host-b" in line and "◀" in line]
    assert lines and report.node_cells(rec.nodes[1])["samples/s"] in lines[0]
    # said once: on its own line, or in the Why line if the engine's recommendation reason carries it
    flat = " ".join(text.split())  # rich may wrap it; the words are the report's
    assert flat.count(rec.pacing) == 1 and (f"Nodes: {rec.pacing}" in flat or "Nodes:" not in flat)
    # every trial line names each node's rate and the slowest rank
    line = trial_line(result.trials[0], len(result.trials))
    share = result.trials[0].node_trials
    assert f"per node {share[0].samples_per_s:.0f} / {share[1].samples_per_s:.0f}" in line
    assert "slowest node 1 (host-b) rank 0" in line


def test_a_failed_node_shows_in_its_row_and_the_per_node_cell() -> None:
    ok = ONE_NODE.trials[2]
    bad = dataclasses.replace(ok, status="failed", error="worker killed by signal 9", samples_per_s=None)
    merged = merge_nodes([ok, bad], NODES)
    result = dataclasses.replace(ONE_NODE, trials=(merged,), recommendation=None, knee=None, nodes=NODES)
    (row,) = build_report(result).rows
    assert row.status == "failed" and row.error == "node 1 (host-b): worker killed by signal 9"
    assert build_report(result).cells(row)["nodes"] == f"{ok.samples_per_s:.0f} / –"
    assert build_report(result).node_cells(row.nodes[1])["status"] == "failed: worker killed by signal 9"
    assert row.pacing == ""


def test_csv_and_markdown_show_the_same_node_figures(tmp_path: Path) -> None:
    result = two_nodes()
    report = build_report(result)
    rows = list(csv.DictReader(write_csv(result, tmp_path / "r.csv").open()))
    for line, row in zip(rows, report.rows, strict=True):
        assert [float(v) for v in line["node_samples_per_s"].split()] == [
            round(n.samples_per_s or 0.0, 1) for n in row.nodes
        ]
        assert line["slowest_rank"] == (row.slowest_rank or "")
    text = markdown(result)
    rec = report.recommended
    assert rec is not None
    assert f"**Per node ({rec.config.label()}):**" in text and rec.pacing in text
    assert "| 1 ◀ | host-b |" in text


def test_the_nodes_survive_the_result_json() -> None:
    result = two_nodes()
    again = SweepResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again.nodes == NODES
    assert build_report(again) == build_report(result)
    data = result.to_dict()
    assert [n["hostname"] for n in data["nodes"]] == ["host-a", "host-b"]
    assert all(len(t["node_samples_per_s"]) == 2 for t in data["trials"] if t["status"] == "ok")


def test_the_benchmark_reads_the_result_json_contract() -> None:
    """benchmarks/nodes_bench.py builds its table from the JSON alone (`nodes`, `node_samples_per_s`,
    `slowest_rank`): fed the two-node result, it names both hosts and each node's own rate."""
    import importlib.util

    path = Path(__file__).parent.parent / "benchmarks" / "nodes_bench.py"
    spec = importlib.util.spec_from_file_location("nodes_bench", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    many = json.loads(json.dumps(two_nodes().to_dict()))
    single = json.loads(json.dumps(ONE_NODE.to_dict()))
    text = bench.table(single, many)
    header = text.splitlines()[0]
    assert "node 0 (host-a), 2 nodes" in header and "node 1 (host-b), 2 nodes" in header
    w2 = next(line for line in text.splitlines() if line.startswith("| 2 |"))
    trial = next(t for t in many["trials"] if t["config"]["num_workers"] == 2 and t["status"] == "ok")
    a, b = trial["node_samples_per_s"]
    assert f"| {a:.0f} | {b:.0f} | {trial['samples_per_s']:.0f} | node 1 (host-b) rank 0 |" in w2
    assert "two nodes recommend 2 workers" in text and "node 0 alone loads" in text


def test_a_gap_inside_the_trials_spread_is_not_a_slow_node() -> None:
    from loadertop.core.engine.nodes.node_rows import pacing

    t = ONE_NODE.trials[2]
    close = dataclasses.replace(t, samples_per_s=(t.samples_per_s or 0.0) * 0.96)
    merged = merge_nodes([dataclasses.replace(t, spread=0.05), close], NODES)
    text = pacing(merged, NODES)
    assert text.startswith("the nodes load alike (within 5%); the slowest rank is node 1 (host-b) rank 0; ")
    assert "in lockstep the job gets 2 ranks × " in text
    tight = merge_nodes([dataclasses.replace(t, spread=0.01), dataclasses.replace(close, spread=0.01)], NODES)
    assert pacing(tight, NODES).startswith("node 1 (host-b) paces the job: its ranks load 4% slower than node 0's")
    assert pacing(t) == ""  # one node
