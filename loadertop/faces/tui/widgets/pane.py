"""Base of the panes: reads a shared state (the sweep's SweepState, attach's LiveState); the app calls
`update_view()` when it may be stale.

A pane builds its text in `view()`. `update_view()` builds it and asks Textual for a repaint only when the text,
its styles or the title changed, and for a layout pass only when the number of lines changed: a probe tick that
changes nothing on screen costs no repaint.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from textual.content import Content
from textual.geometry import Size
from textual.widget import Widget

StateT = TypeVar("StateT")


class Pane(Widget, Generic[StateT]):
    def __init__(self, state: StateT, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.state = state
        self._shown: tuple[Size, Content] | None = None  # what the last repaint showed, at which size

    def title(self) -> str:
        return ""

    def view(self) -> Content:
        return Content("")

    def render(self) -> Content:
        if self._shown is None or self._shown[0] != self.content_size:
            self._shown = (self.content_size, self.view())
        return self._shown[1]

    def invalidate(self) -> None:
        """Forget what was shown (a theme or terminal size change): the next update_view() repaints."""
        self._shown = None

    def update_view(self) -> None:
        content = self.view()
        title = self.title()
        old = self._shown[1] if self._shown is not None else None
        if old is not None and title == self.border_title and _same(old, content):
            return
        # The title is set here, not in render(): changing it from render() would ask for another render.
        self.border_title = title
        self._shown = (self.content_size, content)
        grows = self.styles.height is not None and self.styles.height.is_auto
        self.refresh(layout=grows and (old is None or _lines(old) != _lines(content)))

    def on_mount(self) -> None:
        self.border_title = self.title()


def _lines(content: Content) -> int:
    return content.plain.count("\n")


def _same(a: Content, b: Content) -> bool:
    return a.plain == b.plain and list(a.spans) == list(b.spans)
