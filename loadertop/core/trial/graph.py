"""A torchdata.nodes pipeline as the dataset: its knobs found by walking the graph, and the graph rebuilt per trial.

A factory may return a `torchdata.nodes` graph (its root BaseNode, or a `Loader` over it). loadertop walks the
`.source` links from the root, sweeps the `ParallelMapper`s' `num_workers`, `in_order` (and `method` when
--worker-method is given: without it each mapper keeps its own) and the `Prefetcher`s' `prefetch_factor`, and
rebuilds the graph bottom-up for each trial. A ParallelMapper holds its source inside its implementation from
construction on, so it is rebuilt whenever anything below it changes; the other nodes read `.source` only when
reset, so a shallow copy re-pointed at the new child will do. The graph the runner built is never changed (a
parked trial builds twice from it).

Which mappers are swept: those built with workers (`num_workers > 0`); an inline `Mapper` (a collate, say) keeps
its 0 workers. A graph with only inline mappers has them all swept. Nodes whose children are not at `.source`
(MultiNodeWeightedSampler's `source_nodes`) end the walk: they are left as they are, and named.

torchdata is imported lazily: loadertop does not need it unless a factory returns such a graph. Runs in the runner
and trial processes.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from loadertop.core.model.config import TrialConfig

# What the graph description names for the driver (Checked.graph): the constructor arguments loadertop sets.
MAPPER_ARGS = ("num_workers", "in_order", "method", "multiprocessing_context", "max_concurrent", "prebatch")


def is_graph(obj: Any) -> bool:
    """A torchdata.nodes BaseNode or Loader (False when torchdata is not installed)."""
    try:
        from torchdata.nodes import BaseNode, Loader
    except ImportError:
        return False
    return isinstance(obj, BaseNode | Loader)


def root_of(graph: Any) -> Any:
    from torchdata.nodes import Loader

    return graph.root if isinstance(graph, Loader) else graph


def child_of(node: Any) -> Any | None:
    """The node's child as the user wired it: a ParallelMapper with `prebatch` put a Batcher of its own between."""
    from torchdata.nodes import BaseNode, ParallelMapper

    source = getattr(node, "source", None)
    if isinstance(node, ParallelMapper) and node.prebatch is not None:
        source = getattr(source, "source", None)
    return source if isinstance(source, BaseNode) else None


def chain(graph: Any) -> list[Any]:
    """The nodes from the root down along `.source`, root first."""
    nodes: list[Any] = []
    node = root_of(graph)
    while node is not None and all(node is not n for n in nodes):
        nodes.append(node)
        node = child_of(node)
    return nodes


def hidden_children(graph: Any) -> list[str]:
    """Nodes of the chain that hold child nodes elsewhere than `.source`: not walked, so left as they are."""
    from torchdata.nodes import BaseNode

    def holds(value: Any) -> bool:
        if isinstance(value, BaseNode):
            return True
        if isinstance(value, Mapping):
            return any(isinstance(v, BaseNode) for v in value.values())
        return (
            isinstance(value, Sequence)
            and not isinstance(value, str | bytes)
            and any(isinstance(v, BaseNode) for v in value)
        )

    found = []
    for node in chain(graph):
        if any(holds(v) for k, v in vars(node).items() if k not in ("source", "_it")):
            found.append(type(node).__name__)
    return found


def swept(graph: Any) -> list[Any]:
    """The nodes loadertop sweeps, in pipeline order (leaf first): mappers with workers (or every mapper when none
    has any) and every Prefetcher."""
    from torchdata.nodes import ParallelMapper, Prefetcher

    nodes = list(reversed(chain(graph)))
    mappers = [n for n in nodes if isinstance(n, ParallelMapper)]
    parallel = [n for n in mappers if n.num_workers > 0] or mappers
    return [n for n in nodes if any(n is m for m in parallel) or isinstance(n, Prefetcher)]


def describe(graph: Any) -> tuple[str, ...]:
    """Each swept node with the arguments the user built it with, as constructor text (the driver's snippet and the
    results JSON read it): `ParallelMapper(num_workers=2, in_order=True, method="thread")`, `Prefetcher(...)`."""
    from torchdata.nodes import Prefetcher

    out = []
    for node in swept(graph):
        if isinstance(node, Prefetcher):
            out.append(f"Prefetcher(prefetch_factor={node.prefetch_factor})")
            continue
        args = {name: getattr(node, name) for name in MAPPER_ARGS}
        keep = [f"{k}={_text(v)}" for k, v in args.items() if v is not None or k in ("num_workers", "in_order")]
        out.append(f"ParallelMapper({', '.join(keep)})")
    return tuple(out)


def summary(graph: Any, methods: Sequence[str] = (), start_methods: Sequence[str] = ()) -> str:
    """One line for the check's notice: the chain, what is swept (the mappers' method too when `methods`, the
    --worker-method axis, is given: the described nodes name the method they were built with), what is left alone,
    and a caution when process mappers will be forked (`start_methods`, the trials' start methods)."""
    names = " -> ".join(type(n).__name__ for n in reversed(chain(graph)))
    line = f"torchdata.nodes graph {names}; sweeping {', '.join(describe(graph)) or 'nothing'}"
    if methods:
        line += f", mappers' method swept: {', '.join(methods)}"
    hidden = hidden_children(graph)
    if hidden:
        line += f"; left as they are (children not at .source): {', '.join(hidden)}"
    if "fork" in start_methods and forks_mappers(graph, methods):
        # torchdata's _ParallelMapperIter starts its reader thread, then the worker processes: forked, each child
        # copies a process whose thread is mid-read. A trial of that hung in 1 loaded run of 8 here.
        line += (
            "; process mappers forked: torchdata starts their workers after its reader thread, which can hang "
            "them (--start-method forkserver or spawn avoids that)"
        )
    return line


def forks_mappers(graph: Any, methods: Sequence[str] = ()) -> bool:
    """Whether trials start process mappers with their start method as the context: a swept mapper of
    method="process" (its own context gives way to the trial's), or --worker-method with process."""
    from torchdata.nodes import ParallelMapper

    mappers = [n for n in swept(graph) if isinstance(n, ParallelMapper)]
    if methods:
        return "process" in methods and bool(mappers)
    return any(m.method == "process" for m in mappers)


def _text(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else repr(value)


def rebuild(graph: Any, config: TrialConfig, method: bool = False) -> Any:
    """A new graph for this trial, bottom-up: swept mappers and prefetchers made anew with the trial's values,
    mappers above a changed node made anew with their own values, other nodes above it copied and re-pointed.
    `method`: --worker-method was given, so swept mappers take `config.worker_method` too (else their own).
    Returns the new root (a Loader when the user gave one)."""
    from torchdata.nodes import Loader, ParallelMapper, Prefetcher

    chosen = swept(graph)
    child: Any = None
    changed = False
    for node in reversed(chain(graph)):  # leaf first
        is_swept = any(node is n for n in chosen)
        if isinstance(node, ParallelMapper) and (is_swept or changed):
            node = _mapper(node, child if changed else child_of(node), config if is_swept else None, method)
            changed = True
        elif isinstance(node, Prefetcher):
            factor = config.prefetch_factor or node.prefetch_factor
            node = Prefetcher(child if changed else node.source, factor, node.snapshot_frequency)
            changed = True
        elif changed:
            node = copy.copy(node)
            node.source = child
        child = node
    if isinstance(graph, Loader):
        return Loader(child, restart_on_stop_iteration=graph.restart_on_stop_iteration)
    return child


def _mapper(node: Any, source: Any, config: TrialConfig | None, swept_method: bool = False) -> Any:
    """A ParallelMapper like `node` over `source`: with the trial's values when `config` is given (its worker
    method too when `swept_method`)."""
    from torchdata.nodes import ParallelMapper
    from torchdata.nodes.map import MapOverBatch

    fn = node.map_fn.map_fn if node.prebatch is not None and isinstance(node.map_fn, MapOverBatch) else node.map_fn
    workers, in_order, method = node.num_workers, node.in_order, node.method
    context, limit = node.multiprocessing_context, node.max_concurrent
    if config is not None:
        # Without --worker-method the method stays the graph's own: the config's "process" is then only the
        # DataLoader's default, and would turn every thread mapper into processes.
        workers, in_order = config.num_workers, config.in_order
        method = config.worker_method if swept_method else method
        if method == "process" and config.start_method:
            context = config.start_method
        elif method == "thread" and swept_method:
            context = None  # a process mapper swept to threads: they have no start method
        if limit is not None and workers > 0:
            limit = min(limit, workers)  # torchdata refuses max_concurrent above num_workers
    return ParallelMapper(
        source,
        fn,
        num_workers=workers,
        in_order=in_order,
        method=method,
        multiprocessing_context=context,
        max_concurrent=limit,
        snapshot_frequency=node.snapshot_frequency,
        prebatch=node.prebatch,
    )


def first_item(graph: Any) -> Any:
    """One item through the graph as built (the check's and the ceiling's; they run in a forked process)."""
    return next(iter(graph)) if not hasattr(graph, "reset") else next(graph)


def worker_pids(graph: Any) -> list[int]:
    """The pids of the process workers of the graph's mappers (thread workers have none)."""
    from torchdata.nodes import ParallelMapper

    pids = []
    for node in chain(graph):
        if not isinstance(node, ParallelMapper):
            continue
        impl = getattr(node, "_it", None)
        impl = getattr(impl, "source", impl) if node.prebatch is not None else impl  # an Unbatcher around it
        workers = getattr(getattr(impl, "_it", None), "_workers", [])
        pids += [pid for w in workers if (pid := getattr(w, "pid", None)) is not None]
    return pids
