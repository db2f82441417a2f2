"""`loadertop stages`' conclusion, drawn once: the measured stages (with "unattributed" where they miss the 0-worker
time), their rows, the ceilings on this machine and the advice, as the one StagesReport every face renders."""

from __future__ import annotations

from loadertop.core.engine.verdict import stage_ceilings as arithmetic
from loadertop.core.engine.verdict.stage_advice import Facts, advise
from loadertop.core.engine.verdict.stage_ceilings import NOTHING, Beside
from loadertop.core.engine.verdict.stage_threads import thread_ceiling
from loadertop.core.model.stages import STAGES_VERSION, StagesMeasurement, StagesReport


def judge_stages(
    measurement: StagesMeasurement, cpus: int, mem_available_mb: float | None, beside: Beside = NOTHING
) -> StagesReport:
    """The report of a measurement on a machine of `cpus` usable CPUs and `mem_available_mb` of memory available;
    inside a sweep, with the sweep's consumer and transport ceilings `beside` the stages' own."""
    stages = arithmetic.with_unattributed(measurement)
    rows = arithmetic.rows(stages, measurement.loader_wall_s, cpus, beside)
    return StagesReport(
        version=STAGES_VERSION,
        measurement=measurement,
        rows=rows,
        stages_wall_s=arithmetic.sample_sum(stages),
        reference_wall_s=measurement.loader_wall_s,
        gap=arithmetic.gap_of(measurement),
        cpus=cpus,
        pipeline_cpu_s=arithmetic.pipeline_cpu(stages),
        ceilings=(
            *arithmetic.ceilings(stages, cpus, beside),
            *arithmetic.replayed(measurement, stages, cpus, beside),
            *thread_ceiling(stages, cpus, measurement.gil_share),
        ),
        advice=advise(Facts(measurement, stages, rows, cpus, mem_available_mb, beside)),
        mem_available_mb=mem_available_mb,
    )
