"""The engine's one entry for the training job's side: what `loadertop.tune` (core/job/) takes to plan with the same
adaptive planner as a sweep and to conclude with the same rule and wording. An import-linter contract in
pyproject.toml keeps the job side to these names."""

from loadertop.core.engine.search.adaptive import AdaptivePlanner
from loadertop.core.engine.verdict.analysis import analyze
from loadertop.core.engine.verdict.band import noise_band
from loadertop.core.engine.verdict.snippet import UserArgs, snippet
from loadertop.core.engine.verdict.stops import BUDGET, TUNE_TERMS, Stop
from loadertop.core.engine.wording import pct

__all__ = ["BUDGET", "TUNE_TERMS", "AdaptivePlanner", "Stop", "UserArgs", "analyze", "noise_band", "pct", "snippet"]
