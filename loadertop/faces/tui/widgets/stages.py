"""Where the time goes (`w`): the dataset's stages measured in one process with 0 workers (`loadertop stages`), the
ceilings each sets on this machine and the advice, shown as the headless face prints them (share bars per stage).

Measuring takes the CPUs a sweep measures with, so it starts only while no trial runs; it runs in a thread and the
screen says what it is doing meanwhile. It scrolls where the terminal is short (80×24)."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from rich.console import RenderableType
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from loadertop.core.model.config import UsageError
from loadertop.core.model.stages import StagesReport
from loadertop.faces.headless_stages import render

Measure = Callable[[], StagesReport]


class StagesScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,w,q", "dismiss_screen", "close", tooltip="back to the sweep"),
    ]
    DEFAULT_CSS = """
    StagesScreen { align: center middle; }
    StagesScreen > VerticalScroll { width: 100%; height: 100%; border: round $accent; padding: 0 1; }
    """

    def __init__(self, measure: Measure, what: str) -> None:
        super().__init__()
        self._measure = measure
        self.what = what
        self.report: StagesReport | None = None
        self.error: str | None = None

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(Text(f"measuring {self.what}: each stage in one process, 0 workers (about 5 s) ..."),
                         id="stages-body")  # fmt: skip

    def on_mount(self) -> None:
        self.query_one(VerticalScroll).border_title = "where the time goes (w, esc: back)"
        self._run()

    @work(thread=True, exit_on_error=False)
    def _run(self) -> None:
        try:
            report = self._measure()
        except UsageError as exc:  # a dataset that fails, said in one line as `loadertop stages` says it
            self.app.call_from_thread(self._failed, str(exc))
            return
        self.app.call_from_thread(self._show, report)

    def _show(self, report: StagesReport) -> None:
        self.report = report
        self._draw()

    def _failed(self, error: str) -> None:
        self.error = error
        self.query_one("#stages-body", Static).update(Text(f"stages not measured: {error}", style="red"))

    def _draw(self) -> None:
        if self.report is not None:
            self.query_one("#stages-body", Static).update(self.body(self.report))

    def body(self, report: StagesReport) -> RenderableType:
        return render(report, max(60, self.size.width - 6))  # the border, the padding and the scrollbar

    def on_resize(self) -> None:
        self._draw()

    def action_dismiss_screen(self) -> None:
        self.dismiss()
