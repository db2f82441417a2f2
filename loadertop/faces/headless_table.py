"""The results table as headless prints it: one line per row at the output's width, the reasons below it.

A file or a CI log has no terminal width: the table is laid out for `width` (the terminal's, else $COLUMNS, else
100). Each row stays on one line: the "why" column becomes a list under the table, keyed by the row's
configuration; columns every row shares are said once; columns no row measured are named; and if the table is
still too wide, columns go in DROP_ORDER, named under it (the CSV and JSON keep every column), but for those the
report keeps (the epoch restart, when it costs beyond the noise). Every cell is the
engine's report's (`build_report`): this module only lays them out.
"""

from __future__ import annotations

import os
from typing import TextIO

from rich.console import Console, RenderableType
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from loadertop.core.engine import HEADERS, NONE, Report, ReportRow

DEFAULT_WIDTH = 100  # a file or a pipe: what reads in a CI log and in an editor
# Said once, under the table, when every row has the same cell (the sweep did not vary them).
SHARED = ("batch", "prefetch", "pin", "persist", "start", "status")
# Never dropped: what tells the rows apart and the figures the recommendation is made of.
KEPT = ("mark", "workers", "batch", "prefetch", "pin", "persist", "start", "samples/s", "stall", "status")
# When the table is still too wide: the first goes first.
DROP_ORDER = ("rss", "p50", "epoch", "first", "gpu", "cpu", "runs", "pss", "p99", "nodes", "uss", "change", "spread")
LEFT = ("mark", "status")


def output_width(stream: TextIO) -> int:
    """The terminal's width; for a file or a pipe, $COLUMNS when it is a positive number, else DEFAULT_WIDTH."""
    try:
        if stream.isatty():
            return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        pass
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else DEFAULT_WIDTH


def _cell(report: Report, row: ReportRow, key: str) -> str:
    # In the table a row's status is its one word; what went wrong is listed under the table with the reasons.
    return row.status if key == "status" else report.cells(row)[key]


def _table(report: Report, columns: list[str], title: str | None) -> Table:
    table = Table(title=title, title_justify="left")
    for key in columns:
        table.add_column(HEADERS[key], justify="left" if key in LEFT else "right", no_wrap=True, overflow="ellipsis")
    for row in report.rows:
        style = "bold green" if row.recommended else ("yellow" if row.knee else None)
        # Cells are plain text: an error such as "bad value [/data/x]" is not markup.
        table.add_row(*(escape(_cell(report, row, key)) for key in columns), style=style)
    return table


def _width_of(console: Console, table: Table) -> int:
    """The table's natural width: every cell whole, however narrow the console."""
    return Measurement.get(console, console.options.update_width(10_000), table).maximum


def layout(report: Report, console: Console, width: int) -> list[RenderableType]:
    """What summary() prints for the table: the table (rows on one line at `width`), then what left it, then
    each row's reason."""
    rows = report.rows
    columns = [key for key in report.columns if key != "why"]
    values = {k: {_cell(report, r, k) for r in rows} for k in SHARED if k in columns}
    shared = [k for k, v in values.items() if len(v) == 1]
    # prefetch and start are NONE at 0 workers: one value in every other row is said once too
    mostly = [k for k, v in values.items() if len(v) == 2 and NONE in v]
    unmeasured = [k for k in columns if k not in KEPT and rows and all(_cell(report, r, k) in (NONE, "") for r in rows)]
    columns = [k for k in columns if k not in shared and k not in mostly and k not in unmeasured]
    dropped: list[str] = []
    for key in DROP_ORDER:
        if _width_of(console, _table(report, columns, None)) <= width:
            break
        if key in columns and key not in report.kept:
            columns.remove(key)
            dropped.append(key)
    out: list[RenderableType] = [_table(report, columns, "loadertop results")]
    if shared:
        out.append(_said("every row:", ", ".join(f"{HEADERS[k]} {_cell(report, rows[0], k)}" for k in shared)))
    if mostly:
        said = ", ".join(f"{HEADERS[k]} {(values[k] - {NONE}).pop()}" for k in mostly)
        out.append(_said(f"every row that sets it ({NONE} in the others):", said))
    if unmeasured:
        out.append(_said("not measured:", ", ".join(HEADERS[k] for k in unmeasured)))
    if dropped:
        names = ", ".join(HEADERS[k] for k in dropped)
        out.append(_said(f"not shown at {width} columns:", f"{names} (--csv and --json keep every column)"))
    out.append(Text(report.footnote))
    out.append(_reasons(report))
    return out


def _said(head: str, text: str) -> Table:
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column()
    grid.add_row(head, Text(text))
    return grid


def _reasons(report: Report) -> RenderableType:
    """Each row's reason (or what went wrong), keyed by its marks and its configuration, wrapped under its key."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column()
    for row in report.rows:
        cells = report.cells(row)
        text = cells["why"] if row.status == "ok" else cells["status"]
        if text:
            grid.add_row(f"{row.marks:<2} {row.config.label()}", Text(text))
    title = Table.grid()
    title.add_row("why, by row:")
    title.add_row(grid)
    return title
