"""The runner: exec'd once per sweep, imports torch, forks one fresh process per trial.

    python -m loadertop.core.runner

Requests come as JSON lines on stdin; events go out as JSON lines on the original stdout. Anything
else written to fd 1 or 2 (worker warnings, the user's prints) lands in the run folder's log, because
the driver points stderr there and we point fd 1 at it too. Each trial process leads its own process
group, so the driver can freeze, thaw or kill a trial and all its DataLoader workers with one signal.
The runner exits, killing the running trial, when stdin closes (the driver is gone).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import time
import traceback
from typing import Any

from loadertop.core.config import Settings, TrialConfig

_EVENTS_FD = -1


def emit(message: dict[str, Any]) -> None:
    # One write per line, under PIPE_BUF: lines from the runner and its trial never interleave.
    os.write(_EVENTS_FD, (json.dumps(message) + "\n").encode())


def main() -> int:
    global _EVENTS_FD
    _EVENTS_FD = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver decides when we stop
    _prctl(PR_SET_CHILD_SUBREAPER, 1)  # orphaned DataLoader workers are reparented to us, and reaped

    import torch  # noqa: F401  (paid once here, inherited by every trial)

    emit({"type": "ready", "pid": os.getpid()})
    child: int | None = None
    for line in sys.stdin:
        request = json.loads(line)
        if request["type"] == "check":
            _check(request)
            continue
        child = os.fork()
        if child == 0:
            os.setpgid(0, 0)
            code = _trial_main(request)
            os._exit(code)
        emit({"type": "forked", "index": request["index"], "pid": child})
        status = _wait_child(child)
        child = None
        emit({"type": "exited", "index": request["index"], **status})
    return 0


def _wait_child(pid: int) -> dict[str, Any]:
    """Wait for the trial, then kill what is left of its group and reap it (we are the subreaper).

    If our stdin closes meanwhile, the driver died: kill the trial's group and leave."""
    while True:
        status = _reap(pid)
        if status is not None:
            _killpg(pid)  # stragglers: workers of a trial that crashed before it could stop them
            deadline = time.monotonic() + 1.0
            while _has_children() and time.monotonic() < deadline:
                _reap(pid)
                time.sleep(0.02)
            return status
        readable, _, _ = select.select([sys.stdin], [], [], 0.2)
        if readable and not sys.stdin.buffer.peek(1):
            _killpg(pid)
            raise SystemExit(0)


def _reap(trial_pid: int) -> dict[str, Any] | None:
    """Reap every exited child (orphaned workers come to us); return the trial's status if it exited."""
    found = None
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return found
        if pid == 0:
            return found
        if pid == trial_pid:
            if os.WIFSIGNALED(status):
                found = {"signal": os.WTERMSIG(status), "returncode": None}
            else:
                found = {"signal": None, "returncode": os.WEXITSTATUS(status)}


def _has_children() -> bool:
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return True


def _killpg(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def _prctl(option: int, value: int) -> None:
    """Linux process controls; a no-op elsewhere (the driver's own cleanup still applies)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def _check(request: dict[str, Any]) -> None:
    """Validate the dataset spec before the sweep (exit 2 on a bad one) without touching the driver."""
    from loadertop.core.spec import SpecError, load_dataset

    try:
        dataset, _ = load_dataset(request["dataset"], dict(request.get("dataset_args", {})))
        if "spawn" in request.get("start_methods", []) or "forkserver" in request.get("start_methods", []):
            import pickle

            try:
                pickle.dumps(dataset)
            except Exception as exc:
                raise SpecError(
                    f"the dataset cannot be pickled for spawn/forkserver workers: {type(exc).__name__}: {exc}"
                ) from exc
        emit({"type": "checked", "ok": True, "dataset": type(dataset).__name__, "length": _len(dataset)})
    except SpecError as exc:
        traceback.print_exc()
        emit({"type": "checked", "ok": False, "error": str(exc)})


def _len(dataset: Any) -> int | None:
    try:
        return len(dataset)
    except TypeError:
        return None


def _trial_main(request: dict[str, Any]) -> int:
    """The trial process: build the dataset and DataLoader, measure, report. Never returns normally."""
    index = request["index"]

    def send(message: dict[str, Any]) -> None:
        emit({"index": index, "pid": os.getpid(), **message})

    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the runner died: so does the trial
    try:
        settings = Settings.from_dict(request["settings"])
        config = TrialConfig.from_dict(request["config"])
        print(f"--- trial {index}: {config.label()}", file=sys.stderr, flush=True)
        loader = _build_loader(settings, config)
        from loadertop.core.measure import Consumer, measure

        measure(loader, config, settings, Consumer(settings.step_ms, config.pin_memory), send)
        return 0
    except BaseException as exc:
        traceback.print_exc()
        send({"type": "failed", "error": f"{type(exc).__name__}: {exc}".strip()})
        return 1
    finally:
        sys.stderr.flush()


def _build_loader(settings: Settings, config: TrialConfig) -> Any:
    import multiprocessing

    from torch.utils.data import DataLoader

    from loadertop.core.spec import load_dataset

    dataset, extra = load_dataset(settings.dataset, dict(settings.dataset_args))
    kwargs: dict[str, Any] = dict(extra)
    if config.num_workers > 0:
        kwargs["prefetch_factor"] = config.prefetch_factor
        kwargs["persistent_workers"] = config.persistent_workers
        kwargs["multiprocessing_context"] = multiprocessing.get_context(config.start_method)
    return DataLoader(
        dataset,
        batch_size=config.batch_size,
        num_workers=config.num_workers,
        pin_memory=config.pin_memory,
        **kwargs,
    )


if __name__ == "__main__":
    raise SystemExit(main())
