"""The terminal UI (Textual). Imported only when it is used: `loadertop --headless` never loads it."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from loadertop.core.engine import SweepRequest
    from loadertop.faces.openmetrics import MetricsServer


def run_tui(request: SweepRequest, *, theme: str | None = None, err: TextIO | None = None) -> int:
    """Run the app until the user quits. Exit code: 0 done, 130 quit mid-sweep, 1/2 the sweep failed, 1 when
    --json or --csv could not be written (after the app exits, one line per file on stderr, as headless).

    `theme="light"` (or LOADERTOP_THEME=light) starts in the light theme; `t` switches at any time."""
    from loadertop.faces.tui.app import make_app

    app = make_app(request, theme=theme)
    app.run()
    # app.run() returns after the sweep thread has left events(): the executor is joined on the way out.
    app.write_on_exit()
    code = app.return_code or 0
    err = err if err is not None else sys.stderr
    for path, error in app.written.items():
        if error is None:
            print(f"loadertop: wrote {path}", file=err)
        else:
            print(f"loadertop: error: cannot write {path}: {error}", file=err)
            code = 1
    return code


def run_attach(
    target: int | str | None,
    *,
    interval: float,
    json_path: Path | None,
    err: TextIO | None = None,
    metrics: MetricsServer | None = None,
    interrupt: Callable[[], None] | None = None,
) -> int:
    """`loadertop attach [PID|PATH]`: the live view of a running training job until the user quits.

    With a target the session is opened before the app starts: an AttachError is one line on stderr and exit
    code 2. Without one the app opens on the job picker. Exit code: 0, 1 when --json could not be written or the
    stream failed."""
    # Imported here: the engine's attach side is only needed when attaching (and the faces contract allows
    # loadertop.core.engine alone).
    from loadertop.core.engine import AttachError, find_jobs, open_session
    from loadertop.faces.tui.attach.app import AttachApp

    err = err if err is not None else sys.stderr
    session = None
    if target is not None:
        try:
            session = open_session(target, interval=interval)
        except AttachError as error:
            print(f"loadertop: error: {error}", file=err)
            return 2
    if metrics is not None and session is not None:
        metrics.set_job(pid=session.pid, command=session.command, hostname=session.hostname, rank=session.rank)

    app = AttachApp(
        opener=functools.partial(open_session, interval=interval),
        jobs=find_jobs,
        interval=interval,
        session=session,
        json_path=json_path,
        sink=None if metrics is None else metrics.update,
        interrupt=interrupt,
    )
    try:
        app.run()
    finally:
        # The app closes its sessions when it ends; this covers an app that failed before it started one
        # (close() is idempotent): no session's threads may outlive the view.
        app.detach()
        if session is not None:
            session.close()
    code = app.return_code or 0
    if app.json_error is not None:
        print(f"loadertop: error: cannot write {json_path}: {app.json_error}", file=err)
        code = 1
    return code


def run_job(
    command: Sequence[str],
    *,
    interval: float,
    json_path: Path | None,
    tune_s: float | None,
    metrics: MetricsServer | None = None,
    err: TextIO | None = None,
) -> int:
    """`loadertop run -- CMD...` on a terminal: the attach view of the job's first process that iterates a DataLoader.
    The TUI owns the terminal, so the job's output goes to a log file (its last lines are printed at the end), and
    Ctrl-C in the view is sent to the job. q leaves the view; loadertop then waits for the job (Ctrl-C reaches it) and
    exits with its code."""
    import os
    import tempfile

    from loadertop.core.engine import hold_signals, start_job
    from loadertop.faces.headless_attach import NOTHING_WATCHED, run_summary

    err = err if err is not None else sys.stderr
    log = Path(tempfile.gettempdir()) / f"loadertop-run-{os.getpid()}.log"
    job = start_job(command, tune_s=tune_s, log=log)
    with hold_signals(job):
        print(f"loadertop run: started pid {job.pid} (its output: {log}); waiting for its first DataLoader", file=err)
        found = job.publisher()
        if found is None:
            print(NOTHING_WATCHED, file=err)
        else:
            run_attach(job.view_target(found), interval=interval, json_path=json_path, err=err, metrics=metrics,
                       interrupt=job.interrupt)  # fmt: skip
            if job.running:
                print(f"loadertop run: waiting for the job (pid {job.pid}) to end; Ctrl-C reaches it", file=err)
        code = job.wait()
    try:
        tail = log.read_text(errors="replace").splitlines()[-20:]
    except OSError:
        tail = []
    if tail:
        print(f"loadertop run: the last lines of the job's output ({log}):", file=err)
        print("\n".join(f"  {line}" for line in tail), file=err)
    print(run_summary(job, code, tune_s), file=err)
    return code
