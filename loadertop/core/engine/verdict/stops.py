"""How the adaptive search's climb stopped, in a form the conclusion reads without parsing the trace's text.

The climb's "stop" step (model/results.py SearchStep) carries its kind, the rung it stopped at and the number behind
it. The recommendation's reason (engine/verdict/analysis.py) says "try a wider --workers range" only when the climb
reached the top of the range still gaining; when a model, a ceiling, a budget or a fault stopped it, it says that
instead."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from loadertop.core.engine.wording import pct, workers
from loadertop.core.model.results import SearchStep

TOP = "top"  # the top of the --workers range, measured and still gaining
PEAK = "peak"  # a trusted USL fit puts the peak at or below the rung (value: N*)
CEILING = "ceiling"  # the rung is within noise of the consumer's ceiling (value: the ceiling's samples/s)
TRANSPORT = "transport"  # the rung is within noise of the transport ceiling
FLAT = "flat"  # the rung gained less than the noise band over the best rung below (value: its gain)
SATURATED = "saturated"  # the CPUs are saturated and the repeats show no significant win past them (value: gain)
MEMORY = "memory"  # more workers would exceed the memory budget (value: the most it allows)
FAULT = "fault"  # the rung failed: a guard or a fault says no
KINDS = (TOP, PEAK, CEILING, TRANSPORT, FLAT, SATURATED, MEMORY, FAULT)  # the sweep's climb
BUDGET = "budget"  # loadertop.tune's: its budget_s ran out while the climb still gained


@dataclass(frozen=True)
class Terms:
    """How a reason names what the user can change: a sweep's flags, or tune's arguments. One vocabulary passed in,
    so that tune says `max_workers` where a sweep says `--workers` without rewording the verdict's sentences."""

    wider: str = "a wider --workers range"  # "try ..." when the top of the range was still gaining; "": say nothing
    some_range: str = "a --workers range"  # "try ..." when only 0 workers were measured
    more_budget: str = "a larger budget"  # what would have let the climb go on


SWEEP_TERMS = Terms()
TUNE_TERMS = Terms("a larger max_workers", "max_workers", "a larger budget_s")
# `loadertop run --tune BUDGET_S`: its one option is the budget (no range to widen)
RUN_TUNE_TERMS = Terms("", "a larger --tune budget", "a larger --tune budget")


@dataclass(frozen=True)
class Stop:
    """Why the climb stops: the trace's sentence and its structured form."""

    text: str
    kind: str
    workers: int
    value: float | None = None

    def step(self) -> SearchStep:
        return SearchStep("stop", self.text, None, self.kind, self.workers, self.value)


def last_stop(trace: Sequence[SearchStep]) -> SearchStep | None:
    """The climb's stop in a search trace (the last, after a row rerun folds traces together); None for a grid."""
    return next((s for s in reversed(trace) if s.stop is not None), None)


def stop_clause(stop: SearchStep | None, n: int, top: int | None, terms: Terms = SWEEP_TERMS) -> str:
    """Why nothing above `n` workers (the most measured, and the fastest) was measured: the clause that follows
    "fastest at n workers". `top`: the top of the --workers range."""
    kind = stop.stop if stop is not None else None
    value = stop.stop_value if stop is not None else None
    at = stop.stop_workers if stop is not None and stop.stop_workers is not None else n
    if kind == PEAK and value is not None:
        return (
            f"the USL fit puts the peak near {workers(round(value))}; {n} measured fastest; "
            "more were predicted slower and not run"
        )
    if kind == CEILING and value is not None:
        return f"{workers(at)} came within noise of the {value:.0f} samples/s ceiling: more cannot go faster; not run"
    if kind == TRANSPORT:
        return f"{workers(at)} came within noise of the transport ceiling: more cannot go faster; not run"
    if kind == MEMORY:
        most = f" (it allows at most {workers(int(value))})" if value is not None else ""
        return f"more than {workers(at)} would exceed the memory budget{most}; not run"
    if kind == FAULT:
        return f"{workers(at)} failed (a guard or a fault said no; see its row): more were not run"
    if kind == SATURATED:
        gain = f" ({pct(value, signed=True)})" if value is not None else ""
        return f"the CPUs are saturated and {workers(at)} showed no significant win over repeats{gain}; more not run"
    if kind == BUDGET:
        return f"the budget ended the climb at {workers(at)} ({terms.more_budget})"
    if kind == FLAT:
        return f"{workers(at)} gained less than the noise band: more were not run"
    if top is None or n >= top:
        return f"the top of the range{f'; try {terms.wider}' if terms.wider else ''}"
    return f"the larger counts up to {top} did not finish (see their rows)"
