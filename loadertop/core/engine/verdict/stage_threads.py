"""The ceiling thread workers set (a torchdata.nodes ParallelMapper with method="thread"): one process, one GIL.

Python code holds the GIL while it runs, so the threads run the sample's Python code one at a time; a C function
(torch's ops, Pillow's decode and resize, NumPy's, pyarrow's) may release it and run beside them, or may not: the
profile cannot tell which did. So the ceiling is a range, from the profile's share of CPU time holding the GIL
(Python code, and C functions of libraries not known to release it: RELEASING in trial/stage_profile.py):
- every C call of those libraries releasing it: 1 ÷ (the held CPU seconds per sample), no more than the CPUs allow;
- none releasing it: 1 ÷ (the whole pipeline's CPU seconds per sample), one CPU's worth.
"""

from __future__ import annotations

from collections.abc import Sequence

from loadertop.core.engine.verdict.stage_ceilings import cpu_ceiling, lowest, pipeline_cpu
from loadertop.core.engine.wording import num, pct, rate
from loadertop.core.model.stages import Ceiling, Stage

NAME = "thread workers (one process, one GIL)"


def thread_ceiling(stages: Sequence[Stage], cpus: int, gil_share: float | None) -> tuple[Ceiling, ...]:
    """The thread workers' ceiling (empty when the sample was not profiled)."""
    cpu_s = pipeline_cpu(stages)
    if gil_share is None or cpu_s <= 0:
        return ()
    held_s = cpu_s * gil_share
    one_cpu = 1.0 / cpu_s
    released = lowest(cpu_ceiling(cpus, cpu_s), 1.0 / held_s if held_s > 0 else None)
    basis = (
        f"{pct(gil_share)} of the profiled CPU holds the GIL (Python code, C calls not known to release it): 1 ÷ "
        f"{num(held_s * 1000, 3)} CPU ms if every C call releases it; ~{rate(one_cpu)} samples/s, one CPU, if none "
        "does (the profile cannot tell which)"
    )
    return (Ceiling(NAME, released, basis),)
