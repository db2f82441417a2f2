"""The headless results table in a file or a CI log: the output's width (the terminal's, $COLUMNS, else 100), one
line per row, the reasons under the table keyed by row, columns that do not fit named. A recorded result,
rendered by the real Reporter into a stream that is not a terminal."""

from __future__ import annotations

import io
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from loadertop.core.engine import HEADERS, build_report
from loadertop.core.model.results import SweepResult
from loadertop.faces import headless_table
from loadertop.faces.headless import Reporter

DATA = Path(__file__).parent / "data"
RESULT = SweepResult.from_dict(json.loads((DATA / "recorded_result.json").read_text()))
PREVIOUS = SweepResult.from_dict(json.loads((DATA / "previous_result.json").read_text()))
ERROR = "TypeError: default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found <class 'PIL.Image.Image'>"  # noqa: E501


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        return 1


def render(result: SweepResult, previous: SweepResult | None = None, out: io.StringIO | None = None) -> list[str]:
    out = out if out is not None else io.StringIO()
    Reporter(out, io.StringIO(), previous).summary(result)
    return re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue()).splitlines()  # a terminal gets colours


def table_rows(lines: list[str]) -> list[str]:
    """The table's body lines (between the header rule and the bottom border)."""
    start = next(i for i, line in enumerate(lines) if line.startswith("┡"))
    end = next(i for i, line in enumerate(lines) if line.startswith("└"))
    return lines[start + 1 : end]


def with_failure(result: SweepResult) -> SweepResult:
    """The 8-worker trial failed in collate, as a PIL dataset without ToTensor makes every trial fail."""
    trials = tuple(
        replace(t, status="failed", error=ERROR, samples_per_s=None) if t.config.num_workers == 8 else t
        for t in result.trials
    )
    return replace(result, trials=trials)


@pytest.mark.unit
@pytest.mark.parametrize("previous", [None, PREVIOUS])
def test_a_file_gets_100_columns_one_line_per_row_and_the_reasons_below(
    previous: SweepResult | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    result = with_failure(RESULT)
    lines = render(result, previous)
    assert max(len(line) for line in lines) <= 100, "\n".join(lines)
    report = build_report(result, previous)
    body = table_rows(lines)
    assert len(body) == len(report.rows)  # each row on one line
    for row, line in zip(report.rows, body, strict=True):
        cells = report.cells(row)
        assert f" {cells['workers']} │" in line and f" {cells['samples/s']} │" in line
    assert body[-1].rstrip().endswith("│") and "│ failed " in body[-1]  # the status word; the error is below
    below = lines[lines.index(next(line for line in lines if line.startswith("└"))) :]
    reasons = "\n".join(below[below.index(next(line for line in below if line.startswith("why, by row:"))) :])
    squeezed = " ".join(reasons.split())
    for row in report.rows:
        text = report.cells(row)["why"] if row.status == "ok" else report.cells(row)["status"]
        assert f"{row.config.label()} {text}" in squeezed  # keyed by the row's configuration
    assert "★◆ w=2 bs=32 pf=2 fork loader-bound" in squeezed and ERROR in squeezed
    assert "every row: batch 32, pin off, persist off" in "\n".join(below)
    assert "not measured: p50 ms, p99 ms, GPU" in "\n".join(below)
    assert any(line.startswith("not shown at 100 columns: RSS* MB") for line in below)


@pytest.mark.unit
def test_columns_env_and_a_terminal_set_the_width(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    lines = render(RESULT)
    assert max(len(line) for line in lines) <= 80 and len(table_rows(lines)) == len(build_report(RESULT).rows)
    dropped = next(line for line in lines if line.startswith("not shown at 80 columns:"))
    order = [HEADERS[k] for k in headless_table.DROP_ORDER if HEADERS[k] in dropped]
    assert dropped.split(": ", 1)[1].startswith(", ".join(order))  # said in the order they were dropped
    monkeypatch.setattr(headless_table.os, "get_terminal_size", lambda fd: __import__("os").terminal_size((160, 50)))
    wide = render(RESULT, out=Tty())  # a terminal: its own width, not $COLUMNS
    assert 100 < max(len(line) for line in wide) <= 160
    assert not any(line.startswith("not shown") for line in wide) and len(table_rows(wide)) == 7
    monkeypatch.setenv("COLUMNS", "wide")  # not a number: the default
    assert max(len(line) for line in render(RESULT)) == 100


@pytest.mark.unit
def test_the_epoch_restart_stays_at_100_columns_when_it_costs_beyond_the_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    # The default sweep on an audio pipeline whose fresh workers import a library on their first sample: each
    # epoch's restart is most of its time, and the column that shows it is what persistent workers change.
    monkeypatch.delenv("COLUMNS", raising=False)
    result = SweepResult.from_dict(json.loads((DATA / "epoch_restart_result.json").read_text()))
    lines = render(result)
    assert max(len(line) for line in lines) <= 100
    header = next(line for line in lines if line.startswith("┃"))
    assert "epoch" in header and "persist" in header
    report = build_report(result)
    assert report.kept == ("epoch",)
    for row, line in zip(report.rows, table_rows(lines), strict=True):
        assert f" {report.cells(row)['epoch']} │" in line
    dropped = next(line for line in lines if line.startswith("not shown at 100 columns"))
    assert "epoch" not in dropped
    assert build_report(RESULT).kept == ()  # long epochs: the column goes first when space is short, as before
