"""Nodes pane (many-node sweeps only): one configuration node by node, the highlighted row's, else the
recommended one, else the latest measured; and the engine's sentence on which rank paces the job.

Every cell is the engine's report (`Report.node_cells`), as headless and Markdown print it; hidden on one node."""

from __future__ import annotations

from contextlib import suppress

from textual.content import Content
from textual.dom import NoScreen

from loadertop.core.engine import Report, ReportRow
from loadertop.faces.tui.state import SweepState
from loadertop.faces.tui.widgets.pane import Pane

NARROW = ("node", "host", "samples/s", "per rank", "behind", "stall", "p99", "pss", "status")  # fits 80 columns
LEFT = ("node", "host", "status")


class NodesPane(Pane[SweepState]):
    DEFAULT_CLASSES = "box"

    def __init__(self, state: SweepState, *, id: str | None = None) -> None:
        super().__init__(state, id=id)
        self.report: Report | None = None
        self.row: ReportRow | None = None

    def update_view(self) -> None:
        self.report = self.state.report()
        self.row = shown_row(self.report, self.state) if self.report is not None else None
        shown = self.row is not None
        self.set_class(shown, "-shown")  # the stylesheet shows it (unless the screen is too small)
        with suppress(NoScreen):  # a late redraw while the app shuts down
            self.screen.set_class(shown, "-nodes")  # on a short screen the results table gives it room
        super().update_view()

    def title(self) -> str:
        row = self.row
        if row is None:
            return "Nodes"
        which = " ★" if row.recommended else ""
        return f"Nodes · {row.config.label()}{which}"

    def view(self) -> Content:
        report, row = self.report, self.row
        if report is None or row is None:
            return Content("")
        width = max(self.content_size.width, 40)
        keys = report.node_columns if width >= 110 else tuple(k for k in report.node_columns if k in NARROW)
        cells = [report.node_cells(node) for node in row.nodes]
        widths = {k: max(len(report.node_headers[k]), *(len(c[k]) for c in cells)) for k in keys}

        def line(values: dict[str, str]) -> str:
            return " ".join(values[k].ljust(widths[k]) if k in LEFT else values[k].rjust(widths[k]) for k in keys)

        lines = [Content.styled(line(report.node_headers), "bold")]
        for node, text in zip(row.nodes, cells, strict=True):
            style = "bold $warning" if node.paces else ("$error" if node.status != "ok" else "")
            lines.append(Content.styled(line(text), style))
        # The pacing sentence a clause a line: the pane does not wrap, and its clauses fit 120 columns.
        lines.extend(Content.styled(clause, "dim") for clause in row.pacing.split("; ") if clause)
        return Content("\n").join(lines)


def shown_row(report: Report, state: SweepState) -> ReportRow | None:
    """The highlighted row, else the recommended one, else the latest measured: the first of them with nodes."""
    picks = [report.row_for(state.selected) if state.selected is not None else None, report.recommended]
    picks.append(max((r for r in report.rows if r.nodes), key=lambda r: r.runs[-1], default=None))
    return next((row for row in picks if row is not None and row.nodes), None)
