"""Every clause of a result's reasons read back against its own table: a clause that the measurements beside it
contradict is a finding. Independent of the engine's thresholds where it can be (the numbers are the issue's), so it
judges the engine rather than repeating it. Used by test_reason_truth.py; an end-to-end test may call it too."""

from __future__ import annotations

import re

from loadertop.core.engine.verdict.band import merge_repeats, noise_band
from loadertop.core.engine.verdict.knee import curve_of
from loadertop.core.model.curves import curve_key, on_curve
from loadertop.core.model.results import SweepResult, TrialResult

BUSY = 0.75  # a trial whose processes used this share of the usable CPUs or more is not waiting on I/O
IDLE = 0.5  # nor CPU-bound below this share
SLOWER_AGAIN = re.compile(r"slower again at (\d+) workers? \(([−+])([\d.]+)%\)")
ARE_SLOWER = re.compile(r"are slower \((\d+) vs (\d+) samples/s")
REPEAT = re.compile(r" \(repeat of #\d+\)$")
BEST = re.compile(r", (within noise of )?best(;|$)")  # a clause of its own: a note may follow it after a ";"
NO_SPEED = re.compile(r"no speed \((\d+) vs (\d+) samples/s, within ([\d.]+)%\)")
CITED = re.compile(r"where the CPU goes: (.+?) is ([\d.]+)% of the CPU time per sample")
DOMINATES = 0.5  # a stage cited as where the CPU goes holds at least this much of it
RESTARTS = re.compile(r"each epoch restarts (\d+) workers? in ([\d.]+) s, (\d+(?:\.\d)?)% of its time")


def contradictions(result: SweepResult) -> list[str]:
    """Each clause of the trials' reasons, the knee's and the recommendation's that the table contradicts."""
    ok = merge_repeats([t for t in result.trials if t.status == "ok" and t.samples_per_s is not None])
    tol, cpus = result.settings.tolerance, max(1, result.machine.usable_cpus)
    found: list[str] = []
    transport = any(c.kind == "transport" for c in result.ceilings)
    for t in ok:
        found += [f"#{t.index} w={t.config.num_workers}: {p}" for p in _clauses(t, t.reason, ok, tol, cpus)]
        found += [f"#{t.index} w={t.config.num_workers}: {p}" for p in _restarts(t.reason, ok, transport)]
    rec = result.recommendation
    if rec is not None:
        chosen = next(t for t in ok if t.config == rec.config)
        found += [f"recommendation: {p}" for p in _clauses(chosen, rec.reason, ok, tol, cpus)]
        found += [f"recommendation: {p}" for p in _comparisons(rec.reason)]
        found += [f"recommendation: {p}" for p in _restarts(rec.reason, ok, transport)]
        found += [f"recommendation: {p}" for p in _same_bound(chosen, rec.reason)]
        found += [f"recommendation: {p}" for p in _stage_citation(result, chosen, rec.reason)]
        curve = curve_of(ok, chosen)  # the engine's curve of the recommendation (a 0-worker pick: its family's)
        if result.knee is not None:
            found += [f"knee: {p}" for p in _knee(result, curve, tol)]
            found += [f"knee: {p}" for p in _slower_again(result.knee.reason, curve)]
        found += [f"recommendation: {p}" for p in _slower_again(rec.reason, curve)]
        found += _within_noise(curve, rec.equivalent)
    return found


def _within_noise(curve: list[TrialResult], equivalent: tuple[object, ...]) -> list[str]:
    """A row on the recommendation's curve says "within noise of best" exactly when the ≈ set holds it (the set the
    recommendation is chosen from): one sentence may not call a configuration within noise that another calls
    outside the band."""
    if not equivalent:
        return []
    found = []
    for t in curve:
        row = REPEAT.sub("", t.reason)
        says = BEST.search(row) is not None
        if says != (t.config in equivalent):
            held = "is" if t.config in equivalent else "is not"
            found.append(f"#{t.index} w={t.config.num_workers}: its row says {row!r}, but it {held} in the ≈ set")
    return found


def _clauses(t: TrialResult, reason: str, ok: list[TrialResult], tol: float, cpus: int) -> list[str]:
    problems = []
    share = (t.cpu_percent or 0.0) / (100.0 * cpus) if t.cpu_percent is not None else None
    machine = (t.machine_cpu_percent or 0.0) / (100.0 * cpus) if t.machine_cpu_percent is not None else None
    if "I/O-bound" in reason and share is not None and share >= BUSY:
        problems.append(f"'I/O-bound' at {share:.0%} of the usable CPUs: {reason}")
    if "I/O-bound" in reason and machine is not None and machine >= BUSY:
        problems.append(f"'I/O-bound' while every process held {machine:.0%} of the usable CPUs: {reason}")
    busy = max(share or 0.0, machine or 0.0) if share is not None else None
    if reason.startswith("CPU-bound") and busy is not None and busy < IDLE:
        problems.append(f"'CPU-bound' at {busy:.0%} of the usable CPUs: {reason}")
    if "try fewer workers" in reason or ("try " in reason and "or fewer workers" in reason):
        key = curve_key(t.config)
        fewer = [o for o in ok if o.config.num_workers < t.config.num_workers and on_curve(o.config, key)]
        if fewer and all(_sps(o) < _sps(t) * (1.0 - noise_band(tol, o, t)) for o in fewer):
            measured = ", ".join(f"{o.config.num_workers}: {_sps(o):.0f}" for o in fewer)
            problems.append(f"'try fewer workers' when fewer measured slower ({measured} vs {_sps(t):.0f}): {reason}")
    return problems


BOUNDS = re.compile(r"\b(epoch|transport|memory|CPU|consumer|main-process|I/O|loader)-bound\b")


def _same_bound(row: TrialResult, why: str) -> list[str]:
    """The recommendation's Why names what bounds it as its row does (a run had ★ 'epoch-bound', Why 'I/O-bound')."""
    said, first = BOUNDS.search(row.reason), BOUNDS.search(why)
    if said is None or first is None or said.group(1) == first.group(1):
        return []
    return [f"the row says {said.group(0)}, the Why {first.group(0)}: {row.reason} | {why}"]


def _stage_citation(result: SweepResult, row: TrialResult, why: str) -> list[str]:
    """A stage cited as where the CPU goes is the result's own stages' largest by CPU, at the share they hold (to the
    rounding of a percent), dominating it, and cited only for a recommendation its row calls CPU-bound."""
    problems = []
    rows = result.stages.rows if result.stages is not None else ()
    for name, share in CITED.findall(why):
        cited = next((r for r in rows if r.stage.name == name), None)
        if cited is None or cited.cpu_share is None:
            problems.append(f"cites {name!r}, which the result's stages do not measure: {why}")
            continue
        if abs(cited.cpu_share * 100 - float(share)) > 0.51 or cited.cpu_share < DOMINATES:
            problems.append(f"cites {name!r} at {share}% when the stages say {cited.cpu_share:.1%}: {why}")
        if any((r.cpu_share or 0.0) > cited.cpu_share for r in rows if r.stage.kind != "unattributed"):
            problems.append(f"cites {name!r}, not the largest stage by CPU: {why}")
        if not row.reason.startswith("CPU-bound"):
            problems.append(f"cites where the CPU goes when the row says {row.reason!r}")
    return problems


def _comparisons(reason: str) -> list[str]:
    problems = [f"'are slower' with {a} ≥ {b}" for a, b in ARE_SLOWER.findall(reason) if int(a) >= int(b)]
    for a, b, band in NO_SPEED.findall(reason):  # the slower within the band below the faster (band.py's rule)
        slower, faster = sorted((int(a), int(b)))
        if slower + 1 < faster * (1.0 - float(band) / 100.0):
            problems.append(f"'no speed' when {faster} beats {slower} by more than {band}%")
    return problems


def _restarts(reason: str, ok: list[TrialResult], transport: bool) -> list[str]:
    """'each epoch restarts N workers in X s, Y% of its time' only as a measured trial of N workers without
    persistent workers reads (its restart, and that restart against its epoch at its rate); and the transfer named
    as the bound only where a transport ceiling was measured."""
    problems = []
    for n, said, share in RESTARTS.findall(reason):
        plain = [t for t in ok if t.config.num_workers == int(n) and not t.config.persistent_workers]
        if not any(_reads(t, float(said), float(share)) for t in plain):
            problems.append(f"'restarts {n} workers in {said} s, {share}%' matches no measured trial: {reason}")
    if "transport-bound" in reason and not transport:
        problems.append(f"'transport-bound' with no transport ceiling measured: {reason}")
    return problems


def _reads(t: TrialResult, restart_s: float, share_pct: float) -> bool:
    if t.epoch_restart_s is None or not t.epoch_batches or not t.batches_per_s:
        return False
    share = min(1.0, t.epoch_restart_s * t.batches_per_s / t.epoch_batches) * 100.0
    return abs(t.epoch_restart_s - restart_s) <= max(0.006, 0.05 * restart_s) and abs(share - share_pct) <= 1.0


def _knee(result: SweepResult, curve: list[TrialResult], tol: float) -> list[str]:
    knee = result.knee
    if knee is None or knee.num_workers is None or not curve:
        return []
    peak = max(curve, key=_sps)
    at = [t for t in curve if t.config.num_workers == knee.num_workers]
    if not at:
        return [f"the knee at {knee.num_workers} workers was not measured on the recommended curve"]
    k = at[0]
    if knee.num_workers == 0 and _sps(k) < _sps(peak) * (1.0 - noise_band(tol, k, peak)):
        return [f"knee at 0 workers ({_sps(k):.0f}) while workers add more than the band ({_sps(peak):.0f})"]
    return []


def _slower_again(text: str, curve: list[TrialResult]) -> list[str]:
    problems = []
    top = max((_sps(t) for t in curve), default=0.0)
    for n, sign, _ in SLOWER_AGAIN.findall(text):
        at = [t for t in curve if t.config.num_workers == int(n)]
        if sign != "−" or not at or _sps(at[0]) >= top:
            problems.append(f"'slower again at {n} workers' when {n} workers measured {_sps(at[0]) if at else '–'}")
    return problems


def _sps(t: TrialResult) -> float:
    return float(t.samples_per_s or 0.0)
