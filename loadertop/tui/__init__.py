"""The terminal UI (Textual). Imported only when it is used: `loadertop --headless` never loads it."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from loadertop.core.model.config import Settings
    from loadertop.core.model.results import SweepResult, TrialResult


def run_tui(
    settings: Settings,
    *,
    out_dir: Path | None,
    previous: SweepResult | None = None,
    resume: Sequence[TrialResult] = (),
    json_path: Path | None = None,
    csv_path: Path | None = None,
    theme: str | None = None,
    err: TextIO | None = None,
) -> int:
    """Run the app until the user quits. Exit code: 0 done, 130 quit mid-sweep, 1/2 the sweep failed, 1 when
    --json or --csv could not be written (after the app exits, one line per file on stderr, as headless).

    `theme="light"` (or LOADERTOP_THEME=light) starts in the light theme; `t` switches at any time."""
    from loadertop.tui.app import make_app

    app = make_app(
        settings, out_dir=out_dir, previous=previous, resume=resume, json_path=json_path, csv_path=csv_path, theme=theme
    )
    app.run()
    # app.run() returns after the sweep thread has left events(): the executor is joined on the way out.
    app.write_on_exit()
    code = app.return_code or 0
    err = err if err is not None else sys.stderr
    for path, error in app.written.items():
        if error is None:
            print(f"loadertop: wrote {path}", file=err)
        else:
            print(f"loadertop: error: cannot write {path}: {error}", file=err)
            code = 1
    return code
