"""What to measure next: the adaptive search (adaptive.py) climbs the worker ladder (rungs.py), bisects (refine.py),
checks a gain past saturated CPUs (saturation.py) and repeats the finalists head to head (finalists.py); the grid
and a row rerun plan from a list (planners.py). It judges with the verdict's rules, never the other way round. The
training job's side reaches it through engine/tune_entry.py."""
