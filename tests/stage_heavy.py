"""A package whose import takes IMPORT_S of wall time, as a heavy library's does (tests/stage_datasets.py)."""

from __future__ import annotations

import time

IMPORT_S = 0.4

_end = time.perf_counter() + IMPORT_S
while time.perf_counter() < _end:
    pass


def touch() -> None:
    """Nothing: what the dataset calls once it has the module."""
