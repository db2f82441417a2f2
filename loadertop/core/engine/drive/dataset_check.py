"""The dataset check before the sweep, through the runner, and what the sweep says about the dataset's build.

The runner builds the user's dataset once and forks the check, the ceiling and every trial from it (trial/shared.py).
When that build leaves threads, open files or child processes behind, the runner is not forked from: a fresh runner
is started and each trial builds its own, as `--rebuild-dataset` asks for. A dataset that cannot be loaded, or
whose first batch fails, is bad input: a UsageError with one line.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from loadertop.core.datasets.fixes import FIRST_BATCH_FAILS
from loadertop.core.engine.drive.runner_link import RunnerProcess, log_tail
from loadertop.core.model.config import DataError, Settings, UsageError
from loadertop.core.model.protocol import Checked, CheckRequest

# A slow factory (an ImageFolder scanning ImageNet's 1.28M files takes about a minute) is not a hung one.
DATASET_TIMEOUT = 600.0


@dataclass(frozen=True)
class DatasetCheck:
    runner: RunnerProcess  # the runner to go on with (a fresh one when the first could not be forked from)
    checked: Checked
    shared: bool  # every trial is forked from the runner's one build
    build: str  # what was built and how long it took, for the sweep's notice and machine.json


def check_dataset(
    runner: RunnerProcess,
    restart: Callable[[], RunnerProcess],
    settings: Settings,
    methods: tuple[str, ...],
    cancelled: threading.Event,
) -> DatasetCheck:
    """Check the dataset (building it once in the runner unless --rebuild-dataset); UsageError when it is bad."""
    # With ranks or nodes each rank builds its own, as in DDP: a dataset may read its rank and world when built.
    share = not settings.rebuild_dataset and settings.ranks == 1 and settings.nodes == 1
    message = _ask(runner, CheckRequest(settings, methods, share), cancelled)
    unsafe = message.unsafe if message.ok else ""
    if unsafe:
        runner, share = restart(), False
        try:
            message = _ask(runner, CheckRequest(settings, methods, False), cancelled)
        except BaseException:
            runner.close()  # the driver closes the runner it gave, not this one
            raise
        if not message.ok:
            runner.close()
    if not message.ok:
        error = message.error or "the dataset could not be loaded"
        raise (DataError if error.startswith(FIRST_BATCH_FAILS) else UsageError)(error)
    return DatasetCheck(runner, message, share, build_line(message, share, unsafe, settings.rebuild_dataset))


def _ask(runner: RunnerProcess, request: CheckRequest, cancelled: threading.Event) -> Checked:
    runner.send(request)
    try:
        message = runner.next(DATASET_TIMEOUT, "load the dataset", cancelled)
    except RuntimeError as exc:
        if runner.proc.poll() is None:
            raise
        # The user's factory took the runner down with it (a crash in native code, os._exit): bad input.
        raise UsageError(f"loading the dataset killed the runner ({log_tail(runner.log_path, 1)})") from exc
    if not isinstance(message, Checked):
        raise RuntimeError(f"runner said {message!r} instead of checked")
    return message


def build_line(message: Checked, shared: bool, unsafe: str, asked: bool) -> str:
    """What was built, how long it took, and who uses it."""
    seconds = f"{message.built_s:.1f} s" if message.built_s is not None else "an unknown time"
    what = f"dataset {message.dataset or ''}".strip()
    if shared:
        size = f", about {message.built_mb:.0f} MB" if message.built_mb is not None and message.built_mb >= 1 else ""
        return (f"{what} built once in {seconds}{size}; the check, the ceiling and every trial are forked from it "
                "(--rebuild-dataset: a build per trial)")  # fmt: skip
    if unsafe:
        return (f"{what} built in {seconds}; its build left {unsafe} behind, which a fork does not carry over, so "
                "each trial builds its own")  # fmt: skip
    why = "--rebuild-dataset" if asked else "each rank builds its own, as in DDP"
    return f"{what} built in {seconds}; each trial builds its own ({why})"
