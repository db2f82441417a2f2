"""The faces: what a user sees and types. cli.py (the commands), headless.py and its kin (lines on a terminal, a
file or a pipe), tui/ (the sweep's and the live job's screens), openmetrics.py (/metrics for Prometheus). They parse,
render and bind keys; every figure comes from the engine's public API (loadertop.core.engine) and the model."""
