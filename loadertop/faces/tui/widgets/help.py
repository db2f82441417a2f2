"""Help screen (`?`): every key, read from the app's bindings so the list cannot drift, and the panes.

It fits 80×24 whole: below 40 rows the panes are one line each (the short list), and it scrolls if it must."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

PANES_HELP = (
    (
        "Header",
        "the machine as the job sees it (usable CPUs, memory, GPUs), the workload and progress; at the end the "
        "recommendation (★), why, and the DataLoader(...) line to paste.",
    ),
    (
        "GPU",
        "utilization per GPU, with now / avg / max beside the sparkline (it rescales itself). Without NVML: "
        "why not, and the consumer-busy % (1 − stall fraction) instead.",
    ),
    (
        "Memory",
        "the running trial: each worker's USS over time and its slope in MB/min (⚠ when it keeps climbing), "
        "total PSS, and RSS, which counts pages shared with the parent once per process.",
    ),
    (
        "Throughput",
        "batches/s of the running trial; then samples/s against num_workers over the finished trials, with "
        "the knee (|, ◆ in the table), the recommendation (★), the previous run and PSS on the right axis.",
    ),
    (
        "Table",
        "one row per configuration: ★ recommended, ◆ knee, ≈ within noise of the best, ▸ running, › highlighted "
        "(the cursor). vs prev compares with the previous run (after r, enter, + or -). ←/→ scroll it. After the "
        "sweep the highlighted row's trial fills the memory and throughput panes.",
    ),
)
# One line each at 80 columns (64 characters beside the names): what the help shows below 40 rows.
TALL = 40  # rows from which the panes' full text is shown
PANES_SHORT = (
    ("Header", "the machine, progress; at the end ★ the pick and its snippet"),
    ("GPU", "utilization now / avg / max; without NVML, consumer-busy %"),
    ("Memory", "the trial's workers: USS and MB/min (⚠ climbing), PSS, RSS"),
    ("Throughput", "the trial's batches/s; samples/s per worker count, | knee"),
    ("Table", "★ pick ◆ knee ≈ within noise ▸ running › highlighted; ←/→"),
)


def _table(rows: list[tuple[str, str]]) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold", no_wrap=True)
    table.add_column(ratio=1)
    for left, right in rows:
        table.add_row(left, right)
    return table


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("question_mark", "dismiss", "Close help", key_display="?", id="help.close"),
        Binding("escape", "dismiss", "Close help", show=False, id="help.close_escape"),
        Binding("q", "dismiss", "Close help", show=False, id="help.close_q"),
    ]

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 100; max-width: 100%; height: auto; max-height: 100%;
        border: round $accent; background: $surface; padding: 0 1;
    }
    HelpScreen .heading { margin-top: 1; }
    """

    def __init__(
        self,
        bindings: list[Binding],
        panes: Sequence[tuple[str, str]] = PANES_HELP,
        short: Sequence[tuple[str, str]] | None = None,
    ) -> None:
        super().__init__()
        self.keys = bindings
        self.panes = list(panes)  # the sweep's panes unless another view (attach) lists its own
        self.short = list(short) if short is not None else None  # one line each, for terminals under 40 rows

    def compose(self) -> ComposeResult:
        keys = [(binding.key_display or binding.key, binding.tooltip or binding.description) for binding in self.keys]
        with VerticalScroll():
            yield Static(Content.styled("Keys", "bold $accent"))
            yield Static(_table(keys), id="help-keys")
            yield Static(Content.styled("Panes", "bold $accent"), classes="heading")
            # Chosen once, for the size the screen opens at (breakpoint classes arrive after the first layout).
            rows = self.panes if self.short is None or self.app.size.height >= TALL else self.short
            yield Static(_table(rows), id="help-panes")
            yield Static(
                Content.styled("No key needs Esc, Alt or Ctrl; ? or q closes. More: docs/tui.md", "dim"),
                classes="heading",
            )
