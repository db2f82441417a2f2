"""The transport ceiling in the engine: which ceiling is which, when a trial is transport-bound, how to say it.

A trial is transport-bound when its batches/s reach TRANSPORT_BOUND of the transport ceiling at its worker count,
read steadily: the workers hand over about as many batches as this machine's DataLoader can hand over for this batch
structure even when making them costs nothing, so more workers cannot help. The fixes named
are those the measured structure points at (trial/transport.py measures; engine/drive/ceiling_requests.py collects)."""

from __future__ import annotations

from collections.abc import Sequence

from loadertop.core.engine.verdict.band import noise_band
from loadertop.core.engine.wording import pct, sps, workers
from loadertop.core.model.config import TrialConfig
from loadertop.core.model.figures import at_least_within
from loadertop.core.model.results import Ceiling, TrialResult

TRANSPORT_BOUND = 0.9  # share of the transport ceiling from which a trial counts as transport-bound
# A ceiling whose blocks spread wider than this (IQR over median; a machine busy with other work) cannot place a
# trial near it: nothing is claimed from it.
STEADY_SPREAD = 0.2
MANY_TENSORS = 8  # tensors per batch from which packing them into fewer is worth naming


def consumer_ceilings(ceilings: Sequence[Ceiling]) -> list[Ceiling]:
    return [c for c in ceilings if c.kind == "consumer"]


def transport_at(ceilings: Sequence[Ceiling], config: TrialConfig, num_workers: int | None = None) -> Ceiling | None:
    """The measured transport ceiling for this configuration's batch size and pinning at `num_workers` (its own
    worker count by default)."""
    n = config.num_workers if num_workers is None else num_workers
    want = ("transport", config.batch_size, n, config.pin_memory)
    for c in ceilings:
        if (c.kind, c.batch_size, c.num_workers, bool(c.pin_memory)) == want and c.samples_per_s:
            return c
    return None


def transport_share(trial: TrialResult, ceilings: Sequence[Ceiling]) -> tuple[Ceiling, float] | None:
    """(the ceiling, the trial's share of it) when the trial, with workers, is transport-bound; else None. Thread
    workers hand batches over in memory, not through the workers' queues the ceiling measures: never bound by it."""
    c = transport_at(ceilings, trial.config)
    if trial.config.num_workers == 0 or trial.config.worker_method == "thread":
        return None
    if c is None or not c.samples_per_s or trial.samples_per_s is None:
        return None
    spread = c.spread or 0.0
    if spread > STEADY_SPREAD:
        return None
    share = trial.samples_per_s / c.samples_per_s
    # The ceiling is a measurement too (short blocks, its own spread): one read high by its spread must not flip a
    # trial at 89% of it out of transport-bound and one at 91% in. The trial's own noise band is no such evidence:
    # a trial at 50% of the ceiling is not transport-bound because its runs disagree by ±50%.
    return (c, share) if share >= TRANSPORT_BOUND / (1.0 + spread) else None


def transport_phrase(trial: TrialResult, ceilings: Sequence[Ceiling], ok: Sequence[TrialResult]) -> str:
    """'transport-bound: 93% of the 1.4 GiB/s this machine hands over from workers[; the main process alone makes
    these batches faster: 0 workers]', or '' when the trial is not transport-bound."""
    found = transport_share(trial, ceilings)
    if found is None:
        return ""
    c, share = found
    text = f"transport-bound: {pct(share)} of the {c.gib_per_s or 0:.1f} GiB/s this machine hands over from workers"
    zero = _zero_worker(trial.config, ok)
    if zero is not None and sps(zero) > sps(trial):
        text += "; the main process alone makes these batches faster: 0 workers"
    return text


def transport_reason(rec: TrialResult, ok: Sequence[TrialResult], ceilings: Sequence[Ceiling], tol: float) -> str:
    """The recommendation's reason when transport is what bounds it (or what keeps workers from beating 0 workers);
    '' otherwise. Names the fixes that apply."""
    if rec.config.num_workers > 0:
        found = transport_share(rec, ceilings)
        who = workers(rec.config.num_workers)
    else:
        rivals = [t for t in ok if t.config.num_workers > 0 and _family(t.config) == _family(rec.config)]
        top = max(rivals, key=sps, default=None)
        found = transport_share(top, ceilings) if top is not None and sps(top) <= sps(rec) else None
        who = workers(top.config.num_workers) if top is not None else ""
    if found is None:
        return ""
    c, share = found
    reach = (f"{who} {'reaches' if who.startswith('1 ') else 'reach'} {pct(share)} of the {c.gib_per_s or 0:.1f} "
             f"GiB/s this machine hands over from workers ({c.batches_per_s or 0:.0f} batches/s of "
             f"{c.batch_mb or 0:.1f} MiB)")  # fmt: skip
    # 0 workers hand nothing over: the bound is the workers', and the pick's own bound is its row's to state.
    if rec.config.num_workers == 0:
        text = (f"the main process alone makes these batches faster: 0 workers ({sps(rec):.0f} samples/s), more "
                f"than workers can hand over: {reach}")  # fmt: skip
    else:
        text = f"transport-bound: {reach}"
    fixes = transport_fixes(c, ceilings, tol)
    return text + (f"; to move more: {', '.join(fixes)}" if fixes else "")


def transport_fixes(c: Ceiling, ceilings: Sequence[Ceiling], tol: float) -> list[str]:
    """The fixes the measured batch structure points at."""
    fixes = []
    if c.float_images:
        fixes.append("uint8 samples normalised on the GPU (4x fewer bytes)")
    if c.tensors is not None and c.tensors >= MANY_TENSORS:
        fixes.append(f"fewer, larger tensors per sample ({c.tensors} per batch now)")
    gib = c.gib_per_s or 0.0
    same = [o for o in ceilings if o.kind == "transport" and o.num_workers == c.num_workers and o.gib_per_s]
    larger = [o.gib_per_s or 0.0 for o in same if o.batch_size > c.batch_size]
    if not larger or max(larger) > gib * (1 + tol):  # unmeasured, or measured to move more
        fixes.append("a larger batch")
    for o in same:
        if o.batch_size == c.batch_size and o.pin_memory != c.pin_memory and (o.gib_per_s or 0.0) > gib * (1 + tol):
            fixes.append(f"pin_memory={o.pin_memory} ({o.gib_per_s:.1f} GiB/s measured)")
    return fixes


def transport_limit(ceilings: Sequence[Ceiling], config: TrialConfig, above: int) -> Ceiling | None:
    """The highest transport ceiling measured for this configuration at more than `above` workers (the most any
    rung of the climb above it could hand over), or None when none was measured."""
    higher = [c for c in ceilings if c.kind == "transport" and c.num_workers is not None and c.num_workers > above]
    found = [c for c in higher if transport_at(ceilings, config, c.num_workers) is c]
    return max(found, key=lambda c: c.samples_per_s or 0.0, default=None)


def transport_stop(ceilings: Sequence[Ceiling], t: TrialResult, tol: float, head: str) -> str | None:
    """The climb's stop when no rung above hands over more than this rung already makes, else None."""
    limit = transport_limit(ceilings, t.config, above=t.config.num_workers)
    if limit is None or not limit.samples_per_s or not at_least_within(sps(t), limit.samples_per_s, noise_band(tol, t)):
        return None
    return (
        f"stopped climbing: {head} is within noise of the {limit.samples_per_s:.0f} samples/s transport ceiling "
        f"({limit.gib_per_s or 0:.1f} GiB/s at {workers(limit.num_workers or 0)}, the most any rung above hands "
        "over from workers)"
    )


def _family(config: TrialConfig) -> tuple[int, bool]:
    return config.batch_size, config.pin_memory


def _zero_worker(config: TrialConfig, ok: Sequence[TrialResult]) -> TrialResult | None:
    zero = [t for t in ok if t.config.num_workers == 0 and _family(t.config) == _family(config)]
    return max(zero, key=sps, default=None)
