"""Results table: one row per configuration, redrawn when a trial starts or ends (never per sample).

Figures and marks are the engine's report, cell for cell what headless, Markdown and CSV print; the state adds what
only a live table has: rows not measured yet, the running one, a queued rerun, and which row is compared with what."""

from __future__ import annotations

from typing import ClassVar

from rich.style import Style
from rich.text import Text
from textual.binding import Binding, BindingType
from textual.coordinate import Coordinate
from textual.widgets import DataTable

from loadertop.core.engine import HEADERS, NONE, Report, ReportRow, config_cells, ordered
from loadertop.core.model.config import TrialConfig
from loadertop.faces.tui.state import Row, SweepState

RERUN_ROW_HELP = "rerun the highlighted configuration with more repeats (tighter spread)"

POINTER = "›"  # the highlighted row, by symbol: a capture without colour shows the cursor too

COLUMNS = (  # (label, the report's column key)
    ("", "cursor"),  # not the report's: the table's own cursor (POINTER)
    ("", "mark"),
    ("w", "workers"),
    ("bs", "batch"),
    ("pf", "prefetch"),
    ("pin", "pin"),
    ("pers", "persist"),
    ("samples/s", "samples/s"),
    ("±", "spread"),
    (HEADERS["change"], "change"),  # the report's name: one column, one name in every face
    ("stall", "stall"),
    ("p99 ms", "p99"),
    ("1st", "first"),
    ("epoch", "epoch"),
    ("USS/w MB", "uss"),
    ("PSS MB", "pss"),
    ("GPU", "gpu"),
    ("status", "status"),
)
LEFT = ("cursor", "mark", "status")
# Columns shown only when a row holds a figure (a previous run to compare with, an epoch boundary measured), with
# the room each takes from the status when shown
OPTIONAL = {"change": len(HEADERS["change"]), "epoch": len("0.48 s")}

NOT_OK = ("failed", "skipped")
# The status column's room at 120 columns (the last column: past it the table scrolls); longer texts are cut at a
# word, with "…"; the throughput pane of the highlighted row says the whole of a failure.
STATUS_WIDTH = 24
UNMEASURED = (*NOT_OK, "not run", "interrupted")  # said in the samples/s column, visible at 80 columns


def status_text(row: Row, measured: ReportRow | None = None, width: int = STATUS_WIDTH) -> str:
    return fit(_status(row, measured), width)


def fit(text: str, width: int) -> str:
    """`text` whole, or cut at the last word that fits, with "…"."""
    if len(text) <= width:
        return text
    cut = text[: width - 1].rstrip()
    word = cut.rsplit(" ", 1)[0].rstrip(" ·:,") if " " in cut else cut
    return f"{word if len(word) >= width // 2 else cut}…"


def _status(row: Row, measured: ReportRow | None) -> str:
    result = row.result
    if row.status in NOT_OK and result is not None:
        why = (result.error or result.reason or "no reason given").strip()
        return f"{row.status}: {why.splitlines()[-1]}"
    if row.status == "running":
        return "running…"
    if row.status == "queued":
        return "rerun queued"
    if row.status == "not needed":
        return "not needed"  # a rung the search settled without (docs/tui.md says so)
    parts = [row.status]
    if row.status == "ok" and measured is not None:
        if measured.ok_runs > 1:
            parts.append(f"mean of {measured.ok_runs}")  # a finalist measured again
        if not measured.stable:
            parts.append("noisy")
        if measured.warnings:
            parts.append(f"⚠ {measured.warnings[0]}")
    return " · ".join(parts)


class ResultsTable(DataTable[Text]):
    """Cells are plain values; the knee (◆), the recommendation (★), the configurations within noise of the best
    (≈), the running one (▸) and the highlighted one (›) are marked by symbol and style, so they survive NO_COLOR."""

    # enter is handled here, in order after the arrow keys that moved the cursor (an app-level priority
    # binding would run before the table had seen them); RowSelected reaches the app, which reruns the row.
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select_cursor", "row", key_display="⏎", tooltip=RERUN_ROW_HELP, id="rerun_row"),
    ]

    def __init__(self, state: SweepState, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=False)
        self.state = state
        self.configs: list[TrialConfig] = []
        self._pointed: int | None = None  # the row that shows POINTER

    def on_mount(self) -> None:
        self.update_view()

    def _columns(self, widths: dict[str, int]) -> None:
        """Lay out the columns, keys to their widths, when they changed: an OPTIONAL column with nothing in it gives
        its room to the status. The widths come from the cells, not from the DataTable's own measure, which waits for
        the app to be idle: beside busy processes that wait can last seconds, the columns cut at their labels."""
        if {str(c.key.value): c.width for c in self.ordered_columns} == widths:
            return
        self.clear(columns=True)
        for label, key in COLUMNS:
            if key in widths:
                self.add_column(label, key=key, width=widths[key])

    def selected_config(self) -> TrialConfig | None:
        if not self.configs or self.cursor_row < 0 or self.cursor_row >= len(self.configs):
            return None
        return self.configs[self.cursor_row]

    def update_view(self) -> None:
        # The cursor follows the state's selection (the user's row, or the recommendation at the end).
        keep = self.state.selected or self.selected_config()
        self.clear()
        self._pointed = None  # the rows are new; adding the first one may move the cursor (and POINTER) to it
        rows = {row.config: row for row in self.state.rows}
        self.configs = ordered(rows)
        report = self.state.report()  # built here: on a trial's start or end, not per sample
        theme = self.app.theme_variables
        cells = [self._cells(rows[config], report, theme, STATUS_WIDTH) for config in self.configs]
        hidden = {key for key in OPTIONAL if not any(row[key].plain.strip(f"{NONE} ") for row in cells)}
        narrow = STATUS_WIDTH - sum(OPTIONAL[key] + 2 for key in OPTIONAL if key not in hidden)
        if narrow < STATUS_WIDTH:  # a column shown only when it holds something takes its room from the status
            cells = [self._cells(rows[config], report, theme, narrow) for config in self.configs]
        shown = tuple(key for _, key in COLUMNS if key not in hidden)
        labels = {key: label for label, key in COLUMNS}
        self._columns({key: max(len(POINTER) if key == "cursor" else 0, Text(labels[key]).cell_len,
                                *(row[key].cell_len for row in cells)) for key in shown})  # fmt: skip
        for row in cells:
            self.add_row(*(row[key] for key in shown), key=str(len(self.rows)))
        if keep in self.configs:
            self.move_cursor(row=self.configs.index(keep), animate=False)
        self._point(self.cursor_row)

    def watch_cursor_coordinate(self, old: Coordinate, new: Coordinate) -> None:
        super().watch_cursor_coordinate(old, new)
        self._point(new.row)

    def _point(self, row: int) -> None:
        """Move POINTER to `row` (the cursor's): the highlight is not colour alone."""
        if row == self._pointed:
            return
        if self._pointed is not None and self._pointed < self.row_count:
            self.update_cell_at(Coordinate(self._pointed, 0), Text(""))
        self._pointed = None
        if 0 <= row < self.row_count:
            self.update_cell_at(Coordinate(row, 0), Text(POINTER, style="bold"))
            self._pointed = row

    def _cells(self, row: Row, report: Report | None, theme: dict[str, str], width: int) -> dict[str, Text]:
        measured = report.row_for(row.config) if report is not None else None
        values = _values(row, report, measured, width)
        if self.state.only and not row.compared:
            values["change"] = ""  # not rerun: this row has nothing new to compare
        style = _row_style(row, measured, theme)
        cells = {key: Text(text, style=style, justify="left" if key in LEFT else "right")
                 for key, text in values.items()}  # fmt: skip
        if measured is not None and measured.knee and not measured.recommended:
            cells["mark"].stylize(Style.parse(f"bold {theme.get('accent', 'yellow')}"))
        elif measured is not None and measured.equivalent:  # ≈: as good within noise, not the cheapest
            cells["mark"].stylize(Style.parse(theme.get("success", "green")))
        change = measured.change if measured is not None and values["change"] else None
        if change is not None and abs(change) >= 0.02:
            color = theme.get("success", "green") if change > 0 else theme.get("error", "red")
            cells["change"].stylize(Style.parse(color))
        if row.status in ("failed", "skipped", "interrupted"):
            bad = Style.parse(theme.get("error" if row.status == "failed" else "warning", "red"))
            cells["samples/s"].stylize(bad)
            cells["status"].stylize(bad)
        return cells


def _values(row: Row, report: Report | None, measured: ReportRow | None, width: int) -> dict[str, str]:
    """The report's cells for this row's configuration, with the live status where the table says it."""
    values = dict.fromkeys((key for _, key in COLUMNS), "")
    if measured is not None and report is not None:
        values.update((key, text) for key, text in report.cells(measured).items() if key in values)
    else:
        values.update((key, text) for key, text in config_cells(row.config).items() if key in values)
    if row.status in UNMEASURED:
        values["samples/s"] = row.status
    if row.status == "running" and not values["mark"]:
        values["mark"] = "▸"
    values["status"] = status_text(row, measured, width)
    return values


def _row_style(row: Row, measured: ReportRow | None, theme: dict[str, str]) -> Style:
    if measured is not None and measured.recommended:
        return Style.parse(f"bold {theme.get('success', 'green')}")
    if row.status in ("pending", "not run", "not needed", "queued"):
        return Style(dim=True)
    if row.status == "running":
        return Style(italic=True)
    return Style()
