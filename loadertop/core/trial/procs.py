"""Process controls for the runner, its trials and their workers: who dies with whom, who the OOM killer takes."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def prctl(option: int, value: int) -> None:
    """Linux process controls; a no-op elsewhere (the driver's own cleanup still applies)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def die_with_parent(parent: int | None = None) -> None:
    """The kernel SIGKILLs this process when its parent dies. With `parent` (the pid that forked us, read before the
    fork): a parent that died before the signal was armed leaves us reparented, and we exit now instead of living on
    as an orphan nobody will kill."""
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if parent is not None and sys.platform.startswith("linux") and os.getppid() != parent:
        os._exit(1)


def become_subreaper() -> None:
    """Orphaned descendants (DataLoader workers of a dead trial) are reparented to us, and we reap them."""
    prctl(PR_SET_CHILD_SUBREAPER, 1)


def prefer_oom_kill() -> None:
    """Make this process (and what it forks) the kernel OOM killer's first choice, not someone's training
    job. Raising one's own oom_score_adj needs no privilege; where /proc is missing this does nothing."""
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as handle:
        handle.write("1000")


class DieWithParent:
    """A `worker_init_fn` (wrapping the dataset's own, if any) that has the kernel SIGKILL a DataLoader worker
    when the process that started it dies. Without it, workers whose trial and runner were both killed live on:
    torch's watchdog looks for a dead parent only between index reads, and a worker whose result pipe is full
    (its sibling workers keep the read end open) blocks at exit forever. Picklable for spawn workers."""

    def __init__(self, user: Callable[[int], object] | None, direct_child: bool) -> None:
        self.user = user
        self.trial = os.getpid()  # built in the trial process
        self.direct_child = direct_child  # fork and spawn workers are the trial's children; forkserver's are not

    def __call__(self, worker_id: int) -> None:
        if sys.platform.startswith("linux"):
            die_with_parent()
            # A spawn worker takes seconds to get here (it imports torch): its trial may be gone already.
            try:
                os.kill(self.trial, 0)
            except ProcessLookupError:
                os._exit(1)
            if self.direct_child and os.getppid() != self.trial:
                os._exit(1)
        if self.user is not None:
            self.user(worker_id)


def has_children() -> bool:
    """Whether this process has a child, running or exited and not yet reaped (the reap is left to its owner)."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return True
