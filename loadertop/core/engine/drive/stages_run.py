"""`loadertop stages` and `loadertop.stages(...)`: where a sample's time goes, measured in a child process that
imports torch and the user's code (trial/stages_main.py), read back through the stages protocol and judged here.

The child runs in its own session (no terminal signal reaches it, nor its DataLoader workers), under a deadline;
whatever way this call ends (its answer, the deadline, Ctrl-C), its process group is killed: nothing outlives it.
A spec that cannot be built and data that fails are UsageErrors (one line, exit 2); anything else is a bug.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from loadertop.core.engine.drive.api import dataset_spec
from loadertop.core.engine.drive.runner_link import log_tail, runner_tmp
from loadertop.core.engine.drive.settings import build_settings
from loadertop.core.engine.verdict.stage_verdict import judge_stages
from loadertop.core.machine.facts import mem_available_mb, usable_cpus
from loadertop.core.model.config import DataError, UsageError
from loadertop.core.model.stages import StagesMeasurement, StagesReport
from loadertop.core.model.stages_protocol import (
    ProtocolError,
    StagesFailed,
    StagesReady,
    StagesRequest,
    decode,
    encode,
)

CHILD_ARGV = (sys.executable, "-m", "loadertop.core.trial.stages_main")
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


def child_env(tmp: Path) -> dict[str, str]:
    """The caller's environment, with what it can import on the child's path (as the runner's)."""
    path = os.pathsep.join(p for p in [*sys.path, os.environ.get("PYTHONPATH", "")] if p)
    return {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path, "TMPDIR": str(tmp)}


def run_child(request: StagesRequest, timeout: float) -> StagesMeasurement:
    """Start the child, hand it the request, wait for its answer (at most `timeout` seconds), kill what is left."""
    tmp = runner_tmp()
    log_path = tmp / "stages.log"
    try:
        with open(log_path, "wb") as log:
            child = subprocess.Popen(list(CHILD_ARGV), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                     start_new_session=True, env=child_env(tmp))  # fmt: skip
            try:
                out, _ = child.communicate(encode(request).encode(), timeout=timeout)
            except subprocess.TimeoutExpired:
                raise UsageError(f"the dataset's stages took more than {timeout:.0f} s (--timeout S allows more): "
                                 f"{log_tail(log_path) or 'no output'}") from None  # fmt: skip
            finally:
                kill_group(child)
        return read_answer(out, child.returncode, log_path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def kill_group(child: subprocess.Popen[bytes]) -> None:
    """The child and everything in its session (its DataLoader workers), then the child reaped."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()


def read_answer(out: bytes, returncode: int | None, log_path: Path) -> StagesMeasurement:
    """The measurement from the child's lines; UsageError or DataError for the user's input, RuntimeError else."""
    lines = [line for line in out.splitlines() if line.strip()]
    try:
        messages = [decode(line) for line in lines]
    except ProtocolError as exc:
        raise RuntimeError(f"the stages child said something loadertop cannot read: {exc}") from None
    if not messages or not isinstance(messages[0], StagesReady):
        tail = log_tail(log_path) or "no output"
        raise RuntimeError(f"the stages child exited (code {returncode}) before it answered: {tail}")
    answer = messages[-1]
    if isinstance(answer, StagesMeasurement):
        return answer
    if isinstance(answer, StagesFailed) and answer.kind == "spec":
        raise UsageError(answer.error)
    if isinstance(answer, StagesFailed) and answer.kind == "data":
        raise DataError(answer.error, answer.error)
    if isinstance(answer, StagesFailed):
        raise RuntimeError(f"the stages child failed: {answer.error} ({log_tail(log_path)})")
    tail = log_tail(log_path) or "no output"
    raise RuntimeError(f"the stages child exited (code {returncode}) without its measurement: {tail}")
