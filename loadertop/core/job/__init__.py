"""The training job's side: runs inside the user's training process (`loadertop.watch`, `loadertop.tune`).

Nothing here may hurt the job: bounded buffers, no blocking on a missing viewer, no exception into the training
loop from loadertop's own failures (they are logged once, and loadertop steps aside).
"""
