"""Workers kept between the runs of one configuration, so its repeats do not pay their start-up again.

The finalists' head-to-head (engine/search/finalists.py) measures two configurations alternately, A B A B ...; each run
used to fork a fresh trial, whose workers start (seconds at 64 workers, far longer with spawn) before anything is
measured. A trial asked to `park` (TrialRequest.park) measures as usual, then waits with its DataLoader workers
idle; the next request for the same configuration measures again on them. Idle workers block on their index queue
once their prefetch buffer is full, so a parked trial costs memory, not CPU; the runner drops every parked trial
(closes its pipe and kills its process group) at the first request that does not park, and when it leaves.

Runner side: `Parking`. Trial side: `wait_for_again`.
"""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass

from loadertop.core.model.config import TrialConfig


@dataclass(frozen=True)
class Parked:
    pid: int  # the trial process, leader of its process group
    go: int  # runner → trial: one line per run asked for; closed: leave
    ready: int  # trial → runner: one byte each time a run is measured and it waits again


class Parking:
    """The runner's parked trials, one per configuration."""

    def __init__(self) -> None:
        self._by_config: dict[TrialConfig, Parked] = {}

    def take(self, config: TrialConfig) -> Parked | None:
        return self._by_config.pop(config, None)

    def keep(self, config: TrialConfig, parked: Parked) -> None:
        self._by_config[config] = parked

    def drop_all(self) -> None:
        for parked in self._by_config.values():
            drop(parked)
        self._by_config.clear()


def drop(parked: Parked) -> None:
    """The trial and its workers go at once (the runner, their subreaper, reaps them)."""
    for fd in (parked.go, parked.ready):
        with contextlib.suppress(OSError):
            os.close(fd)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(parked.pid, signal.SIGKILL)


def wait_for_again(go: int, ready: int) -> bool:
    """Trial side, after a run: tell the runner it is measured, then wait. True: measure again; False: leave."""
    os.write(ready, b"p")
    line = b""
    while not line.endswith(b"\n"):
        chunk = os.read(go, 64)
        if not chunk:
            return False
        line += chunk
    return True
