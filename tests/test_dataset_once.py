"""The dataset is built once per sweep, and a dataset every configuration fails on is bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import loadertop
from loadertop.core.datasets.fixes import fix_for, same_error
from loadertop.core.engine.drive.data_stop import SameFailure
from loadertop.core.engine.drive.driver import Sweep
from loadertop.core.model.config import DataError, Settings, TrialConfig, UsageError
from loadertop.core.model.events import Notice
from loadertop.core.model.results import Ceiling, TrialResult

DATA = Path(__file__).parent / "data"
COUNTED = f"{DATA}/counted.py"
FAST = dict(trial_seconds=1.0, block_seconds=0.15, interval=0.2, start_methods=("fork",))
GRID = [TrialConfig(0, 32), TrialConfig(1, 32, 2, start_method="fork"), TrialConfig(2, 32, 2, start_method="fork")]
sys.path.insert(0, str(DATA))
from corrupt_clips import write_clips  # noqa: E402  (tests/data is not a package)

PIL_ERROR = (
    "TypeError: default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; "
    "found <class 'PIL.Image.Image'>"
)


def sweep(
    runs: Path, factory: str, log: Path | None, only: list[TrialConfig], n: int | None = None, **more: object
) -> tuple[Sweep, list]:
    args = {"log": str(log)} if log else {}
    if n is not None:
        args["n"] = str(n)
    settings = Settings(dataset=f"{COUNTED}:{factory}", dataset_args=tuple(args.items()), **{**FAST, **more})  # type: ignore[arg-type]
    runner = Sweep(settings, out_dir=runs, only=only)
    notices = [e.message for e in runner.events() if isinstance(e, Notice)]
    return runner, notices


def ran(trials: tuple[TrialResult, ...]) -> bool:
    """Every trial measured (on a loaded 2-core machine a short trial may find no clean block: timing, not data)."""
    return bool(trials) and all(t.status == "ok" or "no clean block" in (t.error or "") for t in trials)


def builds(log: Path) -> int:
    return len(log.read_text().splitlines())


def test_the_dataset_is_built_once_for_the_check_the_ceiling_and_every_trial(runs: Path, tmp_path: Path) -> None:
    log = tmp_path / "builds.log"
    runner, notices = sweep(runs, "make", log, GRID, transport=True)  # the transport ceiling builds it too
    assert runner.result is not None and ran(runner.result.trials)
    assert builds(log) == 1  # before: the check, the ceiling and each of the 3 trials built it (5)
    line = next(n for n in notices if "built once in" in n)
    assert line.startswith("dataset Counted, 2048 samples; built once in ")
    machine = json.loads((Path(runner.result.run_dir or "") / "machine.json").read_text())
    assert machine["dataset_build"].startswith("dataset Counted built once in ")
    assert machine["dataset_build_s"] is not None and runner.result.machine.dataset_build_s is not None


def test_rebuild_dataset_builds_it_in_every_trial(runs: Path, tmp_path: Path) -> None:
    log = tmp_path / "builds.log"
    runner, notices = sweep(runs, "make", log, GRID, rebuild_dataset=True)
    assert runner.result is not None and ran(runner.result.trials)
    assert builds(log) == 1 + len(GRID)  # the check's own, then one per trial (no ceiling to build for here)
    assert any("each trial builds its own (--rebuild-dataset)" in n for n in notices)


def test_spawn_and_forkserver_workers_get_the_shared_dataset_pickled(runs: Path, tmp_path: Path) -> None:
    log = tmp_path / "builds.log"
    only = [TrialConfig(1, 32, 2, start_method=m) for m in ("spawn", "forkserver")]
    # Epochs longer than a trial: each epoch would start its spawned worker afresh (seconds of importing torch)
    runner, _ = sweep(runs, "make", log, only, n=1_000_000, start_methods=("spawn", "forkserver"))
    assert runner.result is not None and ran(runner.result.trials) and len(runner.result.trials) == 2
    assert builds(log) == 1


def test_a_build_that_leaves_a_thread_is_not_forked_from(runs: Path, tmp_path: Path) -> None:
    log = tmp_path / "builds.log"
    runner, notices = sweep(runs, "with_thread", log, GRID[:2])
    assert runner.result is not None and ran(runner.result.trials)
    assert any("left 1 threads (prefetcher) behind" in n and "each trial builds its own" in n for n in notices)
    assert builds(log) == 1 + 1 + 2  # the first runner's, the fresh runner's check, each trial


def test_a_child_process_the_factory_left_does_not_outlive_the_sweep(
    runs: Path, tmp_path: Path, no_leftovers: None
) -> None:
    log = tmp_path / "builds.log"
    runner, notices = sweep(runs, "with_child", log, GRID[:1])
    assert runner.result is not None and ran(runner.result.trials)
    assert any("child processes" in n for n in notices)


def test_pil_images_without_a_transform_stop_at_the_check_with_the_fix(runs: Path) -> None:
    with pytest.raises(DataError) as caught:
        sweep(runs, "pil", None, GRID)
    assert str(caught.value).startswith(f"the dataset's first batch fails: {PIL_ERROR}; fix: the samples are PIL")
    assert "ToTensor()" in str(caught.value) and "collate_fn" in str(caught.value)
    assert not any(runs.iterdir())  # bad input leaves no run folder


def test_every_configuration_failing_the_same_way_stops_after_the_first_repeat(runs: Path) -> None:
    events: list[object] = []
    with pytest.raises(DataError) as caught:  # what loadertop.sweep(...) raises: a UsageError
        loadertop.sweep(f"{COUNTED}:pil_late", out_dir=runs, workers="0,1,2,4", search="grid", on_event=events.append,
                        trial_seconds=1.0, start_method="fork")  # fmt: skip
    assert isinstance(caught.value, UsageError)
    assert str(caught.value).startswith("the ceiling's batch and trial 1 fail the same way, so every configuration")
    assert "fix: some samples are not tensors" in str(caught.value)
    finished = [e for e in events if type(e).__name__ == "TrialFinished"]
    assert len(finished) == 1  # before: all 4 trials ran and failed, and the sweep ended with exit 0
    assert not any(runs.iterdir())


def test_the_cli_says_one_line_and_exits_2_for_data_every_trial_fails_on(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "loadertop", "--headless", "--workers", "0,1", "--trial-seconds", "1", "--out",
           str(tmp_path), "--dataset", f"{COUNTED}:pil"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("loadertop: error: the dataset's first batch fails: TypeError: default_collate")
    assert "ToTensor()" in proc.stderr and proc.stdout == ""
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("workers", "lines"),
    [((), ["w=0 ", "w=1 "]), (("--workers", "2"), ["w=2 "])],  # the default climb stops at the repeat; one trial
    ids=["default-0-and-1-workers", "2-workers-alone"],
)
def test_a_corrupt_file_fails_every_configuration_naming_the_file_and_sample_with_exit_2(
    tmp_path: Path, workers: tuple[str, ...], lines: list[str]
) -> None:
    bad = write_clips(tmp_path / "clips")  # 300 clips, number 150 corrupt: past the check's first batch
    cmd = [sys.executable, "-m", "loadertop", "--headless", *workers, "--trial-seconds", "1", "--out",
           str(tmp_path / "runs"), "--dataset", f"{DATA}/corrupt_clips.py:build", "--dataset-arg",
           f"root={tmp_path / 'clips'}"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 2, proc.stdout + proc.stderr  # before: 0, "No recommendation: no trial finished."
    failed = {line.split("]")[1].split()[0] + " ": line for line in proc.stderr.splitlines() if line.startswith("[")}
    assert list(failed) == lines
    cause = f"failed: LibsndfileError: Error opening '{bad}': Format not recognised. ("
    for label, line in failed.items():  # before: the 1-worker row said only "trial process exited with code 1"
        assert cause in line and line.endswith("sample index 150)"), line
        assert ("(in DataLoader worker 0, " in line) == (label != "w=0 "), line
    said = proc.stderr.strip().splitlines()[-1]
    assert said.startswith("loadertop: error: ") and "fix: a file is not audio soundfile can read" in said
    assert not any((tmp_path / "runs").iterdir())  # before: a run folder was left


@pytest.mark.unit
def test_a_sweep_that_ends_with_none_finished_and_a_data_failure_is_bad_data_whatever_the_wording() -> None:
    first, second = f"OSError: cannot read {DATA}/a.wav (sample index 3)", "OSError: cannot read b.wav (sample index 9)"
    failed = [_failed(0, first), _failed(1, second)]
    differently = SameFailure()
    for trial in failed:
        differently.trial(trial, trial.error)  # worded differently: no early stop
    with pytest.raises(DataError) as caught:
        differently.finish(failed)
    assert str(caught.value) == f"every configuration failed (2 trials, none finished), trial 1 on the data: {first}"

    one_finished, resources = SameFailure(), SameFailure()
    ok = TrialResult(2, TrialConfig(2, 32), "ok", samples_per_s=10.0)
    for trial in failed:
        one_finished.trial(trial, trial.error)
    one_finished.finish([*failed, ok])  # a rerun's whole result counts: a row that finished is an answer
    oom = "RuntimeError: DataLoader worker (pid 12) is killed by signal: Killed."
    resources.trial(_failed(0, oom), oom)
    resources.finish([_failed(0, oom)])  # a smaller configuration may run: not the data's fault


def _failed(index: int, error: str) -> TrialResult:
    return TrialResult(index, TrialConfig(index, 32), "failed", error=error)


@pytest.mark.unit
def test_the_same_data_error_twice_stops_and_nothing_else_does() -> None:
    same = SameFailure()
    same.trial(_failed(0, PIL_ERROR), PIL_ERROR)
    with pytest.raises(DataError) as caught:
        same.trial(_failed(1, f"{PIL_ERROR} (in DataLoader worker 0)"), f"{PIL_ERROR} (in DataLoader worker 0)")
    assert caught.value.error == PIL_ERROR
    assert str(caught.value).startswith("trial 1 and trial 2 fail the same way")

    ceiling = SameFailure()  # the ceiling's batch is the first attempt
    ceiling.ceilings((Ceiling(32, None, f"not measured ({PIL_ERROR})"),))
    with pytest.raises(DataError):
        ceiling.trial(_failed(0, PIL_ERROR), PIL_ERROR)

    oom = "RuntimeError: DataLoader worker (pid 12) is killed by signal: Killed."
    resource, guard, finished, other = SameFailure(), SameFailure(), SameFailure(), SameFailure()
    for index in range(3):
        resource.trial(_failed(index, oom), oom)  # a smaller configuration may avoid it
        guard.trial(_failed(index, "memory guard: free memory fell below 2 GiB"), None)  # not raised by the trial
        other.trial(_failed(index, f"ValueError: bad {index}"), f"ValueError: bad {index}")  # not the same
    finished.trial(TrialResult(0, TrialConfig(0, 32), "ok", samples_per_s=10.0), None)
    for index in (1, 2):  # the data works in some configuration: the sweep has an answer to give
        finished.trial(_failed(index, PIL_ERROR), PIL_ERROR)


@pytest.mark.unit
def test_common_data_errors_map_to_their_fix() -> None:
    assert "ToTensor()" in fix_for(PIL_ERROR)
    assert "collate_fn that pads" in fix_for("RuntimeError: stack expects each tensor to be equal size, but got [3]")
    assert "is None" in fix_for("TypeError: default_collate: batch must contain ...; found <class 'NoneType'>")
    assert fix_for("ValueError: corrupt record") == ""
    assert same_error("ValueError: x (in DataLoader worker 3, sample index 17)") == "ValueError: x"


@pytest.mark.unit
def test_only_failures_raised_outside_loadertop_count_as_the_datas() -> None:
    from loadertop.core.datasets.errors import SpecError
    from loadertop.core.datasets.spec import split_callable
    from loadertop.core.trial.runner import _raised_by_loadertop

    with pytest.raises(SpecError) as ours:  # raised in loadertop's own code, as "no clean block" is
        split_callable("no-colon", "dataset")
    assert _raised_by_loadertop(ours.value)
    with pytest.raises(TypeError) as theirs:
        Path(3)  # type: ignore[arg-type]
    assert not _raised_by_loadertop(theirs.value)
