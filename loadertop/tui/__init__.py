"""The terminal UI (Textual). Imported only when it is used: `loadertop --headless` never loads it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loadertop.core.model.config import Settings
    from loadertop.core.model.results import SweepResult


def run_tui(
    settings: Settings, *, out_dir: Path | None, previous: SweepResult | None = None, theme: str | None = None
) -> int:
    """Run the app until the user quits. Exit code: 0 done, 130 quit mid-sweep, 1/2 the sweep failed.

    `theme="light"` (or LOADERTOP_THEME=light) starts in the light theme; `t` switches at any time."""
    from loadertop.tui.app import make_app

    app = make_app(settings, out_dir=out_dir, previous=previous, theme=theme)
    app.run()
    # app.run() returns after the sweep thread has left events(): the executor is joined on the way out.
    return app.return_code or 0
