"""`loadertop stages` on the kinds of pipeline beyond a map-style Dataset: an IterableDataset (profiled through its
iterator), WebDataset tar shards and Hugging Face streaming (the read apart from the decode, on shards built here),
a torchdata.nodes graph (its source and map functions), the thread workers' ceiling (the GIL), and the line attach
and run print in place of a live job's stages."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from loadertop.core.engine.verdict.stage_threads import NAME, thread_ceiling
from loadertop.core.model.stages import Stage, StagesMeasurement
from loadertop.core.model.stages_protocol import decode, encode

DATA = str(Path(__file__).with_name("stage_datasets.py"))
ITERABLES = str(Path(__file__).parent / "data" / "iterables.py")


def measured_in_process(dataset: Any) -> tuple[Any, list[Stage]]:
    """The rounds the stages child runs (0 workers, one process), run here on `dataset`: its profile's split and
    its sample stages."""
    from torch.utils.data import DataLoader, IterableDataset, default_collate

    from loadertop.core.trial.stage_hooks import find_hooks
    from loadertop.core.trial.stage_profile import split_profile
    from loadertop.core.trial.stage_rounds import Fetcher, RoundRunner
    from loadertop.core.trial.stage_split import sample_stages

    fetch = Fetcher(dataset, isinstance(dataset, IterableDataset))
    hooks = find_hooks(dataset)
    runner = RoundRunner(fetch, lambda: iter(DataLoader(dataset, batch_size=8)), default_collate, hooks, 8)
    rounds = runner.run(0.3, 24)
    split = split_profile(rounds.profile_wall, rounds.profile_cpu, Fetcher.__call__.__code__, hooks.wrapper_codes())
    return split, sample_stages(rounds, hooks, split)


def test_an_iterable_dataset_is_profiled_through_its_iterator() -> None:
    """The Stream of tests/data/iterables.py burns 0.5 ms of CPU per item inside its __iter__: that call is the
    largest stage, found by profiling next(iterator)."""
    from loadertop.core.datasets.spec import load_spec

    split, stages = measured_in_process(load_spec(f"{ITERABLES}:sharded", {}).dataset)
    assert split is not None
    # burn_cpu spins on time.thread_time: the profile splits it into its own loop and that callee, whose shares
    # move with the machine's load; together they are the iterator's work
    names = [s.name for s in stages]
    assert any(name.startswith("burn_cpu") for name in names), names
    sample = [s for s in stages if s.kind != "collate"]
    burn = sum(s.cpu_s or 0.0 for s in sample if s.name.startswith(("burn_cpu", "time.thread_time")))
    assert burn >= 0.8 * sum(s.cpu_s or 0.0 for s in sample), [(s.name, s.cpu_s) for s in stages]


def test_webdataset_shards_show_the_tar_read_apart_from_the_decode(tmp_path: Path) -> None:
    pytest.importorskip("webdataset", reason="pip install webdataset (the scale extra)")
    from stage_datasets import write_wds

    from loadertop.core.datasets.spec import load_spec

    dataset = load_spec(f"webdataset:{write_wds(tmp_path)}", {}).dataset
    _, stages = measured_in_process(dataset)
    by_kind = {s.kind: s for s in stages}
    assert by_kind["read"].name.startswith("read (tar shards, webdataset:"), by_kind["read"]
    # The libraries are named in the order of their measured shares: PIL's and numpy's are close
    assert by_kind["decode"].name.startswith("decode (WebDatasetShards.decode → "), by_kind["decode"]
    assert "PIL" in by_kind["decode"].name, by_kind["decode"]
    assert (by_kind["read"].cpu_s or 0.0) > 0 and (by_kind["decode"].cpu_s or 0.0) > 0


def test_hf_streaming_shows_the_arrow_read_apart_from_the_formatting(tmp_path: Path) -> None:
    pytest.importorskip("datasets", reason="pip install datasets (the scale extra)")
    from stage_datasets import write_hf

    from loadertop.core.datasets.spec import load_spec

    dataset = load_spec(f"hf:{write_hf(tmp_path / 'saved')}:streaming=1", {}).dataset
    _, stages = measured_in_process(dataset)
    by_kind = {s.kind: s for s in stages}
    assert by_kind["read"].name.startswith("read (Arrow batches, datasets:"), by_kind["read"]
    assert by_kind["decode"].name.startswith("decode (Arrow rows to tensors, datasets:"), by_kind["decode"]
    assert (by_kind["read"].cpu_s or 0.0) > 0 and (by_kind["decode"].cpu_s or 0.0) > 0


def test_a_graph_is_measured_by_its_source_and_map_functions() -> None:
    """A torchdata.nodes graph whose thread mapper spins 1 ms of CPU per sample, measured as the stages child does
    (here, in this process): that map function is the largest stage with about that CPU time, beside the source,
    the collate and the Batcher; the 0-worker time is the graph run inline; the thread workers' ceiling is given."""
    pytest.importorskip("torchdata.nodes", reason="pip install torchdata (the graph extra)")
    import torch
    from stage_datasets import graph

    from loadertop.core.engine.verdict.stage_verdict import judge_stages
    from loadertop.core.trial.stage_graph import measure_graph

    threads = torch.get_num_threads()
    try:
        measured = measure_graph("stage_datasets.py:graph", graph(), seconds=0.3, samples=48)
    finally:
        torch.set_num_threads(threads)
    report = judge_stages(decode(encode(measured)), cpus=2, mem_available_mb=None)
    names = [row.stage.name for row in report.rows if row.stage.part == "sample"]
    assert {"source: SamplerWrapper", "map: Decode", "map: default_collate"} <= set(names), names
    assert "the graph's own nodes (Batcher)" in names, names
    decode_row = next(row for row in report.rows if row.stage.name == "map: Decode")
    assert decode_row.stage.kind == "decode" and decode_row.stage.cpu_s == pytest.approx(0.001, rel=0.3)
    assert max(report.rows, key=lambda row: row.cpu_share or 0.0) is decode_row
    assert report.measurement.reference.startswith("the graph run inline")
    assert report.measurement.dataset.startswith("graph SamplerWrapper → ParallelMapper")
    assert any(c.name == NAME for c in report.ceilings) and report.measurement.gil_share is not None


def test_a_graph_whose_map_function_fails_is_a_data_failure_in_one_line() -> None:
    pytest.importorskip("torchdata.nodes", reason="pip install torchdata (the graph extra)")
    from loadertop.core.model.stages_protocol import StagesFailed, StagesRequest
    from loadertop.core.trial.stages_main import answer

    failed = answer(StagesRequest(f"{DATA}:broken_graph", {}, 0.2, 8, 8))
    assert isinstance(failed, StagesFailed) and failed.kind == "data"
    assert "the graph's items: ValueError: corrupt sample 0" in failed.error and "\n" not in failed.error


# -- fixed figures ------------------------------------------------------------------------------------------------


@pytest.mark.unit
def test_the_thread_ceiling_is_the_range_the_gil_allows() -> None:
    """1 CPU ms per sample, a quarter of it holding the GIL, on 8 CPUs: 4000 samples/s if every C call releases
    the GIL (the held quarter runs one at a time), 1000 (one CPU) if none does; capped by the CPUs."""
    stages = [Stage("decode", "decode", "sample", 0.001, 0.001)]
    (ceiling,) = thread_ceiling(stages, 8, 0.25)
    assert ceiling.samples_per_s == pytest.approx(4000) and "~1000 samples/s, one CPU, if none" in ceiling.basis
    assert thread_ceiling(stages, 2, 0.25)[0].samples_per_s == pytest.approx(2000)  # the CPUs' ceiling is lower
    assert thread_ceiling(stages, 8, None) == ()


def test_the_gil_share_tells_python_code_from_torch_ops() -> None:
    """A Python loop holds the GIL all its time; torch's matrix product is C code that releases it."""
    import cProfile

    import torch
    from stage_datasets import spin_cpu

    from loadertop.core.trial.stage_profile import gil_share

    def profiled(work: Any) -> float | None:
        profile = cProfile.Profile(time.process_time_ns, 1e-9)
        profile.enable()
        work()
        profile.disable()
        return gil_share(profile, set())

    a = torch.rand(256, 256)
    python, torch_op = profiled(lambda: spin_cpu(0.02)), profiled(lambda: [torch.mm(a, a) for _ in range(20)])
    assert python is not None and python > 0.9
    assert torch_op is not None and torch_op < 0.5


@pytest.mark.unit
def test_a_measurement_from_a_child_without_the_gil_share_still_decodes() -> None:
    """The protocol's fields added with defaults: a line without them reads as not measured."""
    from test_stages import measurement

    line = json.loads(encode(measurement(gil_share=0.5)))
    del line["gil_share"], line["reference"]
    old = decode(json.dumps(line))
    assert isinstance(old, StagesMeasurement) and old.gil_share is None
    assert old.reference == "a DataLoader with the dataset's collate"
