"""The ready-to-paste `DataLoader(...)` line: the user's own arguments kept, only what was measured changed.

Built from plain data (each argument's name and its source text, in the user's order), so the engine never needs the
loader or torch: the training job's side reads them from a live DataLoader (job/resume.py `user_args`), the runner
from what a dataset factory returned. A template would drop what the user set (shuffle, drop_last, collate_fn):
pasting it would change their training without a word. A torchdata.nodes graph gets its swept nodes' constructor
lines instead (`graph_snippet`): it has no DataLoader."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from loadertop.core.model.config import DEFAULT_PREFETCH, TrialConfig

# The arguments a TrialConfig decides: the user's value of each is replaced by the measured configuration's.
KNOBS = (
    "num_workers",
    "prefetch_factor",
    "pin_memory",
    "persistent_workers",
    "multiprocessing_context",
    "in_order",
    "worker_init_fn",
)
# Arguments the DataLoader rejects (or its 0-worker iterator asserts are unset) without workers.
WORKERS_ONLY = ("timeout", "prefetch_factor", "persistent_workers", "multiprocessing_context")
# With a batch_sampler of their own, these must not be given at all.
BATCH_SAMPLER_EXCLUDES = ("batch_size", "shuffle", "sampler", "drop_last")


@dataclass(frozen=True)
class UserArgs:
    """What the user passed to their DataLoader besides the dataset: (name, source text) pairs in their order, and
    `config`, the knobs their loader had (None when they set none: a dataset factory may not fix a swept knob)."""

    args: tuple[tuple[str, str], ...] = ()
    config: TrialConfig | None = None
    loader: str = "DataLoader"  # the user's loader class: a torchdata StatefulDataLoader stays one


def snippet(
    config: TrialConfig, default_start_method: str, extra: Sequence[str] = (), user: UserArgs | None = None
) -> str:
    """A ready-to-paste `DataLoader(...)` line: batch_size (unless the user has a batch_sampler), then the user's own
    arguments in their order, each knob the configuration decides at its measured value (the user's own text where
    the value did not change), then the knobs they had not set; knobs at their default are left out. `extra`
    arguments (such as a DistributedSampler with --ranks) go after batch_size and replace the user's of that name."""
    user = user or UserArgs()
    if config.worker_method == "thread":
        return nodes_snippet(config, user)
    given = dict(user.args)
    knobs = knob_args(config, default_start_method)
    mine = knob_args(user.config, default_start_method) if user.config is not None else {}
    taken = {e.partition("=")[0].strip() for e in extra}
    args = ["dataset"]
    if "batch_sampler" not in given:
        args.append(f"batch_size={config.batch_size}")
    args += extra
    placed: set[str] = set()
    for name, text in user.args:
        if name in taken or name == "batch_size" or (name in BATCH_SAMPLER_EXCLUDES and "batch_sampler" in taken):
            continue
        if name == "shuffle" and "sampler" in taken:  # a sampler of ours (--ranks) does the shuffling
            continue
        if config.num_workers == 0 and name in WORKERS_ONLY:
            continue
        if name in KNOBS:
            placed.add(name)
            if name in knobs:  # the measured value; the user's own text where it is the value they had
                args.append(f"{name}={text if mine.get(name) == knobs[name] else knobs[name]}")
            elif name not in mine:  # theirs, at a value the configuration leaves alone: kept as they wrote it
                args.append(f"{name}={text}")
            continue
        args.append(f"{name}={text}")
    args += [f"{name}={text}" for name, text in knobs.items() if name not in placed]
    return f"{user.loader}({', '.join(args)})"


def nodes_snippet(config: TrialConfig, user: UserArgs) -> str:
    """Thread workers: the torchdata.nodes chain loadertop measured (trial/graph_loader.py), as one expression
    (`from torchdata import nodes`). The user's sampler, collate_fn and drop_last are kept as they wrote them."""
    given = dict(user.args)
    shuffled = given.get("shuffle", "False") not in ("False", "0")
    sampler = given.get("sampler") or ("RandomSampler(dataset)" if shuffled else "SequentialSampler(dataset)")
    if "batch_sampler" in given:
        node = f"nodes.SamplerWrapper({given['batch_sampler']})"
    else:
        drop = given.get("drop_last", "False")
        node = f"nodes.Batcher(nodes.SamplerWrapper({sampler}), batch_size={config.batch_size}, drop_last={drop})"
    collate = given.get("collate_fn", "default_collate")
    order = "" if config.in_order else ", in_order=False"
    node = (f"nodes.ParallelMapper({node}, map_fn=lambda idx: {collate}([dataset[i] for i in idx]), "
            f"num_workers={config.num_workers}, method=\"thread\"{order})")  # fmt: skip
    if config.pin_memory:
        node = f"nodes.PinMemory({node})"
    in_flight = (config.prefetch_factor or DEFAULT_PREFETCH) * config.num_workers
    return f"nodes.Loader(nodes.Prefetcher({node}, prefetch_factor={in_flight}))"


def knob_args(config: TrialConfig, default_start_method: str) -> dict[str, str]:
    """The knobs of `config` that differ from the DataLoader's defaults, as argument text, in the usual order."""
    out: dict[str, str] = {}
    workers = config.num_workers > 0
    if workers:
        out["num_workers"] = str(config.num_workers)
        if config.prefetch_factor is not None and config.prefetch_factor != DEFAULT_PREFETCH:
            out["prefetch_factor"] = str(config.prefetch_factor)
    if config.pin_memory:
        out["pin_memory"] = "True"
    if workers:
        if config.persistent_workers:
            out["persistent_workers"] = "True"
        if config.start_method and config.start_method != default_start_method:
            out["multiprocessing_context"] = f'"{config.start_method}"'
        if not config.in_order:
            out["in_order"] = "False"
        if config.worker_threads is not None:  # needs `import loadertop`; it chains no worker_init_fn of yours
            out["worker_init_fn"] = f"loadertop.set_worker_threads({config.worker_threads})"
    return out


def graph_snippet(graph: Sequence[str], config: TrialConfig, default_start_method: str, method: bool = False) -> str:
    """A torchdata.nodes graph's lines to paste, one per swept node in pipeline order: `graph` holds each node as the
    user built it (`ParallelMapper(num_workers=2, in_order=True, method="thread")`, from the runner's check), and the
    measured configuration replaces what loadertop swept. Every swept mapper gets the same values, as measured;
    `method`: --worker-method was swept, so they get the configuration's method too (else each keeps its own)."""
    lines = []
    for text in graph:
        name, args = parse_node(text)
        if name == "Prefetcher":
            factor = config.prefetch_factor or args.get("prefetch_factor", str(DEFAULT_PREFETCH))
            lines.append(f"Prefetcher(source, prefetch_factor={factor})")
            continue
        mapper = _mapper_args(args, config, default_start_method, method)
        lines.append(f"ParallelMapper(source, map_fn, {', '.join(mapper)})")
    return "\n".join(lines)


def _mapper_args(args: dict[str, str], config: TrialConfig, default_start_method: str, swept: bool) -> list[str]:
    """A swept ParallelMapper's arguments at the measured values; the user's others (max_concurrent, prebatch)
    kept, max_concurrent held under num_workers as torchdata requires."""
    # The measured method when swept, else the graph's own, as the trial rebuilt it (trial/graph.py _mapper)
    method = config.worker_method if swept else args.get("method", '"thread"').strip('"')
    out = [f"num_workers={config.num_workers}"]
    if not config.in_order:
        out.append("in_order=False")
    out.append(f'method="{method}"')
    context = args.get("multiprocessing_context")
    if method == "process" and config.start_method and (context or config.start_method != default_start_method):
        context = f'"{config.start_method}"'
    if method == "process" and context:
        out.append(f"multiprocessing_context={context}")
    limit = args.get("max_concurrent")
    if limit is not None and limit.isdigit() and config.num_workers > 0:
        limit = str(min(int(limit), config.num_workers))
    out += [f"{k}={v}" for k, v in (("max_concurrent", limit), ("prebatch", args.get("prebatch"))) if v is not None]
    return out


def parse_node(text: str) -> tuple[str, dict[str, str]]:
    """`Name(a=1, b="x")` into ("Name", {"a": "1", "b": '"x"'}): the runner's description of a graph's node (its
    values are literals without commas: numbers, booleans, quoted names)."""
    name, _, rest = text.partition("(")
    pairs = (part.partition("=") for part in rest.rstrip(")").split(", ") if part)
    return name, {key.strip(): value.strip() for key, _, value in pairs}
