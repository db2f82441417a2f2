"""The engine end to end on real DataLoaders: runner process, worker processes, events, run folder."""

from __future__ import annotations

import json
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest

from loadertop.core.engine.drive.driver import Sweep
from loadertop.core.engine.report.runfolder import read_trials
from loadertop.core.model.config import DataError, Settings
from loadertop.core.model.events import (
    ProbeSample,
    SweepFinished,
    SweepStarted,
    TrialFinished,
    TrialLaunched,
    TrialProgress,
    TrialStarted,
)
from loadertop.core.model.results import TrialResult

FAST = dict(dataset="synthetic:cpu_ms=0.2,io_ms=2,kb=16", trial_seconds=1.5, block_seconds=0.15, interval=0.2)
DESIGN_TRIAL_KEYS = {
    "config", "status", "error", "samples_per_s", "batches_per_s", "spread", "first_batch_s", "stall_fraction",
    "worker_uss_mb", "total_pss_mb", "rss_mb", "cpu_percent", "gpu_util", "reason",
}  # fmt: skip


def index_of(event: object) -> int | None:
    if isinstance(event, TrialFinished):
        return event.result.index
    if isinstance(event, TrialStarted | TrialProgress):
        return event.index
    return None


def gone(pids: list[int], within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return True
        time.sleep(0.05)
    return False


def test_sweep_streams_events_and_measures_real_workers(runs: Path, no_leftovers: None) -> None:
    sweep = Sweep(Settings(workers=(0, 2), start_methods=("fork",), **FAST), out_dir=runs)
    events = list(sweep.events())
    kinds = [type(e) for e in events]
    assert kinds[0] is SweepStarted and kinds[-1] is SweepFinished
    started = [e for e in events if isinstance(e, TrialStarted)]
    assert [s.config.num_workers for s in started] == [0, 2]
    assert started[0].worker_pids == () and len(started[1].worker_pids) == 2
    assert all(s.first_batch_s > 0 for s in started)
    # Faces can follow each trial from its fork: TrialLaunched names the same process, before its first batch.
    launched = [e for e in events if isinstance(e, TrialLaunched)]
    fields = [(s.index, s.total, s.config, s.pid) for s in started]
    assert [(e.index, e.total, e.config, e.pid) for e in launched] == fields
    position = {id(e): i for i, e in enumerate(events)}
    assert all(position[id(a)] < position[id(b)] for a, b in zip(launched, started, strict=True))
    # Progress comes after the trial started and before it finished, for each trial.
    for s in started:
        order = [i for i, e in enumerate(events) if index_of(e) == s.index]
        assert isinstance(events[order[0]], TrialStarted) and isinstance(events[order[-1]], TrialFinished)
        assert any(isinstance(events[i], TrialProgress) for i in order)
    # The probes saw the real worker processes, with their own (private) memory.
    samples = [e for e in events if isinstance(e, ProbeSample) and e.index == 1 and e.workers]
    assert samples and {w.pid for w in samples[-1].workers} <= set(started[1].worker_pids)
    result = sweep.result
    assert result is not None and not result.interrupted
    two = result.trials[1]
    assert two.status == "ok" and two.samples_per_s and two.samples_per_s > 0
    assert two.warmup_batches == 2 * 2 + 2  # prefetch × workers + workers
    assert len(two.worker_uss_mb) == 2 and all(u > 1 for u in two.worker_uss_mb)
    assert two.rss_mb is not None and two.total_pss_mb is not None and two.rss_mb > two.total_pss_mb
    assert 0 <= (two.stall_fraction or 0) <= 1
    assert gone(list(started[1].worker_pids) + [s.pid for s in started], within=2)


def test_run_folder_has_settings_log_trials_and_result(runs: Path) -> None:
    sweep = Sweep(Settings(workers=(0, 1), **FAST), out_dir=runs)
    result = sweep.run()
    folder = Path(sweep.run_dir)
    assert {"settings.json", "machine.json", "runner.log", "trials.jsonl", "result.json"} <= {
        p.name for p in folder.iterdir()
    }
    assert [t.config.num_workers for t in read_trials(folder)] == [0, 1]
    data = json.loads((folder / "result.json").read_text())
    assert {"version", "machine", "settings", "trials", "knee", "recommendation"} <= data.keys()
    assert data["trials"][0].keys() >= DESIGN_TRIAL_KEYS
    assert set(data["trials"][0]["config"]) == {
        "num_workers", "batch_size", "prefetch_factor", "pin_memory", "persistent_workers", "start_method", "in_order",
        "worker_threads", "worker_method",
    }  # fmt: skip
    assert data["recommendation"]["snippet"].startswith("DataLoader(dataset, batch_size=32")
    assert result.recommendation is not None


def test_cancel_mid_trial_kills_everything_within_2s_and_keeps_finished(
    runs: Path, no_leftovers: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A short temporary folder of the test's own: the killed trial's workers leave nothing there (their pymp-*)
    temp = Path(tempfile.mkdtemp(prefix="lt-test", dir="/tmp"))
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    settings = Settings(workers=(0, 4), **{**FAST, "trial_seconds": 30.0})
    sweep = Sweep(settings, out_dir=runs)
    pids: set[int] = set()
    cancelled_at: float | None = None
    for event in sweep.events():
        if isinstance(event, TrialStarted):
            pids |= {event.pid, *event.worker_pids}
        if isinstance(event, TrialProgress) and event.index == 1 and cancelled_at is None:
            cancelled_at = time.monotonic()
            threading.Thread(target=sweep.cancel).start()  # from another thread, as the TUI does
    assert cancelled_at is not None
    assert gone(sorted(pids), within=2.0)
    result = sweep.result
    assert result is not None and result.interrupted
    assert [t.config.num_workers for t in read_trials(Path(sweep.run_dir))] == [0]
    assert list(temp.iterdir()) == []
    temp.rmdir()


def test_pause_freezes_the_trial_and_resume_continues(runs: Path) -> None:
    sweep = Sweep(Settings(workers=(2,), **{**FAST, "trial_seconds": 3.0, "target_spread": 0.0}), out_dir=runs)
    pid = None
    for event in sweep.events():
        if isinstance(event, TrialStarted):
            pid = event.pid
        if isinstance(event, TrialProgress) and event.block == 1 and not sweep.paused:
            sweep.pause()
            deadline = time.monotonic() + 10  # SIGSTOP takes effect when the kernel next schedules the trial
            while psutil.Process(pid).status() != psutil.STATUS_STOPPED:
                assert time.monotonic() < deadline, "the trial never stopped"
                time.sleep(0.02)
            time.sleep(1.0)  # paused for a while: the trial's figures must not count it
            sweep.resume()
    result = sweep.result
    assert result is not None and result.trials[0].status == "ok"


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_other_start_methods_work_and_are_recorded(runs: Path, method: str) -> None:
    result = Sweep(Settings(workers=(1,), start_methods=(method,), **FAST), out_dir=runs).run()
    trial = result.trials[0]
    assert trial.status == "ok", trial.error
    assert trial.config.start_method == method


def test_failing_dataset_fails_each_trial_and_a_sweep_with_none_finished_as_bad_data(
    runs: Path, no_leftovers: None
) -> None:
    settings = Settings(workers=(0, 2), **{**FAST, "dataset": "synthetic:fail_at=40,cpu_ms=0,io_ms=0"})
    finished: list[TrialResult] = []
    with pytest.raises(DataError) as caught:
        for event in Sweep(settings, out_dir=runs).events():
            if isinstance(event, TrialFinished):
                finished.append(event.result)
    assert [t.status for t in finished] == ["failed", "failed"]  # the first failure did not stop the sweep
    assert all("synthetic failure at index 40" in (t.error or "") for t in finished)
    assert str(caught.value).startswith("every configuration failed (2 trials, none finished), trial 2 on the data")
    assert not any(runs.iterdir())  # no answer, no run folder


def test_short_epochs_are_measured_whole_with_their_boundaries(runs: Path, no_leftovers: None) -> None:
    # 120 batches an epoch, and each epoch's fresh workers sleep 0.5 s before their first sample: training can
    # never see more than 120 / 0.5 = 240 batches/s, however fast the batches come between boundaries.
    data = Path(__file__).with_name("data") / "slow_epochs.py"
    settings = Settings(
        dataset=f"{data}:build", dataset_args=(("length", "120"), ("start_s", "0.5")), workers=(2,),
        batch_sizes=(1,), start_methods=("fork",), trial_seconds=3, block_seconds=0.15, interval=0.2,
    )  # fmt: skip
    sweep = Sweep(settings, out_dir=runs)
    list(sweep.events())
    assert sweep.result is not None
    trial, *kept = sweep.result.trials
    assert trial.status == "ok", trial.error
    # The ceiling is the property; how far below it a loaded machine lands is not (beside other load it read 57).
    assert trial.samples_per_s is not None and 0 < trial.samples_per_s <= 240, trial.samples_per_s
    assert trial.blocks >= 2  # whole epochs, each its own block
    # Each boundary waits for the fresh workers' 0.5 s sleep before their first sample, whatever the machine's speed
    assert trial.epoch_restart_s is not None and trial.epoch_restart_s >= 0.5, trial.epoch_restart_s
    # The restart takes most of each epoch: the same 2 workers with persistent_workers=True, not asked for, over
    # whole epochs too (engine/search/persist.py)
    assert [(t.config.num_workers, t.config.persistent_workers, t.status) for t in kept] == [(2, True, "ok")]
    assert kept[0].blocks >= 2 and kept[0].epoch_batches == 120
    said = [s.message for s in sweep.result.search_trace if s.phase == "epoch"]
    assert len(said) == 1 and said[0].startswith("each epoch restarts 2 workers in "), said
