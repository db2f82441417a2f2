"""The arithmetic of `loadertop stages`: the stages' sum against the 0-worker time (the gap shown as "unattributed"
beyond 10%), each stage's shares, and the ceilings each sets on this machine.

- The pipeline's CPU seconds per sample: every measured stage's CPU, every part (the sample's stages, the worker's
  hand-over, the main process's own work).
- The CPU ceiling: usable CPUs ÷ that. Workers can run in parallel up to the CPUs, the main process included.
- The main process's ceiling: 1 ÷ its seconds per sample (receiving, pin_memory, the copy): one process, in series.
- - Inside a sweep, the sweep's own ceilings beside them (Beside): the consumer (the training step alone on a cached
  batch) and the hand-over from workers (the transport ceiling: a null dataset with this batch's structure, the most
  it reached over the worker counts measured). No stage's cost moves them.
The whole pipeline's ceiling is the lowest of these; "if a stage were free" is the same with that stage's seconds
taken out of whichever it counts in.
An I/O wait is not CPU: a read that waits on a disk is seen in its wall time and hidden by more workers than CPUs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from loadertop.core.engine.wording import num, workers
from loadertop.core.model.results import Ceiling as SweepCeiling
from loadertop.core.model.stages import Ceiling, Stage, StageRow, StagesMeasurement

TOLERANCE = 0.10  # the stages must sum to the 0-worker time within this, or "unattributed" holds the gap
UNATTRIBUTED = "unattributed"
CONSUMER = "the consumer (the training step alone, measured by the sweep)"
TRANSPORT = "the hand-over from workers (the sweep's transport ceiling)"


@dataclass(frozen=True)
class Beside:
    """The sweep's ceilings, measured apart from the stages; None where the sweep measured none (no sweep, a consumer
    that does no work, --no-transport)."""

    consumer: float | None = None
    consumer_basis: str = ""
    transport: float | None = None
    transport_basis: str = ""


NOTHING = Beside()


def beside_of(sweep: Sequence[SweepCeiling], batch_size: int) -> Beside:
    """The consumer's ceiling at `batch_size`, and the most samples/s the hand-over from workers reached at it (over
    the worker counts measured, unpinned: the stages pin nothing)."""
    consumer = next((c for c in sweep if c.kind == "consumer" and c.batch_size == batch_size and c.samples_per_s), None)
    handed = [c for c in sweep if c.kind == "transport" and c.batch_size == batch_size and (c.num_workers or 0) > 0
              and not c.pin_memory and c.samples_per_s]  # fmt: skip
    best = max(handed, key=lambda c: c.samples_per_s or 0.0, default=None)
    return Beside(
        consumer.samples_per_s if consumer else None,
        f"alone on a cached batch of {batch_size}" if consumer else "",
        best.samples_per_s if best else None,
        f"a null dataset with this batch's structure: its best, at {workers(best.num_workers or 0)}, of "
        f"{len(handed)} worker count{'' if len(handed) == 1 else 's'} measured"
        if best
        else "",
    )


def sample_sum(stages: Sequence[Stage]) -> float:
    """The wall seconds of the stages inside the 0-worker time ("unattributed" left out)."""
    return sum(s.wall_s or 0.0 for s in stages if s.part == "sample" and s.kind != "unattributed")


def gap_of(measurement: StagesMeasurement) -> float:
    """(0-worker time - the stages' sum) / the 0-worker time: positive when the stages miss time."""
    reference = measurement.loader_wall_s
    return (reference - sample_sum(measurement.stages)) / reference if reference > 0 else 0.0


def with_unattributed(measurement: StagesMeasurement) -> tuple[Stage, ...]:
    """The measured stages, with an "unattributed" stage after the sample's own when they miss more than
    TOLERANCE of the 0-worker time."""
    stages = measurement.stages
    missing = measurement.loader_wall_s - sample_sum(stages)
    if gap_of(measurement) <= TOLERANCE:
        return stages
    cpu = max(0.0, measurement.loader_cpu_s - sum(s.cpu_s or 0.0 for s in stages if s.part == "sample"))
    gap = Stage(UNATTRIBUTED, "unattributed", "sample", missing, cpu,
                "the 0-worker time the stages do not account for (the loader's own work, noise)")  # fmt: skip
    last_sample = max((i for i, s in enumerate(stages) if s.part == "sample"), default=-1)
    return (*stages[: last_sample + 1], gap, *stages[last_sample + 1 :])


def pipeline_cpu(stages: Sequence[Stage]) -> float:
    return sum(s.cpu_s or 0.0 for s in stages)


def main_seconds(stages: Sequence[Stage]) -> float:
    return sum(s.wall_s or 0.0 for s in stages if s.part == "main")


def cpu_ceiling(cpus: int, cpu_s: float) -> float | None:
    return cpus / cpu_s if cpu_s > 0 else None


def main_ceiling(main_s: float) -> float | None:
    return 1.0 / main_s if main_s > 0 else None


def lowest(*ceilings: float | None) -> float | None:
    known = [c for c in ceilings if c is not None]
    return min(known) if known else None


def if_free(stage: Stage, stages: Sequence[Stage], cpus: int, beside: Beside = NOTHING) -> float | None:
    """samples/s on `cpus` CPUs were this stage free (its CPU out of the pipeline's, its time out of the main
    process's when it is the main process's), the sweep's ceilings unmoved."""
    cpu = pipeline_cpu(stages) - (stage.cpu_s or 0.0)
    main = main_seconds(stages) - ((stage.wall_s or 0.0) if stage.part == "main" else 0.0)
    return lowest(cpu_ceiling(cpus, cpu), main_ceiling(main), beside.consumer, beside.transport)


def rows(stages: Sequence[Stage], reference_s: float, cpus: int, beside: Beside = NOTHING) -> tuple[StageRow, ...]:
    """Each stage with its share of the 0-worker time (for a handoff or main stage: what it adds to it), its share
    of the pipeline's CPU, and the ceiling were it free (none for "unattributed": no one knows what it is)."""
    total_cpu = pipeline_cpu(stages)
    return tuple(
        StageRow(
            stage=s,
            share=(s.wall_s / reference_s) if s.wall_s is not None and reference_s > 0 else None,
            cpu_share=(s.cpu_s / total_cpu) if s.cpu_s is not None and total_cpu > 0 else None,
            if_free=if_free(s, stages, cpus, beside) if s.cpu_s is not None and s.kind != "unattributed" else None,
        )
        for s in stages
    )


def ceilings(stages: Sequence[Stage], cpus: int, beside: Beside = NOTHING) -> tuple[Ceiling, ...]:
    """The whole pipeline's ceiling, then the CPUs' and the main process's (and the sweep's consumer and transport
    ceilings, where measured) it is the lowest of."""
    cpu_s, main_s = pipeline_cpu(stages), main_seconds(stages)
    by_cpu, by_main = cpu_ceiling(cpus, cpu_s), main_ceiling(main_s)
    cpu_basis = f"{cpus} CPUs ÷ {num(cpu_s * 1000, 2)} CPU ms per sample"
    main_basis = f"1 ÷ {num(main_s * 1000, 3)} ms of its own work per sample"
    # Only the ceilings measured: a graph hands nothing to a main process of loadertop's timing (no main stage)
    below = [Ceiling(name, value, basis) for name, value, basis in (
        ("the CPUs (workers and main process)", by_cpu, cpu_basis), ("the main process", by_main, main_basis),
        (CONSUMER, beside.consumer, beside.consumer_basis), (TRANSPORT, beside.transport, beside.transport_basis),
    ) if value is not None]  # fmt: skip
    whole = lowest(*(c.samples_per_s for c in below))
    named = {1: "the one below", 2: "the lower of the two below"}
    among = named.get(len(below), f"the lowest of the next {len(below)}")
    return (Ceiling("the whole pipeline", whole, among), *below)


def replayed(measurement: StagesMeasurement, stages: Sequence[Stage], cpus: int, beside: Beside = NOTHING) -> tuple[
    Ceiling, ...
]:  # fmt: skip
    """The "what if" measured (model/stages.py Replay): the ceiling with the largest stage's outputs replayed, from
    the 0-worker loader's CPU per sample without it plus the hand-over's and the main process's, beside the one
    predicted were the stage free. Empty when nothing was replayed."""
    replay = measurement.replay
    stage = next((s for s in stages if replay is not None and s.name == replay.stage), None)
    if replay is None or stage is None:
        return ()
    past = sum(s.cpu_s or 0.0 for s in stages if s.part != "sample")  # the hand-over's, the main process's
    cpu_s = replay.cpu_s + past
    measured = lowest(cpu_ceiling(cpus, cpu_s), main_ceiling(main_seconds(stages)), beside.consumer, beside.transport)
    predicted = if_free(stage, stages, cpus, beside)
    basis = (f"{cpus} CPUs ÷ {num(cpu_s * 1000, 2)} CPU ms per sample, its outputs computed once and replayed over "
             f"{replay.samples} samples; predicted were it free: ~{num(predicted)}")  # fmt: skip
    return (Ceiling(f"were {replay.stage} cached (replayed for real)", measured, basis),)
