"""What to measure next: the adaptive search (adaptive.py) climbs the worker ladder (rungs.py), bisects (refine.py),
checks a gain past saturated CPUs (saturation.py) and repeats the finalists head to head (finalists.py); the grid
and a row rerun plan from a list (planners.py). It judges with the verdict's rules, never the other way round.

This `__init__` is the search's one public entry for the training job's side: `loadertop.tune` (core/job/) plans
with the same adaptive planner and concludes with the same rule and wording as a sweep, and takes exactly these
names (an import-linter contract in pyproject.toml says so)."""

from loadertop.core.engine.search.adaptive import AdaptivePlanner
from loadertop.core.engine.verdict.analysis import analyze
from loadertop.core.engine.verdict.band import noise_band
from loadertop.core.engine.verdict.snippet import UserArgs, snippet
from loadertop.core.engine.verdict.stops import BUDGET, TUNE_TERMS, Stop
from loadertop.core.engine.wording import pct

__all__ = ["BUDGET", "TUNE_TERMS", "AdaptivePlanner", "Stop", "UserArgs", "analyze", "noise_band", "pct", "snippet"]
