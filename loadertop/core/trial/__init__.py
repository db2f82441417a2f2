"""Runs in the runner process, the trial process it forks per trial, and that trial's DataLoader workers.

This side imports torch; it knows nothing of the engine and talks to it only through the runner protocol (and
`loadertop stages`' child, stages_main.py, through the stages protocol).
"""
