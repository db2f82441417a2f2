"""Results table: one row per configuration, redrawn when a trial starts or ends (never per sample)."""

from __future__ import annotations

from typing import ClassVar

from rich.style import Style
from rich.text import Text
from textual.binding import Binding, BindingType
from textual.widgets import DataTable

from loadertop.core.model.config import TrialConfig
from loadertop.tui import fmt
from loadertop.tui.state import Row, SweepState

RERUN_ROW_HELP = "rerun the highlighted configuration with more repeats (tighter spread)"

COLUMNS = (
    ("", "mark"),
    ("w", "workers"),
    ("bs", "batch"),
    ("pf", "prefetch"),
    ("pin", "pin"),
    ("pers", "persistent"),
    ("samples/s", "sps"),
    ("±", "spread"),
    ("Δ prev", "change"),
    ("stall", "stall"),
    ("1st", "first"),
    ("USS/w", "uss"),
    ("PSS", "pss"),
    ("GPU", "gpu"),
    ("status", "status"),
)


NOT_OK = ("failed", "skipped")
UNMEASURED = (*NOT_OK, "not run", "interrupted")  # said in the samples/s column, visible at 80 columns


def _check(flag: bool) -> str:
    return "✓" if flag else "·"


def status_text(row: Row) -> str:
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
    if row.status == "ok" and result is not None:
        if len(row.runs) > 1:
            parts.append(f"mean of {len(row.runs)}")  # a finalist measured again
        if not result.stable:
            parts.append("noisy")
        if result.warnings:
            parts.append(f"⚠ {result.warnings[0]}")
    return " · ".join(parts)


class ResultsTable(DataTable):
    """Cells are plain values; the knee (◆) and the recommendation (★) are marked by symbol and style,
    so they survive NO_COLOR."""

    # enter is handled here, in order after the arrow keys that moved the cursor (an app-level priority
    # binding would run before the table had seen them); RowSelected reaches the app, which reruns the row.
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select_cursor", "row", key_display="⏎", tooltip=RERUN_ROW_HELP, id="rerun_row"),
    ]

    def __init__(self, state: SweepState, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=False)
        self.state = state
        self.configs: list[TrialConfig] = []

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
        self.configs = [row.config for row in self.state.rows]
        theme = self.app.theme_variables
        for row in self.state.rows:
            self.add_row(*self._cells(row, theme), key=str(len(self.rows)))
        if keep in self.configs:
            self.move_cursor(row=self.configs.index(keep), animate=False)

    def _cells(self, row: Row, theme: dict[str, str]) -> list[Text]:
        state = self.state
        cfg, r = row.config, row.result
        measured = r is not None and row.status in ("ok", "queued", "running") and r.samples_per_s is not None
        recommended = state.is_recommended(row)
        knee = state.is_knee(row)
        mark = ("★" if recommended else "") + ("◆" if knee else "") or ("▸" if row.status == "running" else "")
        uss = sum(r.worker_uss_mb) / len(r.worker_uss_mb) if r and r.worker_uss_mb else None
        change = row.change()
        values = [
            mark,
            str(cfg.num_workers),
            str(cfg.batch_size),
            str(cfg.prefetch_factor) if cfg.prefetch_factor is not None else "—",
            _check(cfg.pin_memory),
            _check(cfg.persistent_workers),
            fmt.rate(row.samples_per_s()) if measured else (row.status if row.status in UNMEASURED else ""),
            f"±{fmt.pct(r.spread, 1)}" if measured and r and r.spread is not None else "",
            fmt.signed_pct(change),
            fmt.pct(r.stall_fraction) if measured and r else "",
            fmt.seconds(r.first_batch_s) if r and r.first_batch_s is not None else "",
            fmt.mb(uss, short=True) if uss is not None else "",
            fmt.mb(r.total_pss_mb, short=True) if r and r.total_pss_mb is not None else "",
            f"{r.gpu_util:.0f}%" if r and r.gpu_util is not None else ("—" if measured else ""),
            status_text(row),
        ]
        base = Style()
        if recommended:
            base = Style.parse(f"bold {theme.get('success', 'green')}")
        elif row.status in ("pending", "not run", "not needed", "queued"):
            base = Style(dim=True)
        elif row.status == "running":
            base = Style(italic=True)
        cells = [Text(v, style=base, justify="right" if 1 <= i <= 13 else "left") for i, v in enumerate(values)]
        if knee and not recommended:
            cells[0].stylize(Style.parse(f"bold {theme.get('accent', 'yellow')}"))
        if change is not None and abs(change) >= 0.02:
            color = theme.get("success", "green") if change > 0 else theme.get("error", "red")
            cells[8].stylize(Style.parse(color))
        if row.status in ("failed", "skipped", "interrupted"):
            cells[6].stylize(Style.parse(theme.get("error" if row.status == "failed" else "warning", "red")))
            cells[14].stylize(Style.parse(theme.get("error" if row.status == "failed" else "warning", "red")))
        return cells
