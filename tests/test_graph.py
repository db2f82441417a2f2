"""A torchdata.nodes pipeline as the dataset: the graph walked and rebuilt per trial, the check's refusals,
the snippet of constructor lines, and a real headless sweep of tests/graph_pipeline.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torchdata.nodes")

from torch.utils.data import SequentialSampler, default_collate
from torchdata.nodes import (
    Batcher,
    Loader,
    Mapper,
    MultiNodeWeightedSampler,
    ParallelMapper,
    Prefetcher,
    SamplerWrapper,
)

from loadertop.core.datasets.errors import SpecError
from loadertop.core.datasets.spec import check_dataset
from loadertop.core.engine.verdict.snippet import graph_snippet, parse_node
from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.trial.graph import (
    chain,
    child_of,
    describe,
    hidden_children,
    rebuild,
    summary,
)

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from graph_pipeline import Squares  # noqa: E402


def pipeline(length: int = 256, workers: int = 2, **mapper: Any) -> Prefetcher:
    """tests/graph_pipeline.py's shape, over a short dataset, in order (a SequentialSampler)."""
    dataset = Squares(length)
    node: Any = SamplerWrapper(SequentialSampler(dataset))
    node = ParallelMapper(node, dataset.__getitem__, num_workers=workers, method="thread", **mapper)
    node = Batcher(node, batch_size=32)
    node = Mapper(node, default_collate)
    return Prefetcher(node, prefetch_factor=2)


def names(graph: Any) -> list[str]:
    return [type(n).__name__ for n in chain(graph)]


@pytest.mark.unit
def test_the_walk_finds_the_mappers_with_workers_and_the_prefetcher() -> None:
    graph = pipeline()
    assert names(graph) == ["Prefetcher", "ParallelMapper", "Batcher", "ParallelMapper", "SamplerWrapper"]
    # The inline Mapper (the collate) is not swept: only the mapper built with workers, and the Prefetcher.
    assert describe(graph) == ('ParallelMapper(num_workers=2, in_order=True, method="thread")',
                               "Prefetcher(prefetch_factor=2)")  # fmt: skip
    assert "SamplerWrapper -> ParallelMapper -> Batcher -> ParallelMapper -> Prefetcher" in summary(graph)
    assert hidden_children(graph) == []


@pytest.mark.unit
def test_a_rebuild_sets_the_trials_values_and_leaves_the_users_graph_alone() -> None:
    graph = pipeline()
    before = chain(graph)
    new = rebuild(graph, TrialConfig(4, 32, prefetch_factor=4, in_order=False))
    assert describe(new) == ('ParallelMapper(num_workers=4, in_order=False, method="thread")',
                             "Prefetcher(prefetch_factor=4)")  # fmt: skip
    after = chain(new)
    assert after[1].num_workers == 0  # the collate stays inline, rebuilt only because its child changed
    assert after[3].num_workers == 4 and not after[3].in_order
    assert all(a is not b for a, b in zip(after[:4], before[:4], strict=True))  # every node above a change is new
    assert after[4] is before[4]  # the sampler below the mapper is the user's own
    assert after[2].source is after[3] and before[2].source is before[3]  # the copy re-pointed, not the original
    assert chain(graph) == before and describe(graph)[0].startswith("ParallelMapper(num_workers=2")


@pytest.mark.unit
def test_the_rebuilt_graph_runs_an_epoch_and_another_through_a_loader() -> None:
    loader = Loader(rebuild(pipeline(length=256), TrialConfig(0, 32)))  # 0 workers: torchdata maps inline
    for _ in range(2):  # each iter() is a new epoch, as the measured loop's boundary needs
        batches = list(loader)
        assert len(batches) == 256 // 32
        assert batches[0][0].shape == (32, 16) and batches[0][1].tolist()[:3] == [0, 1, 4]


@pytest.mark.unit
def test_prebatch_is_unwrapped_and_max_concurrent_held_under_the_workers() -> None:
    graph = pipeline(workers=3, prebatch=4, max_concurrent=3)
    assert names(graph)[:3] == ["Prefetcher", "ParallelMapper", "Batcher"]
    assert type(child_of(chain(graph)[3])).__name__ == "SamplerWrapper"  # past the mapper's own Batcher
    new = rebuild(graph, TrialConfig(2, 32, prefetch_factor=2))
    mapper = chain(new)[3]
    assert (mapper.num_workers, mapper.max_concurrent, mapper.prebatch) == (2, 2, 4)
    assert mapper.map_fn.map_fn == chain(graph)[3].map_fn.map_fn  # the user's function, wrapped once, not twice
    assert len(list(Loader(rebuild(graph, TrialConfig(0, 32))))) == 256 // 32


@pytest.mark.unit
def test_a_loader_stays_a_loader_and_its_mappers_keep_their_method() -> None:
    user = Loader(pipeline(), restart_on_stop_iteration=False)
    new = rebuild(user, TrialConfig(1, 32))
    assert isinstance(new, Loader) and not new.restart_on_stop_iteration and new.root is not user.root
    # the DataLoader axis's default (process) never turns a thread mapper into processes
    assert chain(rebuild(user, TrialConfig(1, 32, worker_method="process")))[1].method == "thread"


@pytest.mark.unit
def test_nodes_with_children_off_source_are_named_and_left_alone() -> None:
    sources = {"a": pipeline(), "b": pipeline()}
    mixed = Prefetcher(MultiNodeWeightedSampler(sources, {"a": 0.5, "b": 0.5}), prefetch_factor=2)
    assert hidden_children(mixed) == ["MultiNodeWeightedSampler"]
    assert "left as they are (children not at .source): MultiNodeWeightedSampler" in summary(mixed)
    new = rebuild(mixed, TrialConfig(2, 32, prefetch_factor=4))
    assert describe(new) == ("Prefetcher(prefetch_factor=4)",)
    assert chain(new)[1] is chain(mixed)[1]


@pytest.mark.unit
def test_a_factory_may_return_a_graph_or_a_loader_but_no_loader_arguments_beside_it() -> None:
    graph = pipeline()
    assert check_dataset(graph, "f.py:g") == (graph, {})
    loader = Loader(graph)
    assert check_dataset(loader, "f.py:g")[0] is loader
    with pytest.raises(SpecError, match="a graph takes no DataLoader arguments"):
        check_dataset({"dataset": graph, "drop_last": True}, "f.py:g")


@pytest.mark.unit
def test_build_loader_gives_a_graph_loader_whose_epoch_ends_by_itself() -> None:
    from loadertop.core.trial.loader import build_loader

    settings = Settings(dataset=f"{HERE / 'graph_pipeline.py'}:factory", workers=(0,))
    built = build_loader(settings, TrialConfig(0, 32))
    assert isinstance(built.loader, Loader) and built.iterable and built.control is None and not built.extra_keys
    assert describe(built.loader) == ('ParallelMapper(num_workers=0, in_order=True, method="thread")',
                                      'ParallelMapper(num_workers=0, in_order=True, method="thread")',
                                      "Prefetcher(prefetch_factor=2)")  # fmt: skip


@pytest.mark.unit
def test_the_snippet_is_the_swept_nodes_constructors_at_the_chosen_values() -> None:
    graph = ('ParallelMapper(num_workers=2, in_order=True, method="thread")', "Prefetcher(prefetch_factor=2)")
    chosen = TrialConfig(4, 32, prefetch_factor=4, start_method="fork", in_order=False)
    assert graph_snippet(graph, chosen, "fork") == (
        'ParallelMapper(source, map_fn, num_workers=4, in_order=False, method="thread")\n'
        "Prefetcher(source, prefetch_factor=4)"
    )
    # 0 workers: no prefetch_factor in the configuration, so the graph's own stays.
    assert graph_snippet(graph, TrialConfig(0, 32), "fork").splitlines()[1] == "Prefetcher(source, prefetch_factor=2)"
    process = ('ParallelMapper(num_workers=8, in_order=True, method="process", max_concurrent=8, prebatch=16)',)
    line = graph_snippet(process, TrialConfig(2, 32, 2, start_method="spawn"), "fork")
    assert line == (
        'ParallelMapper(source, map_fn, num_workers=2, method="process", multiprocessing_context="spawn", '
        "max_concurrent=2, prebatch=16)"
    )
    assert parse_node("Prefetcher(prefetch_factor=3)") == ("Prefetcher", {"prefetch_factor": "3"})


def run_headless(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "loadertop", "--headless", "--out", str(tmp_path / "runs"),
           "--dataset", str(HERE / "graph_pipeline.py") + ":factory", *args]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})


def test_a_graph_pipeline_is_swept_and_its_snippet_names_the_chosen_values(tmp_path: Path) -> None:
    out = run_headless(tmp_path, "--workers", "0,2", "--trial-seconds", "1", "--json", str(tmp_path / "out.json"))
    assert out.returncode == 0, out.stderr
    result = json.loads((tmp_path / "out.json").read_text())
    assert all(t["status"] == "ok" for t in result["trials"]), [t["error"] for t in result["trials"]]
    assert {t["config"]["num_workers"] for t in result["trials"]} == {0, 2}
    assert result["graph"] == ['ParallelMapper(num_workers=2, in_order=True, method="thread")',
                               "Prefetcher(prefetch_factor=2)"]  # fmt: skip
    rec = result["recommendation"]
    workers = rec["config"]["num_workers"]
    mapper, prefetcher = rec["snippet"].splitlines()
    assert mapper == f'ParallelMapper(source, map_fn, num_workers={workers}, method="thread")'
    assert prefetcher == "Prefetcher(source, prefetch_factor=2)"
    assert "DataLoader(" not in out.stdout and mapper in out.stdout
    assert "torchdata.nodes graph SamplerWrapper -> ParallelMapper" in out.stderr
    assert result["settings"]["worker_methods"] == []  # not given: the mappers kept their own method


def test_several_batch_sizes_on_a_graph_are_refused_in_one_line(tmp_path: Path) -> None:
    out = run_headless(tmp_path, "--workers", "0", "--batch-size", "16,32")
    assert out.returncode == 2
    errors = [line for line in out.stderr.splitlines() if "error" in line]
    assert errors == ["loadertop: error: the torchdata.nodes graph fixes the batch size (its Batcher), so "
                      "--batch-size cannot be swept"]  # fmt: skip
    assert "Traceback" not in out.stderr


@pytest.mark.unit
def test_a_process_mapper_gets_the_trials_start_method_and_a_thread_mapper_none() -> None:
    dataset = Squares(64)
    node = ParallelMapper(SamplerWrapper(SequentialSampler(dataset)), dataset.__getitem__, num_workers=2,
                          method="process", multiprocessing_context="forkserver")  # fmt: skip
    mapper = chain(rebuild(node, TrialConfig(3, 32, 2, start_method="spawn")))[0]  # constructed, never started
    assert (mapper.num_workers, mapper.method, mapper.multiprocessing_context) == (3, "process", "spawn")
    assert chain(rebuild(node, TrialConfig(0, 32)))[0].multiprocessing_context == "forkserver"  # the user's own
    threads = chain(rebuild(pipeline(), TrialConfig(2, 32, 2, start_method="spawn")))[3]
    assert threads.method == "thread" and threads.multiprocessing_context is None


@pytest.mark.unit
def test_the_check_refuses_what_a_graph_fixes_or_has_no_place_for_and_describes_the_rest() -> None:
    from loadertop.core.trial.check import check_graph

    graph = pipeline()
    refused = {
        "--batch-size cannot be swept": Settings(batch_sizes=(16, 32)),
        "--pin-memory and --persistent-workers do not apply": Settings(pin_memory=(True,), persistent_workers=(True,)),
        "--worker-threads do not apply": Settings(worker_threads=(None, 2)),
        "drop --ranks": Settings(ranks=2),
    }
    for words, settings in refused.items():
        with pytest.raises(SpecError, match=words):
            check_graph(graph, settings, 0.0)
    checked = check_graph(graph, Settings(dataset="tests/graph_pipeline.py:factory"), 0.0)
    assert checked.ok and checked.iterable and checked.length is None and checked.graph == describe(graph)
    assert checked.summary.startswith("torchdata.nodes graph SamplerWrapper") and "method swept" not in checked.summary
    # --worker-method applies to a graph: its mappers' method is swept
    swept = check_graph(graph, Settings(worker_methods=("process", "thread"), start_methods=("forkserver",)), 0.0)
    assert swept.ok and swept.summary.endswith("mappers' method swept: process, thread")
    # Forked, process mappers are cautioned against (torchdata starts them after its reader thread); threads are not
    forked = check_graph(graph, Settings(worker_methods=("process", "thread"), start_methods=("fork",)), 0.0)
    assert forked.summary.endswith("(--start-method forkserver or spawn avoids that)")
    assert "process mappers forked" not in check_graph(graph, Settings(start_methods=("fork",)), 0.0).summary


@pytest.mark.unit
def test_with_worker_method_given_the_rebuild_takes_the_configs_method() -> None:
    threads = pipeline()  # its mapper is built with method="thread"
    as_process = chain(rebuild(threads, TrialConfig(3, 32, 2, start_method="spawn"), method=True))[3]
    assert (as_process.num_workers, as_process.method, as_process.multiprocessing_context) == (3, "process", "spawn")
    kept = chain(rebuild(threads, TrialConfig(3, 32, 2, start_method="spawn")))[3]  # not given: its own
    assert (kept.method, kept.multiprocessing_context) == ("thread", None)
    dataset = Squares(64)
    procs = ParallelMapper(SamplerWrapper(SequentialSampler(dataset)), dataset.__getitem__, num_workers=2,
                           method="process", multiprocessing_context="forkserver")  # fmt: skip
    thread = chain(rebuild(procs, TrialConfig(2, 32, 2, worker_method="thread"), method=True))[0]
    assert (thread.method, thread.multiprocessing_context) == ("thread", None)  # threads have no start method
    assert chain(rebuild(procs, TrialConfig(2, 32, 2, worker_method="thread")))[0].method == "process"


@pytest.mark.unit
def test_build_loader_passes_the_method_only_when_the_axis_is_given() -> None:
    from loadertop.core.trial.loader import build_loader

    spec = f"{HERE / 'graph_pipeline.py'}:factory"
    config = TrialConfig(2, 32, 2, start_method="fork")  # worker_method "process", constructed, never started
    given = build_loader(Settings(dataset=spec, worker_methods=("process", "thread")), config)
    assert describe(given.loader)[0] == (
        'ParallelMapper(num_workers=2, in_order=True, method="process", multiprocessing_context="fork")'
    )
    default = build_loader(Settings(dataset=spec), config)
    assert describe(default.loader)[0] == 'ParallelMapper(num_workers=2, in_order=True, method="thread")'
    assert Settings().worker_methods == () and {c.worker_method for c in Settings().trial_configs()} == {"process"}


@pytest.mark.unit
def test_the_snippet_names_the_chosen_method_when_it_was_swept() -> None:
    graph = ('ParallelMapper(num_workers=2, in_order=True, method="thread")', "Prefetcher(prefetch_factor=2)")
    chosen = TrialConfig(4, 32, prefetch_factor=2, start_method="spawn")
    assert graph_snippet(graph, chosen, "fork", method=True).splitlines()[0] == (
        'ParallelMapper(source, map_fn, num_workers=4, method="process", multiprocessing_context="spawn")'
    )
    assert graph_snippet(graph, chosen, "fork").splitlines()[0] == (  # not swept: the graph's own
        'ParallelMapper(source, map_fn, num_workers=4, method="thread")'
    )
    threads = TrialConfig(4, 32, prefetch_factor=2, worker_method="thread")
    process = ('ParallelMapper(num_workers=2, in_order=True, method="process", multiprocessing_context="spawn")',)
    assert graph_snippet(process, threads, "fork", method=True) == (
        'ParallelMapper(source, map_fn, num_workers=4, method="thread")'
    )


def test_a_graph_sweeps_both_worker_methods_and_its_snippet_names_the_chosen_one(tmp_path: Path) -> None:
    # forkserver: forked, a process mapper's workers copy a process whose torchdata reader thread is mid-read
    # (1 hang in 8 loaded runs of this test with fork)
    out = run_headless(tmp_path, "--workers", "2", "--worker-method", "process,thread", "--search", "grid",
                       "--start-method", "forkserver", "--trial-seconds", "1", "--no-transport",
                       "--json", str(tmp_path / "out.json"))  # fmt: skip
    assert out.returncode == 0, out.stderr
    result = json.loads((tmp_path / "out.json").read_text())
    trials = result["trials"]
    assert all(t["status"] == "ok" for t in trials), [t["error"] for t in trials]
    assert {t["config"]["worker_method"] for t in trials} == {"process", "thread"}
    processes = {t["config"]["worker_method"]: t["worker_processes"] for t in trials}
    assert processes == {"process": 2, "thread": 0}  # the process mappers' workers found, thread workers none
    assert all("CPU each" not in t["reason"] for t in trials if t["config"]["worker_method"] == "thread")
    assert result["settings"]["worker_methods"] == ["process", "thread"]
    rec = result["recommendation"]
    method = rec["config"]["worker_method"]
    assert f'method="{method}"' in rec["snippet"].splitlines()[0]
    assert "mappers' method swept: process, thread" in out.stderr and "process mappers forked" not in out.stderr
    assert {t["config"]["start_method"] for t in trials} == {"forkserver", None}
