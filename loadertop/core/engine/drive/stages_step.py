"""The sweep's stages step: where a sample's time goes, measured on the sweep's own dataset once its trials are over
(never beside one: it takes the CPUs), when stage_plan.py says it is cheap or the user asked (--stages).

The child is `loadertop stages`' own (drive/stages_run.py), started in its own session; the driver hears its pid so
that a cancel (Ctrl-C, `q`) kills it with its workers, as it kills a trial. Whatever goes wrong with it (a dataset
it cannot measure, its deadline, a bug) costs the sweep nothing: no stages, and a note that says why.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from loadertop.core.engine.drive.runner_start import template_pid
from loadertop.core.engine.drive.stages_child import StagesCancelled, run_child
from loadertop.core.engine.verdict.stage_ceilings import beside_of
from loadertop.core.engine.verdict.stage_plan import StagesPlan, fastest_batch, plan_stages
from loadertop.core.engine.verdict.stage_verdict import judge_stages
from loadertop.core.engine.wording import seconds
from loadertop.core.machine.facts import mem_available_mb
from loadertop.core.model.config import DataError, Settings, UsageError
from loadertop.core.model.results import Ceiling, MachineInfo, TrialResult
from loadertop.core.model.stages import StagesReport
from loadertop.core.model.stages_protocol import StagesRequest


@dataclass(frozen=True)
class StagesOutcome:
    report: StagesReport | None
    note: str  # "measured in 4.2 s", or why not


def plan_for(settings: Settings, trials: Sequence[TrialResult], sweep_s: float, machine: MachineInfo) -> StagesPlan:
    batch = fastest_batch(trials, settings.batch_sizes[0])
    warm = template_pid() is not None  # the sweep's runner came from it: the child can too
    return plan_stages(settings.stages, trials, sweep_s, machine.dataset_build_s, batch, warm)


def measure_stages(
    settings: Settings,
    plan: StagesPlan,
    machine: MachineInfo,
    ceilings: Sequence[Ceiling],
    cancel: threading.Event,
    started: Callable[[int], None],
    log: Path,
) -> StagesOutcome:
    """The stages of the sweep's dataset, judged with the sweep's consumer and transport ceilings beside them."""
    request = StagesRequest(settings.dataset, dict(settings.dataset_args), plan.seconds, plan.samples,
                            plan.batch_size)  # fmt: skip
    begun = time.monotonic()
    try:
        measurement = run_child(request, plan.timeout_s, cancel, started, " (--no-stages skips them)", warm=True)
    except StagesCancelled:
        return StagesOutcome(None, "not measured: the sweep was stopped")
    except (UsageError, DataError) as exc:
        return StagesOutcome(None, f"not measured: {exc}")
    except RuntimeError as exc:  # loadertop's own fault: the traceback goes to the run's log
        with open(log, "a") as out:
            traceback.print_exc(file=out)
        return StagesOutcome(None, f"not measured: {exc}")
    beside = beside_of(ceilings, plan.batch_size)
    report = judge_stages(measurement, machine.usable_cpus, mem_available_mb(), beside)
    return StagesOutcome(report, f"measured in {seconds(time.monotonic() - begun)}")
