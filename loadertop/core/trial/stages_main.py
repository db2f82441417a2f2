"""`python -m loadertop.core.trial.stages_main`: the child process of `loadertop stages` (imports torch and the
user's code). It reads one StagesRequest on stdin, builds the dataset from its spec, measures where a sample's time
goes (0 workers, one process) and answers on stdout through the stages protocol (model/stages_protocol.py).

The order matters: a fresh worker is timed before this process touches a sample (it must pay what a fresh worker
pays), then the first sample with the imports it makes, then the rounds, then the batch's way past the 0-worker
time. The user's own prints go to stderr: stdout carries the protocol only.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

import torch
from torch.utils.data import DataLoader, IterableDataset, default_collate

from loadertop.core.datasets.errors import SpecError, one_line
from loadertop.core.datasets.fixes import bad_data
from loadertop.core.datasets.spec import Loaded, load_spec
from loadertop.core.model.stages import LazyImport, Stage, StagesMeasurement
from loadertop.core.model.stages_protocol import (
    STAGES_PROTOCOL_VERSION,
    StagesFailed,
    StagesMessage,
    StagesReady,
    StagesRequest,
    decode,
    encode,
)
from loadertop.core.trial import stage_boundary, stage_replay, stage_split
from loadertop.core.trial.graph import is_graph
from loadertop.core.trial.procs import DieWithParent, die_with_parent
from loadertop.core.trial.stage_graph import measure_graph
from loadertop.core.trial.stage_hooks import find_hooks
from loadertop.core.trial.stage_profile import gil_share, split_profile
from loadertop.core.trial.stage_rounds import Fetcher, RoundRunner, Rounds
from loadertop.core.trial.stage_start import first_batch_s, first_sample

# DataLoader arguments a factory may set that the measurement cannot keep: it pins nothing and waits on no timeout.
DROPPED = ("pin_memory_device", "timeout")


class DataFailure(Exception):
    """The dataset fails on its samples or its first batch (one line, with the fix when one is known)."""


def loader_factory(loaded: Loaded, batch_size: int) -> Callable[[int], DataLoader[Any]]:
    """A torch DataLoader over the dataset with the factory's own arguments, at `workers` workers."""
    extra = {key: value for key, value in loaded.extra.items() if key not in DROPPED}

    def make(workers: int) -> DataLoader[Any]:
        kwargs = dict(extra)
        if "batch_sampler" not in kwargs:
            kwargs["batch_size"] = batch_size
        if workers:
            kwargs["worker_init_fn"] = DieWithParent(extra.get("worker_init_fn"), direct_child=True)
        return DataLoader(loaded.dataset, num_workers=workers, **kwargs)

    return make


def _error(exc: BaseException) -> str:
    return one_line(f"{type(exc).__name__}: {exc}")


@dataclass(frozen=True)
class StartFigures:
    worker_first_batch_s: float | None
    first_sample_s: float
    lazy_imports: tuple[LazyImport, ...]
    main_first_batch_s: float
    notes: tuple[str, ...]


def start_figures(loaded: Loaded, make: Callable[[int], DataLoader[Any]], fetch: Fetcher) -> StartFigures:
    """The fresh worker's first batch, the first sample and its imports, then a warm 0-worker first batch."""
    notes: list[str] = []
    try:
        worker_first: float | None = first_batch_s(lambda: make(1))
    except Exception as exc:
        worker_first = None
        notes.append(f"worker start not measured: a 1-worker loader failed ({_error(exc)})")
    try:
        _, first_s, lazy = first_sample(fetch)
    except Exception as exc:
        raise DataFailure(bad_data(_error(exc), "the first sample")) from exc
    torch.set_num_threads(1)  # as a DataLoader worker runs
    try:
        main_first = first_batch_s(lambda: make(0))
    except Exception as exc:
        raise DataFailure(bad_data(_error(exc), "the first batch")) from exc
    if loaded.loader_cls is not None:
        notes.append(f"measured through torch's DataLoader with the {loaded.loader_name}'s arguments")
    return StartFigures(worker_first, first_s, lazy, main_first, tuple(notes))


def boundary_stages(
    rounds: Rounds, collate: Callable[[list[Any]], Any], batch_size: int, seconds: float
) -> tuple[list[Stage], tuple[str, ...]]:
    """The transfer (a real sample, collated), pin_memory and the copy to the GPU (the last 0-worker batch)."""
    if rounds.batch is None or not rounds.rows or not rounds.kept:
        return [], ("no batch to measure the transfer with",)
    init = DieWithParent(None, direct_child=True)
    collate_cpu = rounds.totals["collate"].per_sample()[1]
    budget = min(1.0, max(0.3, seconds / 5))
    try:
        stages = stage_boundary.measure_transfer(rounds.kept[-1], collate, batch_size, collate_cpu, budget, init)
        notes: tuple[str, ...] = ()
    except Exception as exc:  # a batch the worker cannot hand over (a custom type that does not pickle)
        stages, notes = [], (f"transfer not measured: {_error(exc)}",)
    return [*stages, stage_boundary.measure_pin(rounds.batch, rounds.rows),
            stage_boundary.measure_to_device(rounds.batch, rounds.rows)], notes  # fmt: skip


def measure(request: StagesRequest) -> StagesMeasurement:
    loaded = load_spec(request.spec, request.dataset_args)
    if is_graph(loaded.dataset):
        try:
            return measure_graph(request.spec, loaded.dataset, request.seconds, request.samples)
        except Exception as exc:
            raise DataFailure(bad_data(_error(exc), "the graph's items")) from exc
    dataset, iterable = loaded.dataset, isinstance(loaded.dataset, IterableDataset)
    make = loader_factory(loaded, request.batch_size)
    fetch = Fetcher(dataset, iterable)
    start = start_figures(loaded, make, fetch)
    hooks = find_hooks(dataset)
    collate = loaded.extra.get("collate_fn") or default_collate
    runner = RoundRunner(fetch, lambda: iter(make(0)), collate, hooks, request.batch_size)
    try:
        rounds = runner.run(request.seconds, request.samples)
    except Exception as exc:
        raise DataFailure(bad_data(_error(exc), "a sample")) from exc
    finally:
        hooks.restore()
    split = split_profile(rounds.profile_wall, rounds.profile_cpu, Fetcher.__call__.__code__, hooks.wrapper_codes())
    boundary, notes = boundary_stages(rounds, collate, request.batch_size, request.seconds)
    batch_bytes, tensors, float_images = stage_boundary.batch_facts(rounds.batch)
    hooks_overhead, profile_overhead = stage_split.overheads(rounds, hooks)
    plain_wall, plain_cpu = rounds.totals["plain"].per_sample()
    loader_wall, loader_cpu = rounds.totals["loader"].per_sample()
    sample = stage_split.sample_stages(rounds, hooks, split)
    largest = stage_replay.largest_hooked(sample, hooks)
    budget = min(1.0, max(0.3, request.seconds / 5))
    what_if = (stage_replay.replay(hooks, largest, fetch, lambda: iter(make(0)), request.batch_size, budget)
               if largest else None)  # fmt: skip
    return StagesMeasurement(
        spec=request.spec, dataset=type(dataset).__name__, length=None if iterable else len(dataset),
        iterable=iterable, batch_size=request.batch_size, samples=rounds.totals["plain"].samples,
        elapsed_s=rounds.elapsed_s, sample_wall_s=plain_wall, sample_cpu_s=plain_cpu, loader_wall_s=loader_wall,
        loader_cpu_s=loader_cpu, stages=(*sample, *boundary),
        libraries=stage_split.libraries(split), hooks_overhead=hooks_overhead, profile_overhead=profile_overhead,
        batch_bytes=batch_bytes, tensors=tensors, float_image_bytes=float_images,
        decoded_bytes=stage_split.decoded_bytes(hooks), first_sample_s=start.first_sample_s,
        worker_first_batch_s=start.worker_first_batch_s, main_first_batch_s=start.main_first_batch_s,
        lazy_imports=start.lazy_imports, cuda=torch.cuda.is_available(), notes=(*start.notes, *notes),
        gil_share=gil_share(rounds.profile_cpu, {Fetcher.__call__.__code__, *hooks.wrapper_codes()}),
        replay=what_if,
    )  # fmt: skip


def answer(request: StagesRequest) -> StagesMessage:
    """The measurement, or why there is none."""
    try:
        return measure(request)
    except SpecError as exc:
        return StagesFailed("spec", str(exc))
    except DataFailure as exc:
        return StagesFailed("data", one_line(str(exc)))
    except Exception as exc:
        traceback.print_exc()
        return StagesFailed("bug", _error(exc))


def main(stdin: TextIO = sys.stdin) -> int:
    die_with_parent()
    channel = os.fdopen(os.dup(1), "w", buffering=1)  # the protocol's; fd 1 becomes stderr for the user's prints
    os.dup2(2, 1)
    request = decode(stdin.readline())
    if not isinstance(request, StagesRequest):
        print(f"loadertop stages: expected a request, got {type(request).__name__}", file=sys.stderr)
        return 1
    channel.write(encode(StagesReady(STAGES_PROTOCOL_VERSION, os.getpid())))
    channel.write(encode(answer(request)))
    channel.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
