"""The runner template: a process that has imported torch once, from which each sweep's runner is forked.

    python -m loadertop.core.trial.runner_template FD

Importing torch takes about a second of CPU. An exec'd runner paid it for every sweep; a process that runs several
sweeps (the TUI's reruns, the Python API in a notebook, a dataset check that needs a fresh runner) now pays it once.
The template does nothing else: it imports no user code, starts no thread and forks only runners.

Requests come on the Unix socket FD (SOCK_SEQPACKET: one datagram a message, model/template_protocol.py), each a
ForkRunner of the runner's environment and working directory, with its stdin, stdout and stderr as passed descriptors.
The template forks, answers with the runner's pid, and the child becomes exactly what `python -m
loadertop.core.trial.runner` would be: its own session, those three descriptors, that environment and path. The
kernel reaps the runners (SIGCHLD ignored here); the driver follows each through a pidfd. The template leaves when
the socket closes (its driver is gone, killed or not) or after IDLE_SECONDS without a request (a running sweep sends
KeepWarm now and then), so a notebook that swept once does not keep torch's memory for the rest of the day. (Not
PR_SET_PDEATHSIG: that fires when the *thread* that started us ends, and each sweep runs in a thread of its own.)
"""

from __future__ import annotations

import contextlib
import gc
import os
import resource
import signal
import socket
import sys
import tempfile
import traceback

from loadertop.core.model.template_protocol import (
    TEMPLATE_PROTOCOL_VERSION,
    ForkRunner,
    KeepWarm,
    RunnerForked,
    TemplateReady,
    decode,
    encode,
)
from loadertop.core.model.wire import ProtocolError

IDLE_SECONDS = 120.0
# The interpreter's own import path: what is left of sys.path without the working directory and PYTHONPATH.
_DEFAULT_PATH = [p for p in sys.path[1:] if p not in os.environ.get("PYTHONPATH", "").split(os.pathsep)]
MAX_REQUEST = 1 << 20  # an environment of a few KB; a megabyte is room to spare


def main() -> int:
    sock = socket.socket(fileno=int(sys.argv[1]))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver decides when we stop
    import torch  # noqa: F401  (the whole point: paid once, inherited by every runner)

    import loadertop.core.trial.runner  # noqa: F401  (and the runner's own imports)

    gc.collect()  # as the runner does before it forks: the import's garbage is not copied into every child
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # runners are reaped by the kernel
    sock.send(encode(TemplateReady(version=TEMPLATE_PROTOCOL_VERSION, pid=os.getpid())))
    sock.settimeout(IDLE_SECONDS)
    while True:
        try:
            message, fds, _flags, _address = socket.recv_fds(sock, MAX_REQUEST, 3)
        except (TimeoutError, OSError):
            return 0
        if not message:  # the driver closed its end
            return 0
        try:
            request = decode(message)
        except ProtocolError:
            request = None
        if isinstance(request, KeepWarm):  # a sweep still running: not idle
            continue
        if not isinstance(request, ForkRunner):  # not a request of ours: leave, the driver execs its runners instead
            return 1
        pid = os.fork()
        if pid == 0:
            sock.close()
            _become_runner(request, fds)  # never returns
        for fd in fds:
            os.close(fd)
        sock.send(encode(RunnerForked(pid=pid)))


def _become_runner(request: ForkRunner, fds: list[int]) -> None:
    """In the forked child: the runner exactly as exec'd, then exit without running the template's exit code."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the runner reaps its trials itself
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        _inherit(request)
        os.environ.clear()
        os.environ.update(request.env)
        tempfile.tempdir = None  # TMPDIR is the runner's own folder
        os.chdir(request.cwd)
        sys.path[:] = _import_path(os.getcwd(), os.environ.get("PYTHONPATH", ""))
        sys.argv[:] = ["-m"]
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 (the process's own stdin, for its whole life)
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        if request.main == "stages":  # `loadertop stages`' child, for a sweep's stages step
            from loadertop.core.trial.stages_main import main as stages_main

            code = stages_main(sys.stdin)
        else:
            from loadertop.core.trial.runner import main as runner_main

            code = runner_main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)


def _inherit(request: ForkRunner) -> None:
    """What an exec'd runner would have inherited from its driver at this moment, not at the template's start: the
    resource limits (a lowered open-file limit), the CPUs it may run on, the umask."""
    for name, (soft, hard) in request.limits.items():
        with contextlib.suppress(ValueError, OSError):  # a hard limit above the template's own cannot be raised
            resource.setrlimit(getattr(resource, name), (soft, hard))
    if request.cpus and hasattr(os, "sched_setaffinity"):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, request.cpus)
    os.umask(request.umask)


def _import_path(cwd: str, pythonpath: str) -> list[str]:
    """sys.path as `python -m` would start it here: the working directory, PYTHONPATH, then the interpreter's own
    (ours, less the template's working directory and PYTHONPATH of its day)."""
    first = [cwd, *(p for p in pythonpath.split(os.pathsep) if p)]
    return first + [p for p in _DEFAULT_PATH if p not in first]


if __name__ == "__main__":
    # No interpreter teardown: torch's takes a second on a busy machine, and a template has nothing to flush
    os._exit(main())
