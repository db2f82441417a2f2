"""What a run leaves and every face shows: the run folder (runfolder.py: written as the sweep goes, read back by
--compare and --resume), one row per configuration (rows.py), the exports (export.py) and the trial count a face
shows (progress.py). The faces reach it through loadertop.core.engine."""
