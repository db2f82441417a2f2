"""The engine: runs in loadertop's own process, never imports torch. Its public API is what this module exports;
the faces (CLI, headless, TUI) use these names only (an import-linter contract in pyproject.toml says so), and print
every figure through its formatters (NONE, num, rate, pct, percent, utilization, mb, slope, seconds, clock,
duration_text: engine/wording.py)."""

from loadertop.core.engine.drive.api import sweep
from loadertop.core.engine.drive.driver import Sweep
from loadertop.core.engine.drive.request import SweepRequest
from loadertop.core.engine.drive.settings import build_settings
from loadertop.core.engine.drive.stages_run import stages
from loadertop.core.engine.live import (
    AttachError,
    JobRun,
    LeakConfig,
    LiveSession,
    RankSessions,
    find_jobs,
    hold_signals,
    leak_warning,
    open_session,
    start_job,
)
from loadertop.core.engine.nodes.launch import Launch, detect_launch
from loadertop.core.engine.nodes.node_link import NodeLink
from loadertop.core.engine.report.export import write_csv, write_json, write_markdown, write_stages_json
from loadertop.core.engine.report.progress import TrialCount
from loadertop.core.engine.report.rows import (
    FOOTNOTE,
    HEADERS,
    Report,
    ReportRow,
    build_report,
    config_cells,
    ordered,
)
from loadertop.core.engine.report.runfolder import read_run, read_settings, read_trials_strict
from loadertop.core.engine.wording import (
    NONE,
    clock,
    duration_text,
    mb,
    num,
    pct,
    percent,
    rate,
    seconds,
    slope,
    utilization,
)

__all__ = [
    "FOOTNOTE",
    "HEADERS",
    "NONE",
    "AttachError",
    "JobRun",
    "Launch",
    "LeakConfig",
    "LiveSession",
    "NodeLink",
    "RankSessions",
    "Report",
    "ReportRow",
    "Sweep",
    "SweepRequest",
    "TrialCount",
    "build_report",
    "build_settings",
    "clock",
    "config_cells",
    "detect_launch",
    "duration_text",
    "find_jobs",
    "hold_signals",
    "leak_warning",
    "mb",
    "num",
    "open_session",
    "ordered",
    "pct",
    "percent",
    "rate",
    "read_run",
    "read_settings",
    "read_trials_strict",
    "seconds",
    "slope",
    "stages",
    "start_job",
    "sweep",
    "utilization",
    "write_csv",
    "write_json",
    "write_markdown",
    "write_stages_json",
]
