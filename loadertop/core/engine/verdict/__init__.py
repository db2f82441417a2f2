"""The conclusion and the rules it is drawn by: outcome.py (once, over every trial; a row rerun folded in first by
rerun.py), analysis.py (the recommendation), reasons.py, bound.py (what bounds a trial), transport_bound.py, band.py
(the noise band), knee.py, usl.py, stops.py (how the climb stopped), memory.py + leak.py (a trial's workers' memory,
a live job's leak), snippet.py (the DataLoader line); for `loadertop stages`: stage_ceilings.py, stage_advice.py,
stage_verdict.py.

The search judges with these rules, and the report shapes their figures; the verdict imports neither."""
