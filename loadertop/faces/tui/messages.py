"""Messages the sweep thread posts to the app. `generation` tells a cancelled sweep's stragglers apart."""

from __future__ import annotations

from textual.message import Message

from loadertop.core.model.events import Event


class SweepEvent(Message):
    """One engine event, delivered on the UI thread."""

    def __init__(self, generation: int, event: Event) -> None:
        super().__init__()
        self.generation = generation
        self.event = event


class SweepCrashed(Message):
    """`Sweep.events()` raised: shown in the header, the app stays up."""

    def __init__(self, generation: int, error: BaseException, detail: str) -> None:
        super().__init__()
        self.generation = generation
        self.error = error
        self.detail = detail


class SweepEnded(Message):
    """The thread has left `events()`, with or without a SweepFinished."""

    def __init__(self, generation: int) -> None:
        super().__init__()
        self.generation = generation
