"""The engine's one entry for the training job's side: what `loadertop.tune` (core/job/) takes to plan with the same
adaptive planner as a sweep and to conclude with the same rule and wording. An import-linter contract in
pyproject.toml keeps the job side to these names."""

from loadertop.core.engine.search.adaptive import AdaptivePlanner
from loadertop.core.engine.verdict.analysis import analyze
from loadertop.core.engine.verdict.band import Win, noise_band, win_over
from loadertop.core.engine.verdict.snippet import UserArgs, snippet
from loadertop.core.engine.verdict.stops import BUDGET, RUN_TUNE_TERMS, TUNE_TERMS, Stop, Terms
from loadertop.core.engine.wording import pct

__all__ = [
    "BUDGET",
    "RUN_TUNE_TERMS",
    "TUNE_TERMS",
    "AdaptivePlanner",
    "Stop",
    "Terms",
    "UserArgs",
    "Win",
    "analyze",
    "noise_band",
    "pct",
    "snippet",
    "win_over",
]
