"""Watching a live training job (`loadertop attach`): the target, the job's socket, the probes, leak detection,
one LiveSnapshot per interval. The faces use it through loadertop.core.engine."""

from loadertop.core.engine.live.job_run import JobRun, hold_signals, start_job
from loadertop.core.engine.live.opener import open_session
from loadertop.core.engine.live.ranks import RankSessions, fold_ranks
from loadertop.core.engine.live.session import LiveSession
from loadertop.core.engine.live.target import AttachError, find_jobs
from loadertop.core.engine.verdict.leak import LeakConfig, leak_warning

__all__ = [
    "AttachError",
    "JobRun",
    "LeakConfig",
    "LiveSession",
    "RankSessions",
    "find_jobs",
    "fold_ranks",
    "hold_signals",
    "leak_warning",
    "open_session",
    "start_job",
]
