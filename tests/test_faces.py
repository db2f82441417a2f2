"""Faces only render: the engine computes every figure and exports the one formatter set; the CLI,
headless and the TUI print through it. Read from their source, so a new pane that brings its own "not measured"
glyph or its own average fails here, not in review.

The faces: everything under loadertop/faces/ (the CLI, headless, OpenMetrics, the TUI)."""

from __future__ import annotations

import ast
import io
import json
from dataclasses import replace
from pathlib import Path

import pytest

from loadertop.core.engine import NONE, build_report
from loadertop.core.model.results import SweepResult
from loadertop.faces.headless import Reporter
from loadertop.faces.headless_attach import snapshot_line
from loadertop.faces.tui.attach.demo import demo_snapshot

pytestmark = pytest.mark.unit

DATA = Path(__file__).parent / "data"
RESULT = SweepResult.from_dict(json.loads((DATA / "recorded_result.json").read_text()))
PREVIOUS = SweepResult.from_dict(json.loads((DATA / "previous_result.json").read_text()))
PACKAGE = Path(__file__).resolve().parent.parent / "loadertop"
FACES = sorted((PACKAGE / "faces").rglob("*.py"))
# What a face once wrote for a figure it did not have, instead of NONE.
PLACEHOLDERS = {"?", "-", "—", "–", "n/a", "N/A", "NA", "none", "None", "null", "nan", "NaN"}
DASHES = ("—", "–")  # em and en dash: NONE is the engine's; a face that writes either brought its own
# Keyword arguments whose "?" or "-" is a key or an argparse arity, not a figure.
NOT_FIGURES = {"key_display", "nargs"}
# What fits, averages or judges a series belongs to the engine.
COMPUTING_MODULES = {"statistics", "numpy", "scipy", "kneed"}
COMPUTING_CALLS = {"mean", "fmean", "median", "polyfit", "linregress", "stdev", "pstdev", "quantiles", "fit_slope"}


def _strings(tree: ast.AST, *, parts: bool = True) -> list[tuple[int, str]]:
    """Every string a face could print: constants and (with `parts`) the literal parts of f-strings, not docstrings
    and not the keywords in NOT_FIGURES."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) and not parts:
            skip.update(id(value) for value in node.values)
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            skip.add(id(first.value))  # a docstring
        if isinstance(node, ast.keyword) and node.arg in NOT_FIGURES:
            skip.add(id(node.value))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
    ]


def _parsed() -> list[tuple[str, ast.AST]]:
    assert len(FACES) > 20  # the glob found the faces
    return [(str(path.relative_to(PACKAGE.parent)), ast.parse(path.read_text(), str(path))) for path in FACES]


def test_no_face_writes_its_own_not_measured_glyph() -> None:
    found = []
    for name, tree in _parsed():
        # A dash anywhere ("   —", f"avg {x} max —"); a placeholder as a whole value ("?"; "0-4" is a range).
        found += [f"{name}:{line}: {text!r}" for line, text in _strings(tree) if any(d in text for d in DASHES)]
        found += [
            f"{name}:{line}: {text!r}" for line, text in _strings(tree, parts=False) if text.strip() in PLACEHOLDERS
        ]
    said = "\n".join(dict.fromkeys(found))  # a standalone dash is both
    assert not found, f"faces print a figure not measured as the engine's NONE (loadertop.core.engine), not:\n{said}"


def _sum_over_len(node: ast.AST) -> bool:
    def call(n: ast.AST, name: str) -> bool:
        return isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == name

    return (
        isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.Div)
        and call(node.left, "sum")
        and call(node.right, "len")
    )


def test_no_face_fits_averages_or_judges() -> None:
    found = []
    for name, tree in _parsed():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                found += [f"{name}:{node.lineno}: imports {m}" for m in modules if m.split(".")[0] in COMPUTING_MODULES]
            elif isinstance(node, ast.Call):
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if called in COMPUTING_CALLS:
                    found.append(f"{name}:{node.lineno}: calls {called}()")
            elif _sum_over_len(node):
                found.append(f"{name}:{node.lineno}: sum(...) / len(...)")
            elif isinstance(node, ast.FunctionDef) and node.name in ("climbing", "slope_per_min"):
                found.append(f"{name}:{node.lineno}: def {node.name}")
    assert not found, "the engine computes every figure a face shows:\n" + "\n".join(found)


def test_the_checks_catch_what_they_are_for() -> None:
    bad = ast.parse(
        '"""A docstring — skipped."""\nx = "—" if v is None else f"{v:>7} MB"\ny = "?"\nBinding("q", key_display="?")'
    )
    assert sorted(text for _, text in _strings(bad)) == sorted(["—", " MB", ">7", "?", "q"])
    assert sorted(text for _, text in _strings(bad, parts=False)) == sorted(["—", "?", "q"])
    assert _sum_over_len(ast.parse("sum(v) / len(v)", mode="eval").body)


def test_a_figure_not_measured_reads_none_in_the_table_and_headless() -> None:
    """The 0-worker row has no worker USS: the report, headless and the live attach line all say NONE."""
    report = build_report(RESULT, PREVIOUS)
    origin = next(row for row in report.rows if row.config.num_workers == 0)
    assert report.cells(origin)["uss"] == NONE and report.cells(origin)["prefetch"] == NONE
    out = io.StringIO()
    Reporter(out, io.StringIO(), PREVIOUS).summary(RESULT)
    text = out.getvalue()
    assert NONE in text and "—" not in text and " ? " not in text
    snap = demo_snapshot(12)
    blind = replace(snap, gpu_util=None, workers=(replace(snap.workers[0], uss_mb=None, uss_slope_mb_per_min=None),))
    line = snapshot_line(blind)
    assert f"workers USS MB: {NONE}" in line and "?" not in line
