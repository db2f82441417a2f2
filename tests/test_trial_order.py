"""The runner tells the driver a trial's pid (Forked) before the trial's own first message, however late the runner
runs after fork: the driver files every message under the pid Forked named, and a Started ahead of it failed the
trial (seen beside a CPU hog). Run in a plain interpreter: the runner's functions fork and write to a pipe."""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = r"""
import json, os, time, types
from loadertop.core.model.protocol import Started
from loadertop.core.trial import runner

driver_r, driver_w = os.pipe()  # the driver's end stays open: a runner whose stdin closes leaves at once
os.dup2(driver_r, 0)
events_r, events_w = os.pipe()
runner._EVENTS_FD = events_w
send = runner.emit

def late_emit(message):  # the runner descheduled right after fork: its Forked goes out 0.3 s late
    if type(message).__name__ == "Forked":
        time.sleep(0.3)
    send(message)

def trial_main(request):  # a trial whose first batch comes at once
    send(Started(worker_pids=(), first_batch_s=0.0, batch_mb=0.0, rank_pids=()))
    return 0

runner.emit = late_emit
runner._trial_main = trial_main
runner._run_forked(types.SimpleNamespace(index=0))
os.close(events_w)
lines = os.read(events_r, 65536).decode().splitlines()
print(json.dumps([json.loads(line)["type"] for line in lines]))
"""


def test_forked_reaches_the_driver_before_the_trials_first_message() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    kinds = json.loads(out.stdout.strip().splitlines()[-1])
    assert kinds[:2] == ["forked", "started"], kinds
