"""Worker threads as an axis (--worker-threads), the main process's thread count, and CPU oversubscription named
in the reasons."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from loadertop.core.engine.drive.driver import Sweep
from loadertop.core.engine.report.rows import config_cells
from loadertop.core.engine.verdict.analysis import analyze, snippet
from loadertop.core.engine.verdict.reasons import oversubscribed, trial_reason
from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.results import MachineInfo, SweepResult, TrialResult

DATA = Path(__file__).parent / "data"
# 2 s: a 128-batch first epoch on a busy 2-core machine can outlast a 1 s trial, leaving no clean block (CI, once)
FAST = dict(trial_seconds=2.0, block_seconds=0.1, interval=0.2, search="grid")


def test_a_worker_threads_sweep_sets_each_workers_threads_and_reports_the_main_process(
    tmp_path: Path, runs: Path, no_leftovers: None
) -> None:
    record = tmp_path / "threads"
    record.mkdir()
    settings = Settings(
        dataset=f"{DATA}/torch_ops.py:build", dataset_args=(("record", str(record)), ("size", "32")),
        workers=(2,), worker_threads=(1, 2), start_methods=("fork",), **FAST,
    )  # fmt: skip
    result = Sweep(settings, out_dir=runs).run()
    assert [t.status for t in result.trials] == ["ok", "ok"], [t.error for t in result.trials]
    assert [t.config.worker_threads for t in result.trials] == [1, 2]
    assert [t.config.label() for t in result.trials] == ["w=2 bs=32 pf=2 fork th=1", "w=2 bs=32 pf=2 fork th=2"]
    # Each worker process wrote the thread count it loaded with: at least two workers per trial (more where an
    # epoch boundary restarted them), at 1 and at 2 and nothing else.
    counts = [int(f.read_text()) for f in record.iterdir()]
    assert set(counts) == {1, 2} and counts.count(1) >= 2 and counts.count(2) >= 2, counts
    assert all(t.main_threads is not None and t.main_threads >= 1 for t in result.trials)
    data = json.loads(json.dumps(result.to_dict()))
    assert [t["config"]["worker_threads"] for t in data["trials"]] == [1, 2]
    assert all("main_threads" in t for t in data["trials"])
    assert SweepResult.from_dict(data).trials[1].config.worker_threads == 2


@pytest.mark.unit
def test_threads_at_zero_workers_are_skipped_and_the_cells_show_threads_only_when_set() -> None:
    settings = Settings(workers=(0, 2), worker_threads=(1, 4), start_methods=("fork",))
    assert [c.label() for c in settings.trial_configs()] == ["w=0 bs=32", "w=2 bs=32 pf=2 fork th=1",
                                                             "w=2 bs=32 pf=2 fork th=4"]  # fmt: skip
    skipped = dict(settings.skipped_configs())
    assert all("worker_threads" in why for why in skipped.values()) and len(skipped) == 2
    assert config_cells(TrialConfig(2, 32, 2, start_method="fork", worker_threads=4))["start"] == "fork th=4"
    assert config_cells(TrialConfig(2, 32, 2, start_method="fork"))["start"] == "fork"
    assert Settings().trial_configs()[0].worker_threads is None


@pytest.mark.unit
def test_the_snippet_sets_the_threads_with_a_picklable_init_fn() -> None:
    import pickle

    import loadertop

    line = snippet(TrialConfig(2, 32, 2, start_method="fork", worker_threads=2), "fork")
    assert line == "DataLoader(dataset, batch_size=32, num_workers=2, worker_init_fn=loadertop.set_worker_threads(2))"
    init = pickle.loads(pickle.dumps(loadertop.set_worker_threads(2)))
    assert init.threads == 2
    assert "worker_init_fn" not in snippet(TrialConfig(2, 32, 2, start_method="fork"), "fork")


def _trial(workers: int, main_threads: int | None, threads: int | None = None, stall: float = 0.48) -> TrialResult:
    config = TrialConfig(workers, 32, 2 if workers else None, start_method="fork" if workers else None,
                         worker_threads=threads)  # fmt: skip
    return TrialResult(
        index=0, config=config, status="ok", samples_per_s=500.0, batches_per_s=500 / 32, spread=0.01,
        stall_fraction=stall, cpu_percent=120.0, main_cpu_percent=60.0, main_threads=main_threads,
    )  # fmt: skip


def _machine(cpus: int) -> MachineInfo:
    return MachineInfo("host", "linux", "3.12", "2.6", cpus, cpus, None, 8192.0, 4096.0, None, None, "fork")


@pytest.mark.unit
def test_oversubscription_is_named_when_the_threads_outnumber_the_cpus_and_not_otherwise() -> None:
    two = _machine(2)
    over = oversubscribed(_trial(2, 2), two, step=True)
    assert over == (
        "oversubscribed: 2 workers × 1 thread + 2 main-process threads = 4 > 2 usable CPUs "
        "(try torch.set_num_threads(1) in the training process or fewer workers)"
    )
    assert "2 workers × 2 threads" in oversubscribed(_trial(2, 1, threads=2), two, step=True)
    assert oversubscribed(_trial(2, 2), _machine(4), step=True) == ""  # 4 threads on 4 CPUs fit
    assert oversubscribed(_trial(0, 2), two, step=True) == ""
    assert oversubscribed(_trial(2, None), two, step=True) == ""  # an old result: nothing known
    # Without a training step only extra worker threads count: 2 workers × 2 threads on 2 CPUs, but not 2 × 1
    # (more single-threaded workers than CPUs is what the CPU-bound reason says).
    assert oversubscribed(_trial(2, 2, threads=2), two, step=False) == (
        "oversubscribed: 2 workers × 2 threads = 4 > 2 usable CPUs (try fewer worker threads or fewer workers)"
    )
    assert oversubscribed(_trial(4, 2), two, step=False) == ""
    # The main process's threads count only beside a step that computes on the CPU (--consumer): --step-ms sleeps
    # (or runs a GPU kernel) and leaves them idle.
    assert "oversubscribed: " in trial_reason(_trial(2, 2), two, 500.0, ceiling=900.0, cpu_step=True)
    assert "oversubscribed" not in trial_reason(_trial(2, 2), two, 500.0, ceiling=900.0)
    assert "oversubscribed" not in trial_reason(_trial(2, 1), _machine(3), 500.0, ceiling=900.0, cpu_step=True)


@pytest.mark.unit
def test_the_recommendation_names_oversubscription_with_a_consumer() -> None:
    trials = [dataclasses.replace(_trial(0, 2, stall=0.9), samples_per_s=200.0), _trial(2, 2)]
    trials[1] = dataclasses.replace(trials[1], index=1)
    stepping = Settings(workers=(0, 2), consumer="x.py:step")
    _, rec = analyze(trials, stepping, _machine(2))
    assert rec is not None and rec.config.num_workers == 2
    assert "oversubscribed: 2 workers × 1 thread + 2 main-process threads = 4 > 2 usable CPUs" in rec.reason
    _, plain = analyze(trials, Settings(workers=(0, 2)), _machine(2))
    assert plain is not None and "oversubscribed" not in plain.reason
    _, sleeping = analyze(trials, Settings(workers=(0, 2), step_ms=20.0), _machine(2))  # an emulated step sleeps
    assert sleeping is not None and "oversubscribed" not in sleeping.reason


@pytest.mark.unit
def test_an_old_result_without_the_new_keys_loads() -> None:
    data = json.loads((DATA / "recorded_result.json").read_text())
    for t in data["trials"]:
        t["config"].pop("worker_threads", None)
        t.pop("main_threads", None)
    data["settings"].pop("worker_threads", None)
    result = SweepResult.from_dict(data)
    assert all(t.config.worker_threads is None and t.main_threads is None for t in result.trials)
    assert result.settings.worker_threads == (None,)
