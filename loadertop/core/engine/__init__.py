"""The engine: runs in loadertop's own process, never imports torch. Its public API is what this module exports;
the faces (CLI, headless, TUI) use these names only (an import-linter contract in pyproject.toml says so)."""

from loadertop.core.engine import export
from loadertop.core.engine.api import sweep
from loadertop.core.engine.driver import Sweep
from loadertop.core.engine.runfolder import read_run, read_settings, read_trials_strict
from loadertop.core.engine.settings import build_settings
from loadertop.core.engine.table import HEADERS, RSS_FOOTNOTE, marks, num, pct, trial_cells

__all__ = [
    "HEADERS",
    "RSS_FOOTNOTE",
    "Sweep",
    "build_settings",
    "export",
    "marks",
    "num",
    "pct",
    "read_run",
    "read_settings",
    "read_trials_strict",
    "sweep",
    "trial_cells",
]
