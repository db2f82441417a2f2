"""The runner: exec'd once per sweep, imports torch, forks one fresh process per trial.

    python -m loadertop.core.trial.runner

Requests come on stdin and messages go out on the original stdout, one JSON line each (model/protocol.py). Anything
else written to fd 1 or 2 (worker warnings, the user's prints) lands in the run folder's log, because
the driver points stderr there and we point fd 1 at it too. Each trial process leads its own process
group, so the driver can freeze, thaw or kill a trial and all its DataLoader workers with one signal.
The runner exits, killing the running trial, when stdin closes (the driver is gone).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import io
import os
import select
import signal
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any, NoReturn

from loadertop.core.model.jobs import pid_alive
from loadertop.core.model.protocol import (
    PROTOCOL_VERSION,
    CeilingRequest,
    Checked,
    CheckRequest,
    Exited,
    Failed,
    Forked,
    ProtocolError,
    Ready,
    Reply,
    TrialRequest,
    decode,
    encode,
)
from loadertop.core.trial.parked import Parked, Parking, drop
from loadertop.core.trial.procs import become_subreaper, die_with_parent, has_children, prefer_oom_kill

_EVENTS_FD = -1
ExitStatus = tuple[int | None, int | None]  # (the signal that killed it, or None; its exit code, or None)
_PARKING = Parking()  # trials waiting with their workers for another run of their configuration (trial/parked.py)


def emit(message: Reply) -> None:
    # One write per line, under PIPE_BUF: lines from the runner and its trial never interleave.
    os.write(_EVENTS_FD, encode(message).encode())


def main() -> int:
    global _EVENTS_FD
    _EVENTS_FD = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver decides when we stop
    become_subreaper()  # orphaned DataLoader workers are reparented to us, and reaped
    prefer_oom_kill()  # inherited by trials and workers: if the kernel must kill, it kills us, not a training job

    import torch  # noqa: F401  (paid once here, inherited by every trial)

    # Importing torch leaves a large debt of uncollected objects; forked with it, a worker soon runs a full
    # collection that touches, and so copies, every page of the heap it inherited: 51 MB of USS per worker here
    # instead of 14. That copy is our import's, not the user's dataset's, so collect once before any fork.
    gc.collect()

    emit(Ready(PROTOCOL_VERSION, os.getpid()))
    try:
        for line in sys.stdin:
            request = decode(line)
            if not (isinstance(request, TrialRequest) and request.park):
                _PARKING.drop_all()  # the repeats are over: their workers' memory goes back
            if isinstance(request, CheckRequest):
                _check(request)
            elif isinstance(request, TrialRequest) and request.park:
                _run_parked(request)
            elif isinstance(request, TrialRequest | CeilingRequest):
                _run_forked(request)
            else:
                raise ProtocolError(f"the runner takes requests, not {type(request).__name__}")
    finally:
        _PARKING.drop_all()
    return 0


def _run_parked(request: TrialRequest) -> None:
    """A run on the workers parked by the last run of this configuration, or a fresh trial that parks after."""
    parked = _PARKING.take(request.config)
    if parked is not None and not pid_alive(parked.pid):  # it died while parked (the OOM killer, a signal)
        drop(parked)
        parked = None
    if parked is not None:
        # Forked first: a warm trial answers at once, and the driver must know whose messages they are
        emit(Forked(request.index, parked.pid))
        with contextlib.suppress(OSError):  # dying just now: _wait_child reports its exit
            os.write(parked.go, b"again\n")
    else:
        go_r, go_w = os.pipe()
        ready_r, ready_w = os.pipe()
        trial = functools.partial(_trial_main, request, (go_r, ready_w))
        child, gate = _fork_behind_gate(trial, child_closes=(go_w, ready_r))
        os.close(go_r)
        os.close(ready_w)
        with contextlib.suppress(OSError):
            os.setpgid(child, child)
        parked = Parked(child, go_w, ready_r)
        emit(Forked(request.index, parked.pid))
        os.close(gate)
    status = _wait_child(parked.pid, parked.ready)
    if status is None:  # it measured and waits for the next run
        _PARKING.keep(request.config, parked)
        emit(Exited(request.index, None, None, parked=True))
        return
    drop(parked)
    emit(Exited(request.index, *status))


def _run_forked(request: TrialRequest | CeilingRequest) -> None:
    """A trial (or the ceiling) in a forked process that leads its own process group; returns once it exited."""
    if isinstance(request, CeilingRequest):
        child, gate = _fork_behind_gate(functools.partial(_ceiling_main, request))
    else:
        child, gate = _fork_behind_gate(functools.partial(_trial_main, request))
    with contextlib.suppress(OSError):  # also here, so the group exists before the driver may signal it
        os.setpgid(child, child)
    emit(Forked(request.index, child))
    os.close(gate)
    status = _wait_child(child)
    assert status is not None
    emit(Exited(request.index, *status))


def _fork_behind_gate(trial: Callable[[], int], child_closes: tuple[int, ...] = ()) -> tuple[int, int]:
    """Fork `trial` (the child first closes `child_closes`, the runner's ends of its pipes); returns its pid and the
    gate to close once Forked is sent, which the trial waits for (_be_trial)."""
    runner = os.getpid()
    gate_r, gate_w = os.pipe()
    child = os.fork()
    if child == 0:
        for fd in (gate_w, *child_closes):
            os.close(fd)
        _be_trial(runner, trial, gate_r)
    os.close(gate_r)
    return child, gate_w


def _be_trial(runner: int, trial: Callable[[], int], gate: int) -> NoReturn:
    """In the forked child: lead its own process group, run `trial`, and exit with its code whatever it raises (an
    exception escaping here would otherwise run the runner's own loop and teardown in the trial's process).
    `trial` starts once the runner closes `gate`, after it sent Forked: the driver learns whose messages they are
    before the trial's first (a runner descheduled right after fork, on a busy machine, would otherwise lose that
    race and the driver receive Started for a trial it has no pid for)."""
    code = 1
    try:
        die_with_parent(runner)  # the runner died: so does the trial (armed before anything else can run)
        os.setpgid(0, 0)
        os.read(gate, 1)  # end of file: Forked is out (or the runner died, and die_with_parent ends this process)
        os.close(gate)
        code = trial()
    finally:
        with contextlib.suppress(BaseException):
            sys.stderr.flush()
        os._exit(code)


def _wait_child(pid: int, ready: int | None = None) -> ExitStatus | None:
    """Wait for the trial, then kill what is left of its group and reap it (we are the subreaper). None: a parking
    trial said on `ready` that it measured and waits, its workers alive.

    If our stdin closes meanwhile, the driver died: kill the trial's group (and the parked ones) and leave."""
    stdin = sys.stdin.buffer
    assert isinstance(stdin, io.BufferedReader)  # the driver's pipe: peek() sees its end without taking a request
    exited = _exit_fd(pid)  # readable the moment the trial exits: no polling delay between trials
    watched: list[Any] = [sys.stdin, *([] if ready is None else [ready]), *([] if exited is None else [exited])]
    try:
        while True:
            status = _reap(pid)
            if status is not None:
                _killpg(pid)  # stragglers: workers of a trial that crashed before it could stop them
                deadline = time.monotonic() + 1.0
                while has_children() and time.monotonic() < deadline:
                    _reap(pid)
                    time.sleep(0.02)
                return status
            readable, _, _ = select.select(watched, [], [], 0.2)
            if ready is not None and ready in readable and os.read(ready, 1):
                return None
            if sys.stdin in readable and not stdin.peek(1):
                _killpg(pid)
                _PARKING.drop_all()
                raise SystemExit(0)
    finally:
        if exited is not None:
            os.close(exited)


def _exit_fd(pid: int) -> int | None:
    """A pidfd of the trial (Linux 5.3+), readable once it exits; None where there is none (the 0.2 s poll then)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _reap(trial_pid: int) -> ExitStatus | None:
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
            found = (os.WTERMSIG(status), None) if os.WIFSIGNALED(status) else (None, os.WEXITSTATUS(status))


def _killpg(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def _check(request: CheckRequest) -> None:
    """Validate the dataset spec (and consumer, knobs) before the sweep: exit 2 on a bad one.

    With `share`, the dataset is built here first, once (trial/shared.py): the check, the ceiling and every trial
    are forked from this process and use it. The check itself runs in a forked child, so the user's other imports
    (the consumer's), threads and open files never become part of the runner that every trial is forked from."""
    if request.share and not _share(request):
        return
    runner = os.getpid()
    pid = os.fork()
    if pid == 0:
        die_with_parent(runner)
        code = 1
        try:
            from loadertop.core.trial.check import check_child

            code = check_child(request, emit)
        finally:
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status) or os.WEXITSTATUS(status) not in (0, 2):
        how = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"code {os.WEXITSTATUS(status)}"
        error = f"loading the dataset killed its process ({how})"
        emit(Checked(ok=False, error=error))


def _share(request: CheckRequest) -> bool:
    """Build the dataset in the runner; False when the check ends here (the factory failed, or what it left
    behind must not be forked from: the driver then starts a fresh runner)."""
    from loadertop.core.datasets.errors import SpecError
    from loadertop.core.trial.shared import build_shared

    print(f"--- building the dataset once: {request.settings.dataset}", file=sys.stderr, flush=True)
    try:
        build = build_shared(request.settings)
    except SpecError as exc:
        traceback.print_exc()
        emit(Checked(ok=False, error=str(exc)))
        return False
    except Exception as exc:  # not foreseen by load_dataset: still one line
        traceback.print_exc()
        emit(Checked(ok=False, error=" ".join(f"building the dataset raised {type(exc).__name__}: {exc}".split())))
        return False
    if build.unsafe:
        emit(Checked(ok=True, dataset=type(build.loaded.dataset).__name__, built_s=build.seconds, unsafe=build.unsafe))
        return False
    return True


def _ceiling_main(request: CeilingRequest) -> int:
    """The consumer alone on a cached batch (ceiling.py), in a forked process like a trial."""
    from loadertop.core.trial.ceiling import ceiling_main

    try:
        return ceiling_main(request.settings, emit)
    finally:
        sys.stderr.flush()


def _trial_main(request: TrialRequest, park: tuple[int, int] | None = None) -> int:
    """The trial process: build the dataset and DataLoader, measure, report. Never returns normally."""
    import faulthandler

    faulthandler.enable()  # a segfault in the dataset's native code leaves its Python stack in the log
    try:
        print(f"--- trial {request.index}: {request.config.label()}", file=sys.stderr, flush=True)
        from loadertop.core.trial.run import run_trial

        run_trial(request.settings, request.config, emit, (request.decide_below, request.decide_above), park)
        return 0
    except BaseException as exc:
        traceback.print_exc()
        from loadertop.core.trial.crashes import describe

        emit(Failed(describe(exc), data=not _raised_by_loadertop(exc)))
        return 1
    finally:
        sys.stderr.flush()


def _raised_by_loadertop(exc: BaseException) -> bool:
    """Where the exception was raised: loadertop's own code (a measurement that found no clean block), or the data
    path (the dataset, its collate, the user's step, torch re-raising a worker's exception)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(package + os.sep)


if __name__ == "__main__":
    try:
        exit_code = main()
    except SystemExit as stop:  # the driver went away mid-trial
        exit_code = stop.code if isinstance(stop.code, int) else 0
    # Skip the interpreter's teardown: with torch loaded it takes 1.2 s here, and a sweep that is stopped
    # must have no process left within 2 s. Events went out unbuffered; only the log needs a flush.
    sys.stderr.flush()
    os._exit(exit_code)
