"""Base of the panes: reads the shared SweepState; the app calls `update_view()` when it is stale."""

from __future__ import annotations

from textual.widget import Widget

from loadertop.tui.state import SweepState


class Pane(Widget):
    def __init__(self, state: SweepState, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.state = state

    def title(self) -> str:
        return ""

    def update_view(self) -> None:
        # The title is set here, not in render(): changing it from render() would ask for another render.
        self.border_title = self.title()
        self.refresh(layout=self.styles.height is not None and self.styles.height.is_auto)

    def on_mount(self) -> None:
        self.border_title = self.title()
