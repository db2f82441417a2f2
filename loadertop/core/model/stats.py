"""A figure over the values that were measured: a probe that could not read, a trial that did not record, leaves
None, and a summary over nothing is None, not an error."""

from __future__ import annotations

import statistics
from collections.abc import Iterable


def median_of(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def mean_of(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None
