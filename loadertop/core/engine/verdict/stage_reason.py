"""The recommendation's reason citing the stages: when what bounds the recommended configuration is the CPUs and one
stage of the pipeline holds at least CITE_SHARE of its CPU time per sample, the reason says which, beside the
CPU-bound clause: "CPU-bound: workers use 1.9 of 2 usable CPUs from 2 workers on; where the CPU goes: decode is 61%
of the CPU time per sample (the stages)". The share is the stages report's own figure (every part counted: the
sample's stages, the hand-over, the main process's work), so the sentence holds against the report beside it."""

from __future__ import annotations

import re

from loadertop.core.engine.verdict.bound import CPU_BOUND, bound_of
from loadertop.core.engine.wording import pct
from loadertop.core.model.results import MachineInfo, TrialResult
from loadertop.core.model.stages import StageRow, StagesReport

CITE_SHARE = 0.5  # a stage that holds this share of the CPU time per sample or more dominates it
CPU_CLAUSE = re.compile(r"^CPU-bound\b")  # the clause that names the CPUs as the bound


def dominant_stage(stages: StagesReport) -> StageRow | None:
    """The stage with the largest share of the pipeline's CPU time, when it holds at least CITE_SHARE of it."""
    known = [r for r in stages.rows if r.cpu_share is not None and r.stage.kind != "unattributed"]
    top = max(known, key=lambda r: r.cpu_share or 0.0, default=None)
    return top if top is not None and (top.cpu_share or 0.0) >= CITE_SHARE else None


def stage_clause(stages: StagesReport | None) -> str:
    top = dominant_stage(stages) if stages is not None else None
    if top is None:
        return ""
    return f"where the CPU goes: {top.stage.name} is {pct(top.cpu_share)} of the CPU time per sample (the stages)"


def cite_stages(reason: str, trial: TrialResult, machine: MachineInfo, stages: StagesReport | None) -> str:
    """`reason` with the stage clause after its CPU-bound clause, when the trial is CPU-bound (its own CPUs, not other
    processes') and a stage dominates; else `reason` as it is."""
    clause = stage_clause(stages)
    b = bound_of(trial, machine)
    if not clause or b.kind != CPU_BOUND or b.contended:
        return reason
    parts = reason.split("; ")
    at = next((i for i, part in enumerate(parts) if CPU_CLAUSE.match(part)), None)
    if at is None:
        return reason
    return "; ".join([*parts[: at + 1], clause, *parts[at + 1 :]])
