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

from loadertop.core.engine import Report, ReportRow, config_cells, ordered
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
    ("Δ prev", "change"),
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

NOT_OK = ("failed", "skipped")
UNMEASURED = (*NOT_OK, "not run", "interrupted")  # said in the samples/s column, visible at 80 columns


def status_text(row: Row, measured: ReportRow | None = None) -> str:
    result = row.result
    if row.status in NOT_OK and result is not None:
        why = (result.error or result.reason or "no reason given").strip()
        return f"{row.status}: {why.splitlines()[-1]}"
    if row.status == "running":
        return "running…"
    if row.status == "queued":
        return "rerun queued"
    if row.status == "not needed":
        return "not needed (search settled)"
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
        for label, key in COLUMNS:
            self.add_column(label, key=key)
        self.update_view()

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
        for config in self.configs:
            self.add_row(*self._cells(rows[config], report, theme), key=str(len(self.rows)))
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

    def _cells(self, row: Row, report: Report | None, theme: dict[str, str]) -> list[Text]:
        measured = report.row_for(row.config) if report is not None else None
        values = _values(row, report, measured)
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
        return [cells[key] for _, key in COLUMNS]


def _values(row: Row, report: Report | None, measured: ReportRow | None) -> dict[str, str]:
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
    values["status"] = status_text(row, measured)
    return values


def _row_style(row: Row, measured: ReportRow | None, theme: dict[str, str]) -> Style:
    if measured is not None and measured.recommended:
        return Style.parse(f"bold {theme.get('success', 'green')}")
    if row.status in ("pending", "not run", "not needed", "queued"):
        return Style(dim=True)
    if row.status == "running":
        return Style(italic=True)
    return Style()
