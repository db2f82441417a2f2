"""A torchdata.nodes graph's stages: its source's items and each mapper's map function, timed in one thread.

The graph is rebuilt to run inline (trial/graph.py walks it): each mapper (ParallelMapper, Mapper) at 0 workers
with its map function passed through a timer, the source's `next` through another, Prefetchers and PinMemory nodes
left out (they only run the nodes below them in a thread of their own), every other node (a Batcher, a Filter)
copied over the new child. A sample is one item of the source: the graph's time per sample is its time over the
source's items, whatever the nodes above batch or drop.

The rounds interleave three ways of running the inline graph, block by block: plainly (the timers pass through
without reading a clock: the reference, the graph's 0-worker time), timed, and under cProfile's CPU clock (the
time by library, and the share that holds the GIL: what thread workers run one at a time). What the timers leave
of the timed time is the graph's own nodes (a Batcher's grouping, the nodes' bookkeeping).
"""

from __future__ import annotations

import copy
import cProfile
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from loadertop.core.model.stages import LibraryShare, Stage, StagesMeasurement
from loadertop.core.trial import stage_boundary
from loadertop.core.trial.graph import chain
from loadertop.core.trial.stage_hooks import Tally
from loadertop.core.trial.stage_profile import Libraries, entries, gil_share, library_shares
from loadertop.core.trial.stage_rounds import BLOCK_S, MIN_ROUNDS, Totals, rows_of
from loadertop.core.trial.stage_start import first_sample

MODES = ("plain", "hooked", "profiled_cpu")
MAX_BLOCK = 64  # root items in a block at most
KINDS = (("collate", "collate"), ("decode", "decode"), ("read|load|open", "read"), ("token", "tokenize"))


class Step:
    """A map function or the source's `next`, called through: counted always, timed while its tally records."""

    def __init__(self, inner: Callable[..., Any], tally: Tally, count: list[int] | None = None) -> None:
        self.inner = inner
        self.tally = tally
        self.count = count

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.count is not None:
            self.count[0] += 1
        if not self.tally.recording[0]:
            return self.inner(*args, **kwargs)
        wall, cpu = time.perf_counter(), time.process_time()
        out = self.inner(*args, **kwargs)
        self.tally.add(time.perf_counter() - wall, time.process_time() - cpu, out)
        return out


def fn_name(fn: Any) -> str:
    """A map function by its qualified name (`Squares.__getitem__`, `default_collate`), an object by its class."""
    name = str(getattr(fn, "__qualname__", None) or type(fn).__name__)
    return "lambda" if name.endswith("<lambda>") else name


def fn_kind(name: str) -> str:
    return next((kind for pattern, kind in KINDS if re.search(pattern, name, re.IGNORECASE)), "call")


@dataclass
class Inline:
    """The graph rebuilt to run in this thread, with its timers."""

    root: Any
    tallies: list[Tally]
    count: list[int]  # the source's items so far
    recording: list[bool]
    own_nodes: list[str]  # the nodes kept as they are (their time is the graph's own)
    left_out: list[str]  # Prefetchers, PinMemory
    step_codes: set[Any] = field(default_factory=lambda: {Step.__call__.__code__})


def _map_fn(node: Any) -> Any:
    from torchdata.nodes.map import MapOverBatch

    fn = node.map_fn
    return fn.map_fn if node.prebatch is not None and isinstance(fn, MapOverBatch) else fn


def inline(graph: Any) -> Inline:
    """The graph's chain rebuilt leaf first: see the module's docstring."""
    from torchdata.nodes import ParallelMapper, PinMemory, Prefetcher

    nodes = list(reversed(chain(graph)))
    recording, count = [False], [0]
    leaf = copy.copy(nodes[0])
    source = Tally(f"source: {type(leaf).__name__}", "call", recording)
    leaf.next = Step(leaf.next, source, count)  # BaseNode.__next__ calls self.next()
    built = Inline(leaf, [source], count, recording, [], [])
    names: dict[str, int] = {}
    for node in nodes[1:]:
        if isinstance(node, Prefetcher | PinMemory):
            built.left_out.append(type(node).__name__)
        elif isinstance(node, ParallelMapper):
            fn = _map_fn(node)
            name = fn_name(fn)
            names[name] = names.get(name, 0) + 1
            label = f"map: {name}" + (f" #{names[name]}" if names[name] > 1 else "")
            tally = Tally(label, fn_kind(name), recording)
            built.tallies.append(tally)
            built.root = ParallelMapper(built.root, Step(fn, tally), num_workers=0, prebatch=node.prebatch)
        else:
            copied = copy.copy(node)
            copied.source = built.root
            built.root = copied
            built.own_nodes.append(type(node).__name__)
    built.root.reset()
    return built


@dataclass
class GraphRounds:
    """What the rounds measured: each way's totals, the CPU profile, the last item of the graph."""

    totals: dict[str, Totals]
    profile: cProfile.Profile
    item: Any = None
    elapsed_s: float = 0.0


class GraphRunner:
    """The interleaved blocks over the inline graph (see the module's docstring)."""

    def __init__(self, built: Inline) -> None:
        self.built = built
        self.block = 1
        self.rounds = GraphRounds({mode: Totals() for mode in MODES}, cProfile.Profile(time.process_time_ns, 1e-9))

    def next_item(self) -> Any:
        try:
            return next(self.built.root)
        except StopIteration:  # the end of an epoch: the next starts
            self.built.root.reset()
        try:
            return next(self.built.root)
        except StopIteration:
            raise ValueError("the graph yields no item") from None

    def run(self, seconds: float, samples: int) -> GraphRounds:
        start = time.perf_counter()
        plain = Totals()
        for mode in MODES:  # warm-up, not counted; then blocks sized to BLOCK_S
            self.timed_block(mode, plain if mode == "plain" else Totals(), warm=True)
        self.block = max(1, min(MAX_BLOCK, int(BLOCK_S / max(plain.wall_s, 1e-9))))  # the warm block: one item
        rounds = 0
        while True:
            for mode in MODES[rounds % 3 :] + MODES[: rounds % 3]:
                self.timed_block(mode, self.rounds.totals[mode])
            rounds += 1
            done = min(t.samples for t in self.rounds.totals.values()) >= samples
            if rounds >= MIN_ROUNDS and (done or time.perf_counter() - start >= seconds):
                break
        self.rounds.elapsed_s = time.perf_counter() - start
        return self.rounds

    def timed_block(self, mode: str, totals: Totals, warm: bool = False) -> None:
        """`self.block` items of the graph; the samples are the source's items they took."""
        profile = self.rounds.profile if mode == "profiled_cpu" and not warm else None
        self.built.recording[0] = mode == "hooked" and not warm
        before = self.built.count[0]
        wall, cpu = time.perf_counter(), time.process_time()
        if profile is not None:
            profile.enable()
        for _ in range(self.block):
            self.rounds.item = self.next_item()
        if profile is not None:
            profile.disable()
        totals.add(time.perf_counter() - wall, time.process_time() - cpu, self.built.count[0] - before)
        self.built.recording[0] = False


def graph_stages(built: Inline, rounds: GraphRounds) -> list[Stage]:
    """The source's and each map function's time per sample, then what they leave of the timed time (the graph's
    own nodes), all scaled by the plain CPU time over the timed one (the timers' cost taken out)."""
    hooked = rounds.totals["hooked"]
    samples = max(1, hooked.samples)
    hooked_wall, hooked_cpu = hooked.per_sample()
    stages = [Stage(t.name, t.kind, "sample", t.wall_s / samples, t.cpu_s / samples, f"{t.calls} calls timed")
              for t in built.tallies]  # fmt: skip
    rest_wall = max(0.0, hooked_wall - sum(s.wall_s or 0.0 for s in stages))
    rest_cpu = max(0.0, hooked_cpu - sum(s.cpu_s or 0.0 for s in stages))
    own = ", ".join(built.own_nodes) or "none"
    stages.append(Stage(f"the graph's own nodes ({own})", "own", "sample", rest_wall, rest_cpu,
                        "the timed time the source and the map functions leave"))  # fmt: skip
    plain_cpu = rounds.totals["plain"].per_sample()[1]
    scale = min(1.0, plain_cpu / hooked_cpu) if hooked_cpu > 0 else 1.0
    return [Stage(s.name, s.kind, s.part, (s.wall_s or 0.0) * scale, (s.cpu_s or 0.0) * scale, s.note) for s in stages]


def graph_libraries(rounds: GraphRounds, built: Inline) -> tuple[tuple[LibraryShare, ...], float | None]:
    """The profile's time by library (1% or more), and the share of it that holds the GIL."""
    stats = entries(rounds.profile)
    shares = library_shares(stats.values(), Libraries(stats), built.step_codes)
    libraries = tuple(LibraryShare(name, share) for name, share in shares if share >= 0.01)
    return libraries, gil_share(rounds.profile, built.step_codes)


def describe_chain(graph: Any) -> str:
    return " → ".join(type(node).__name__ for node in reversed(chain(graph)))


def measure_graph(spec: str, graph: Any, seconds: float, samples: int) -> StagesMeasurement:
    """A graph's stages (see the module's docstring); its last item is the batch pinned and copied to the GPU."""
    import torch

    built = inline(graph)
    _, first_s, lazy = first_sample(lambda: next(built.root))
    torch.set_num_threads(1)  # as a DataLoader worker runs; a thread mapper shares this process's threads
    runner = GraphRunner(built)
    rounds = runner.run(seconds, samples)
    stages = graph_stages(built, rounds)
    libraries, python = graph_libraries(rounds, built)
    item = rounds.item
    rows = rows_of(item, 1)
    batch_bytes, tensors, float_images = stage_boundary.batch_facts(item)
    plain_wall, plain_cpu = rounds.totals["plain"].per_sample()
    hooked_cpu = rounds.totals["hooked"].per_sample()[1]
    profiled_cpu = rounds.totals["profiled_cpu"].per_sample()[1]
    notes = [
        "a torchdata.nodes graph: its source and map functions timed with the graph run inline (mappers at 0 "
        "workers" + (f", {', '.join(built.left_out)} left out" if built.left_out else "") + "); no hand-over "
        "measured: its mappers pass items within their own threads or processes, not through a DataLoader's",
        "the first sample: the graph's first item",
    ]
    return StagesMeasurement(
        spec=spec, dataset=f"graph {describe_chain(graph)}", length=None, iterable=True, batch_size=rows,
        samples=rounds.totals["plain"].samples, elapsed_s=rounds.elapsed_s, sample_wall_s=plain_wall,
        sample_cpu_s=plain_cpu, loader_wall_s=plain_wall, loader_cpu_s=plain_cpu,
        stages=(*stages, stage_boundary.measure_pin(item, rows), stage_boundary.measure_to_device(item, rows)),
        libraries=libraries, hooks_overhead=hooked_cpu / plain_cpu - 1.0 if plain_cpu > 0 else None,
        profile_overhead=profiled_cpu / plain_cpu - 1.0 if plain_cpu > 0 else None, batch_bytes=batch_bytes,
        tensors=tensors, float_image_bytes=float_images, decoded_bytes=None, first_sample_s=first_s,
        worker_first_batch_s=None, main_first_batch_s=None, lazy_imports=lazy, cuda=torch.cuda.is_available(),
        notes=tuple(notes), gil_share=python, reference="the graph run inline, its mappers at 0 workers",
    )  # fmt: skip
