"""`loadertop stages` and `loadertop.stages(...)`: where a sample's time goes, measured in a child process that
imports torch and the user's code (trial/stages_main.py), read back through the stages protocol and judged here.

The child runs in its own session (no terminal signal reaches it, nor its DataLoader workers), under a deadline;
whatever way this call ends (its answer, the deadline, Ctrl-C), its process group is killed: nothing outlives it.
A spec that cannot be built and data that fails are UsageErrors (one line, exit 2); anything else is a bug.
"""

from __future__ import annotations

from loadertop.core.engine.drive.api import dataset_spec
from loadertop.core.engine.drive.settings import build_settings
from loadertop.core.engine.drive.stages_child import run_child
from loadertop.core.engine.verdict.stage_verdict import judge_stages
from loadertop.core.machine.facts import mem_available_mb, usable_cpus
from loadertop.core.model.config import UsageError
from loadertop.core.model.stages import StagesReport
from loadertop.core.model.stages_protocol import StagesRequest

START_S = 240.0  # importing torch and building the user's dataset on a busy machine, before the measuring


def stages(
    dataset: object = None,
    *,
    dataset_args: object = None,
    seconds: float = 5.0,
    samples: int = 300,
    batch_size: int | str = 32,
    timeout: float | None = None,
) -> StagesReport:
    """Measure where a sample of `dataset` spends its time, in one process with 0 workers, and what each stage
    costs this machine.

    `dataset` is what `loadertop.sweep` takes (a spec string, a module-level factory, a picklable Dataset or a
    DataLoader); `dataset_args` the factory's keyword arguments ({"root": "/data"} or ["root=/data"]). The stages are
    timed for about `seconds`, or until each way of timing them has seen `samples` samples; `batch_size` is the
    batch the collate and the transfer are measured with. The child is killed after `timeout` seconds (default:
    START_S + 4 × seconds). Bad input raises UsageError (DataError when the data itself fails)."""
    if not (isinstance(seconds, int | float) and seconds > 0):
        raise UsageError(f"--seconds {seconds!r}: must be more than 0")
    if not (isinstance(samples, int) and samples >= 1):
        raise UsageError(f"--samples {samples!r}: must be a whole number of at least 1")
    spec, temporary = dataset_spec(dataset)
    try:
        settings = build_settings({"dataset": spec, "dataset_args": dataset_args, "batch_size": batch_size})
        if len(settings.batch_sizes) != 1:
            raise UsageError(f"--batch-size {batch_size}: stages measures one batch size")
        request = StagesRequest(settings.dataset, dict(settings.dataset_args), float(seconds), samples,
                                settings.batch_sizes[0])  # fmt: skip
        measurement = run_child(request, timeout if timeout is not None else START_S + 4 * seconds)
    finally:
        if temporary is not None:
            temporary.unlink(missing_ok=True)
    return judge_stages(measurement, usable_cpus(), mem_available_mb())
