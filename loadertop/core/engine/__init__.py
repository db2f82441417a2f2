"""The engine: runs in loadertop's own process, never imports torch. Its public API is what this module exports;
the faces (CLI, headless, TUI) use these names only (an import-linter contract in pyproject.toml says so)."""

from loadertop.core.engine.drive.api import sweep
from loadertop.core.engine.drive.driver import Sweep
from loadertop.core.engine.drive.settings import build_settings
from loadertop.core.engine.live import AttachError, LeakConfig, LiveSession, find_jobs, open_session
from loadertop.core.engine.nodes.launch import Launch, detect_launch
from loadertop.core.engine.nodes.node_link import NodeLink
from loadertop.core.engine.report.export import write_csv, write_json, write_markdown
from loadertop.core.engine.report.progress import TrialCount
from loadertop.core.engine.report.rows import (
    FOOTNOTE,
    HEADERS,
    Report,
    ReportRow,
    build_report,
    config_cells,
    num,
    ordered,
)
from loadertop.core.engine.report.runfolder import read_run, read_settings, read_trials_strict
from loadertop.core.engine.wording import pct

__all__ = [
    "FOOTNOTE",
    "HEADERS",
    "AttachError",
    "Launch",
    "LeakConfig",
    "LiveSession",
    "NodeLink",
    "Report",
    "ReportRow",
    "Sweep",
    "TrialCount",
    "build_report",
    "build_settings",
    "config_cells",
    "detect_launch",
    "find_jobs",
    "num",
    "open_session",
    "ordered",
    "pct",
    "read_run",
    "read_settings",
    "read_trials_strict",
    "sweep",
    "write_csv",
    "write_json",
    "write_markdown",
]
