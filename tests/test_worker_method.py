"""Thread workers as an axis (`--worker-method process,thread`): parsing, the dedupe at 0 workers, the missing
`nodes` extra, the torchdata.nodes snippet, the thread-vs-process reason, the CSV/JSON columns, and a real
2-worker sweep of both methods over a list of dicts, where thread workers save the copy-on-read pages."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from loadertop.core.engine.drive.settings import build_settings, need_nodes
from loadertop.core.engine.report.export import CSV_COLUMNS
from loadertop.core.engine.report.rows import config_cells
from loadertop.core.engine.verdict.methods import method_phrase
from loadertop.core.engine.verdict.snippet import UserArgs, snippet
from loadertop.core.model.config import Settings, TrialConfig, UsageError
from loadertop.core.model.results import SweepResult, TrialResult

ROOT = Path(__file__).parent.parent
DICTS = Path(__file__).parent / "dicts_dataset.py"
FAST = dict(trial_seconds=2.0, block_seconds=0.1, interval=0.2, search="grid")


@pytest.mark.unit
def test_the_flag_parses_a_list_and_refuses_other_words() -> None:
    assert build_settings({"worker_method": "process,thread"}).worker_methods == ("process", "thread")
    assert build_settings({"worker_method": ["thread"]}).worker_methods == ("thread",)
    assert build_settings({}).worker_methods == ()  # not given: process for a DataLoader, a graph's own method
    with pytest.raises(UsageError, match="'greenlet' is not one of process, thread"):
        build_settings({"worker_method": "process,greenlet"})


@pytest.mark.unit
def test_zero_workers_is_measured_once_and_threads_drop_the_process_only_knobs() -> None:
    settings = Settings(workers=(0, 2), worker_methods=("process", "thread"), start_methods=("fork",),
                        persistent_workers=(True,), worker_threads=(2,))  # fmt: skip
    configs = settings.trial_configs()
    assert [c.label() for c in configs] == ["w=0 bs=32", "w=2 bs=32 pf=2 persist fork th=2", "w=2 bs=32 pf=2 thread"]
    assert config_cells(configs[2])["start"] == "thread"
    assert TrialConfig.from_dict({"num_workers": 2, "batch_size": 32}).worker_method == "process"  # older files


@pytest.mark.unit
def test_without_torchdata_the_thread_method_is_one_line_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torchdata", None)
    monkeypatch.delitem(sys.modules, "torchdata.nodes", raising=False)
    with pytest.raises(UsageError) as caught:
        need_nodes()
    assert str(caught.value) == '--worker-method thread needs torchdata.nodes: pip install "loadertop[graph]"'
    build_settings({"worker_method": "process"})  # process workers never need it


def refused(start: list[str], *args: str) -> list[str]:
    """The command line's stderr lines for a run that must exit 2."""
    done = subprocess.run([sys.executable, *start, "--headless", "--worker-method", "process,thread", *args],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)  # fmt: skip
    assert done.returncode == 2, done.stderr
    return done.stderr.strip().splitlines()


def test_the_command_line_exits_2_with_one_line_when_torchdata_is_missing() -> None:
    code = "import sys; sys.modules['torchdata'] = None; from loadertop.faces.cli import main; sys.exit(main())"
    assert refused(["-c", code], "--workers", "2") == [
        'loadertop: error: --worker-method thread needs torchdata.nodes: pip install "loadertop[graph]"'
    ]


@pytest.mark.unit
def test_the_snippet_of_a_thread_pick_is_the_nodes_chain() -> None:
    config = TrialConfig(4, 64, 2, worker_method="thread")
    assert snippet(config, "fork") == (
        "nodes.Loader(nodes.Prefetcher(nodes.ParallelMapper(nodes.Batcher(nodes.SamplerWrapper("
        "SequentialSampler(dataset)), batch_size=64, drop_last=False), map_fn=lambda idx: default_collate("
        '[dataset[i] for i in idx]), num_workers=4, method="thread"), prefetch_factor=8))'
    )
    user = UserArgs((("shuffle", "True"), ("collate_fn", "pad"), ("drop_last", "True")))
    line = snippet(TrialConfig(2, 32, 3, in_order=False, worker_method="thread"), "fork", user=user)
    assert "RandomSampler(dataset)" in line and "drop_last=True" in line and "map_fn=lambda idx: pad(" in line
    assert "in_order=False" in line and "prefetch_factor=6" in line
    assert snippet(TrialConfig(2, 32, 2, start_method="fork"), "fork").startswith("DataLoader(")


def _trial(method: str, sps: float, cpu: float, pss: float, workers: int = 2) -> TrialResult:
    config = TrialConfig(workers, 32, 2, start_method="fork" if method == "process" else None, worker_method=method)
    return TrialResult(
        index=0, config=config, status="ok", samples_per_s=sps, batches_per_s=sps / 32, spread=0.01,
        stall_fraction=0.9, cpu_percent=cpu, main_cpu_percent=cpu if method == "thread" else 40.0, total_pss_mb=pss,
    )  # fmt: skip


@pytest.mark.unit
def test_the_reason_compares_the_methods_at_the_same_worker_count() -> None:
    threads, procs = _trial("thread", 1000.0, 92.0, 130.0), _trial("process", 2100.0, 205.0, 220.0)
    other = _trial("process", 9999.0, 100.0, 50.0, workers=4)  # another count: never compared
    text = method_phrase(threads, [threads, procs, other], usable_cpus=2, gil=True)
    assert text == (
        "thread workers: 0.9 CPUs busy of 2, the GIL holds them; process workers are 2.1× faster here "
        "(2100 samples/s with processes vs 1000 with threads; PSS 220 MB with processes vs 130 MB with threads)"
    )
    same = method_phrase(threads, [threads, _trial("process", 1030.0, 190.0, 220.0)], 2, gil=True)
    assert "process and thread workers are as fast here (1030 samples/s with processes vs 1000 with threads;" in same
    fast_threads = _trial("thread", 3000.0, 92.0, 130.0)
    faster = method_phrase(fast_threads, [fast_threads, procs], 2, gil=True)
    assert faster.endswith(  # the faster method's figures first, as the sentence names it
        "thread workers are 1.4× faster here (3000 samples/s with threads vs 2100 with processes; "
        "PSS 130 MB with threads vs 220 MB with processes)"
    )
    assert method_phrase(procs, [threads, procs], 2, gil=True) == text  # the process row says the same
    free = method_phrase(threads, [threads, procs], 2, gil=False)
    assert "free-threaded Python (no GIL)" in free and "GIL holds" not in free
    assert method_phrase(threads, [threads], 2, gil=True) == ""  # nothing to compare with


@pytest.mark.unit
def test_the_csv_and_the_json_carry_the_method() -> None:
    assert "worker_method" in CSV_COLUMNS
    assert TrialConfig(2, 32, 2, worker_method="thread").to_dict()["worker_method"] == "thread"
    data = json.loads((Path(__file__).parent / "data" / "recorded_result.json").read_text())
    for t in data["trials"]:
        t["config"].pop("worker_method", None)
    data["settings"].pop("worker_methods", None)
    result = SweepResult.from_dict(data)
    assert all(t.config.worker_method == "process" for t in result.trials)
    assert result.settings.worker_methods == ()  # not given: the DataLoader's process workers
    assert {c.worker_method for c in result.settings.trial_configs()} == {"process"}


def test_a_real_sweep_measures_both_methods_and_threads_save_the_copy_on_read_pages(
    runs: Path, no_leftovers: None
) -> None:
    from loadertop.core.engine.drive.driver import Sweep

    settings = Settings(
        dataset=f"{DICTS}:build", dataset_args=(("n", "300000"),), workers=(2,),
        worker_methods=("process", "thread"), start_methods=("fork",), **FAST,
    )  # fmt: skip
    result = Sweep(settings, out_dir=runs).run()
    assert [t.status for t in result.trials] == ["ok", "ok"], [t.error for t in result.trials]
    procs, threads = result.trials
    assert (procs.config.worker_method, threads.config.worker_method) == ("process", "thread")
    data = json.loads(json.dumps(result.to_dict()))
    assert [t["config"]["worker_method"] for t in data["trials"]] == ["process", "thread"]
    assert not threads.worker_uss_mb and len(procs.worker_uss_mb) == 2  # no worker processes with threads
    assert threads.total_pss_mb is not None and procs.total_pss_mb is not None
    assert threads.total_pss_mb < procs.total_pss_mb, (threads.total_pss_mb, procs.total_pss_mb)
    # The reason's numbers are the trials' own.
    assert threads.cpu_percent is not None and threads.samples_per_s and procs.samples_per_s
    said = f"thread workers: {threads.cpu_percent / 100:.1f} CPUs busy of 2"
    ratio = procs.samples_per_s / threads.samples_per_s
    # The faster method's figures first (the order's rule is the unit test's; which is faster, the machine's)
    pairs = [(procs, "processes"), (threads, "threads")]
    (a, name_a), (b, name_b) = pairs[::-1] if "; thread workers are" in procs.reason else pairs
    rates = f"({a.samples_per_s:.0f} samples/s with {name_a} vs {b.samples_per_s:.0f} with {name_b};"
    pss = f"PSS {a.total_pss_mb:.0f} MB with {name_a} vs {b.total_pss_mb:.0f} MB with {name_b})"
    for t in (procs, threads):
        assert said in t.reason and pss in t.reason and rates in t.reason, t.reason
    assert ratio > 0


@pytest.mark.unit
def test_thread_workers_are_never_transport_bound_and_load_in_the_training_process() -> None:
    from loadertop.core.engine.verdict.reasons import bound_phrase
    from loadertop.core.engine.verdict.transport_bound import transport_share
    from loadertop.core.model.results import Ceiling, MachineInfo

    ceiling = Ceiling(32, 1100.0, kind="transport", num_workers=2, pin_memory=False, batches_per_s=1100 / 32)
    procs, threads = _trial("process", 1050.0, 150.0, 220.0), _trial("thread", 1050.0, 97.0, 130.0)
    assert transport_share(procs, [ceiling]) is not None  # the queues bound the processes' hand-off
    assert transport_share(threads, [ceiling]) is None  # threads do not use them
    machine = MachineInfo("host", "linux", "3.12", "2.6", 4, 4, None, 8192.0, 4096.0, None, None, "fork")
    assert "main-process-bound (loading in the training process at 97% CPU" in bound_phrase(threads, machine)


@pytest.mark.unit
def test_thread_workers_get_no_per_worker_cpu_figure_they_were_not_measured_for() -> None:
    from loadertop.core.engine.verdict.analysis import _bound_reason
    from loadertop.core.engine.verdict.reasons import bound_phrase
    from loadertop.core.model.results import MachineInfo

    machine = MachineInfo("host", "linux", "3.12", "2.6", 8, 8, None, 8192.0, 4096.0, None, None, "fork")
    io = {"cpu_percent": 60.0, "main_cpu_percent": 60.0, "stall_fraction": 0.7}  # I/O-bound: most CPUs idle
    threads = replace(_trial("thread", 500.0, 60.0, 130.0, workers=4), **io)
    # a graph's thread mappers kept without --worker-method: the config says process, no worker process started
    kept = replace(_trial("process", 500.0, 60.0, 130.0, workers=4), worker_processes=0, **io)
    for t in (threads, kept):
        said = bound_phrase(t, machine)
        assert said == "I/O-bound (0.6/8 CPUs, the training process with its thread workers at 60% CPU)", said
        reason = _bound_reason(t, [t], "tail", machine)
        assert "CPU each" not in reason and "the training process with its thread workers at 60% CPU" in reason
    procs = replace(
        _trial("process", 500.0, 60.0, 130.0, workers=4), worker_processes=4, **{**io, "main_cpu_percent": 20.0}
    )
    assert bound_phrase(procs, machine) == "I/O-bound (0.6/8 CPUs, workers at 10% CPU each)"  # measured processes


def test_an_iterable_dataset_with_thread_workers_is_refused_in_one_line() -> None:
    args = ("--dataset", "tests/data/iterables.py:sharded", "--workers", "2", "--trial-seconds", "1")
    assert refused(["-m", "loadertop"], *args) == [
        "loadertop: error: --worker-method thread takes map-style datasets only; this one is an IterableDataset"
    ]


@pytest.mark.unit
def test_the_adaptive_search_tries_thread_workers_at_its_choice() -> None:
    from loadertop.core.engine.search.adaptive import AdaptivePlanner
    from loadertop.core.model.results import MachineInfo

    settings = Settings(workers=(0, 1, 2, 3, 4), start_methods=("fork",), worker_methods=("process", "thread"),
                        persistent_workers=(True,), search="adaptive")  # fmt: skip
    planner = AdaptivePlanner(settings)
    planner.setup(MachineInfo("h", "linux", "3.12", "2.6", 2, 2, None, 8192.0, 4096.0, None, None, "fork"), ())
    done: list[TrialResult] = []
    while (config := planner.next(done)) is not None and len(done) < 30:
        rate = 100.0 * min(config.num_workers, 2) + (50.0 if config.worker_method == "thread" else 0.0) + 100.0
        done.append(TrialResult(index=len(done), config=config, status="ok", samples_per_s=rate, spread=0.02,
                                stable=True, blocks=5, cpu_percent=150.0, stall_fraction=0.9))  # fmt: skip
    threads = [t.config for t in done if t.config.worker_method == "thread"]
    assert threads and all(c.persistent_workers is False and c.start_method is None for c in threads)
    assert any("try worker_method=thread" in s.message for s in planner.trace)
