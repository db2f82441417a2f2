"""Both screens' App.notify, which also keeps what it said: (severity, text) in `messages`, for tests."""

from __future__ import annotations

from typing import TypeVar

from textual.app import App
from textual.notifications import SeverityLevel

ReturnType = TypeVar("ReturnType")


class NotingApp(App[ReturnType]):
    """An App whose every notification is also appended to `messages` (each subclass makes the list)."""

    messages: list[tuple[str, str]]

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = True,
    ) -> None:  # App.notify's own parameters
        self.messages.append((str(severity), message))
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)
