"""What one trial measures (TrialConfig) and what a whole sweep is asked to do (Settings)."""

from __future__ import annotations

import itertools
import multiprocessing
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal


class UsageError(ValueError):
    """Bad input from the user: reported as one line, exit code 2."""


class DataError(UsageError):
    """The data itself fails, the same way in every configuration tried (PIL images without ToTensor, samples of
    different shapes): one line with the fix, exit code 2. `error` is the failure as the trials said it."""

    def __init__(self, message: str, error: str = "") -> None:
        super().__init__(message)
        self.error = error


def default_start_method() -> str:
    # The first entry is this platform's default: what the user's training script gets.
    return multiprocessing.get_all_start_methods()[0]


@dataclass(frozen=True)
class TrialConfig:
    """One DataLoader configuration. Fields that do not apply with 0 workers are None/False."""

    num_workers: int
    batch_size: int
    prefetch_factor: int | None = None
    pin_memory: bool = False
    persistent_workers: bool = False
    start_method: str | None = None
    in_order: bool = True  # DataLoader(in_order=...), torch >= 2.6; False lets a fast worker overtake a slow one
    worker_threads: int | None = None  # torch.set_num_threads(n) in each worker; None: torch's default there (1)
    # "process": the DataLoader's own worker processes; "thread": torchdata.nodes threads in the trial process
    worker_method: str = "process"

    def label(self) -> str:
        # Knobs that need workers are shown whenever set: a skipped 0-worker combination must read differently
        # from the 0-worker trial that was measured (which has them all unset).
        parts = [f"w={self.num_workers}", f"bs={self.batch_size}"]
        if self.prefetch_factor is not None:
            parts.append(f"pf={self.prefetch_factor}")
        if self.pin_memory:
            parts.append("pin")
        if self.persistent_workers:
            parts.append("persist")
        if self.start_method:
            parts.append(self.start_method)
        if not self.in_order:
            parts.append("unordered")
        if self.worker_threads is not None:
            parts.append(f"th={self.worker_threads}")
        if self.worker_method != "process":
            parts.append(self.worker_method)
        return " ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialConfig:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


Kind = Literal[
    "text", "pairs", "workers", "ints", "bools", "methods", "words", "number", "count", "choice", "flag", "size"
]


@dataclass(frozen=True)
class Option:
    """How a user sets one Settings field: the one place its flag, help and checks are declared.

    The command line is built from these (loadertop.faces.cli) and `loadertop.sweep(**options)` takes the same keys;
    both hand the user's values to one builder (loadertop.core.engine.build_settings), which reads each value by
    its `kind`: a string from the command line or a Python value from the API."""

    flag: str | None  # None: the Python API only
    help: str
    kind: Kind
    key: str = ""  # the API keyword and argparse dest; "" = the field's name
    group: str = "what to measure"
    metavar: str | None = None
    default: Any = None  # what a user gets when they give nothing, where it is not the field's own default
    low: float = 0  # numbers: the smallest allowed (excluded unless zero_ok); counts: the smallest allowed
    high: float | None = None  # numbers: allowed only below it; counts: the largest allowed
    zero_ok: bool = False
    choices: tuple[str, ...] = ()
    const: Any = None  # a flag that takes no value and stores this
    off_flag: str | None = None  # a second flag of the same setting that stores "off" (--no-stages beside --stages)


def option(flag: str | None, help: str, kind: Kind, **more: Any) -> dict[str, Option]:
    return {"option": Option(flag, help, kind, **more)}


_HOW = "how to measure"
WORKER_METHODS = ("process", "thread")


@dataclass(frozen=True)
class Settings:
    """Everything a sweep needs, as plain values (JSON-friendly, picklable). Each field's user-facing flag, help and
    checks are in its metadata (Option); Settings(...) in code takes the values as they are, unchecked."""

    # fmt: off
    dataset: str = field(default="synthetic", metadata=option(
        "--dataset", "dataset spec (default: synthetic)", "text", metavar="SPEC"))
    dataset_args: tuple[tuple[str, str], ...] = field(default=(), metadata=option(
        "--dataset-arg", "keyword argument for the dataset factory (repeatable)", "pairs", key="dataset_args",
        metavar="KEY=VALUE"))
    workers: tuple[int, ...] = field(default=(0, 1, 2, 4), metadata=option(
        "--workers", "num_workers: 0-16, 0,2,4,8, auto (default; adaptive: to 64, grid: a ladder)", "workers",
        metavar="SPEC", default="auto"))
    batch_sizes: tuple[int, ...] = field(default=(32,), metadata=option(
        "--batch-size", "batch sizes, e.g. 32,128 (default 32)", "ints", key="batch_size", metavar="LIST",
        low=1))
    prefetch_factors: tuple[int, ...] = field(default=(2,), metadata=option(
        "--prefetch-factor", "prefetch factors (default 2)", "ints", key="prefetch_factor",
        metavar="LIST", low=1))
    pin_memory: tuple[bool, ...] = field(default=(False,), metadata=option(
        "--pin-memory", "pin_memory values (default off)", "bools", metavar="on,off"))
    persistent_workers: tuple[bool, ...] = field(default=(False,), metadata=option(
        "--persistent-workers", "persistent_workers values; each trial also measures the epoch boundary", "bools",
        metavar="on,off"))
    start_methods: tuple[str, ...] = field(default_factory=lambda: (default_start_method(),), metadata=option(
        "--start-method", "fork,forkserver,spawn (default: this Python's default)", "methods", key="start_method",
        metavar="LIST"))
    in_order: tuple[bool, ...] = field(default=(True,), metadata=option(
        "--in-order", "DataLoader in_order values (off: batches as workers finish; torch >= 2.6)", "bools",
        metavar="on,off"))
    worker_threads: tuple[int | None, ...] = field(default=(None,), metadata=option(
        "--worker-threads", "intra-op threads per worker, torch.set_num_threads(n) in worker_init_fn, e.g. 1,2,4 "
        "(default: torch's own in workers, 1)", "ints", metavar="LIST", low=1))
    # Empty: not given, which is not the same as "process": the DataLoader's workers are processes then, but a
    # torchdata.nodes graph's mappers keep the method they were built with (trial/graph.py rebuild).
    worker_methods: tuple[str, ...] = field(default=(), metadata=option(
        "--worker-method", "process,thread: the DataLoader's worker processes (default) or torchdata.nodes thread "
        "workers (pip install \"loadertop[graph]\"); a torchdata.nodes graph's mappers keep their own unless given",
        "words", key="worker_method", metavar="LIST", choices=WORKER_METHODS))
    step_ms: float = field(default=0.0, metadata=option(
        "--step-ms", "emulated training step per batch (CUDA: copy + kernel; CPU: sleep)", "number", metavar="MS",
        zero_ok=True))
    # module:callable or file.py:callable, a `(batch) -> None` training step replacing step_ms
    consumer: str = field(default="", metadata=option(
        "--consumer", "your training step, module:callable or file.py:callable taking a batch; its time is the step "
        "time of the stall fraction (replaces --step-ms)", "text", metavar="SPEC"))
    # loader replicas run at once, one process each, as torchrun starts them (workers are per rank)
    ranks: int = field(default=1, metadata=option(
        "--ranks", "run R loader replicas at once, as torchrun --nproc-per-node R would (gloo, DistributedSampler); "
        "workers are per rank (default 1)", "count", metavar="R", low=1, high=64))
    trial_seconds: float = field(default=8.0, metadata=option(
        "--trial-seconds", "time budget per trial, from its first batch (default 8)", "number", group=_HOW,
        metavar="S"))
    # no batch for this long: the trial is hung, kill it
    trial_timeout: float = field(default=60.0, metadata=option(
        "--trial-timeout", "fail trials stuck for S s", "number", group=_HOW, metavar="S"))
    # free memory a trial may not take us below: "4GiB", "10%", "0" (off); "" = default
    mem_floor: str = field(default="", metadata=option(
        "--mem-floor", "free memory no trial may take: 4GiB, 512MiB or 10%; 0 = off (default: the larger of 10% of "
        "memory and 2 GiB)", "size", group=_HOW, metavar="SIZE"))
    # open files one sample may hold in flight (the ulimit -n warning)
    files_per_sample: int = field(default=1, metadata=option(
        "--files-per-sample", "open files one sample holds (for the ulimit -n warning; default 1)", "count",
        group=_HOW, metavar="N", low=1))
    interval: float = field(default=0.5, metadata=option(
        "--interval", "probe interval (default 0.5)", "number", group=_HOW, metavar="S"))
    tolerance: float = field(default=0.05, metadata=option(
        "--tolerance", "noise band, as a fraction (0.05)", "number", group=_HOW, metavar="F", high=1))
    target_spread: float = field(default=0.05, metadata=option(
        None, "a trial stops early once its window's spread is within this fraction", "number", high=1))
    min_blocks: int = field(default=5, metadata=option(
        None, "blocks in the window whose spread says a trial is stable", "count", low=2))
    block_seconds: float = field(default=0.3, metadata=option(
        None, "length of one measured block, in seconds", "number"))
    skip_warmup: bool = field(default=True, metadata=option(
        "--no-skip-warmup", "count the start-up prefetch buffer as throughput (to see how much it inflates)", "flag",
        group=_HOW, const=False))
    # Users get the transport ceiling (the CLI's and the API's default); a Settings built directly, as the tests
    # build hundreds, skips its few seconds per batch size.
    transport: bool = field(default=False, metadata=option(
        "--no-transport", "skip the transport ceiling (the most batches/s the hand-off from workers allows for this "
        "batch structure, at 0-8 workers: a few seconds per batch size)", "flag", group=_HOW, const=False,
        default=True))
    # Many nodes (a torchrun or srun launch, detected from the environment): how long node 0 waits for every node.
    join_timeout: float = field(default=60.0, metadata=option(
        "--join-timeout", "many nodes: seconds to wait for every node's agent to join (default 60)", "number",
        group="many nodes", metavar="S"))
    # Set by the agents, not by users: this sweep's node count and this node's rank (the trial shards its data as
    # global rank node_rank × ranks + local rank of nodes × ranks). Equal settings across nodes ignore node_rank.
    nodes: int = field(default=1, metadata=option(None, "nodes in the sweep (set by the launch)", "count", low=1))
    node_rank: int = field(default=0, metadata=option(
        None, "this node's rank (set by the launch)", "count", low=0))
    # The dataset is built once per sweep in the runner and every trial forked from it (trial/shared.py); True: a
    # build per trial, for datasets holding handles (files, sockets, threads) that do not survive fork.
    rebuild_dataset: bool = field(default=False, metadata=option(
        "--rebuild-dataset", "build the dataset in every trial, not once per sweep (for datasets holding files, "
        "sockets or threads that do not survive a fork)", "flag", group=_HOW, const=True))
    # The pre-flight checks (/dev/shm against the batches in flight, the dataset's pickle) warn; --strict stops there.
    strict: bool = field(default=False, metadata=option(
        "--strict", "a pre-flight warning (/dev/shm too small for the batches in flight, a slow pickle for spawn or "
        "forkserver workers) is an error: exit 2 before any trial", "flag", group=_HOW, const=True))
    # Where a sample's time goes (`loadertop stages`), measured after the trials: auto (the CLI's and the API's
    # default) when it costs little beside the sweep (engine/verdict/stage_plan.py); a Settings built directly, as
    # the tests build hundreds, leaves it off.
    stages: str = field(default="off", metadata=option(
        "--stages", "after the trials, measure where a sample's time goes (the stages, their ceilings, advice) even "
        "when it costs more than 5% of the sweep's time (default: only then); --no-stages never", "choice",
        group=_HOW, const="on", off_flag="--no-stages", default="auto", choices=("auto", "on", "off")))
    search: str = field(default="adaptive", metadata=option(
        "--search", "adaptive (default): climb, bisect, repeat the finalists; grid: all of them", "choice",
        choices=("adaptive", "grid")))
    # fmt: on

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Settings:
        kwargs = {}
        for name in cls.__dataclass_fields__:
            if name in data:
                value = data[name]
                if isinstance(value, list):
                    value = tuple(tuple(v) if isinstance(v, list) else v for v in value)
                kwargs[name] = value
        return cls(**kwargs)

    def trial_configs(self) -> list[TrialConfig]:
        """The sweep space, num_workers innermost-last so the table reads as a climb per setting.

        Knobs that do not apply with 0 workers collapse, so the plain 0-worker loader is measured once per batch
        size and pin_memory; `skipped_configs()` lists the combinations that collapse, with the reason.
        """
        seen: dict[TrialConfig, None] = {}
        for bs, pf, pin, persist, method, order, threads, nw in self._product():
            if nw == 0:  # no workers of either kind: the same loader, measured once
                seen.setdefault(TrialConfig(0, bs, None, pin, False, None, True), None)
                continue
            for how in self.worker_methods or ("process",):  # not given: the DataLoader's processes
                if how == "thread":  # threads share the process: no start method, no persistence, no set_num_threads
                    config = TrialConfig(nw, bs, pf, pin, False, None, order, None, "thread")
                else:
                    config = TrialConfig(nw, bs, pf, pin, persist, method, order, threads)
                seen.setdefault(config, None)
        return list(seen)

    def skipped_configs(self) -> list[tuple[TrialConfig, str]]:
        """0-worker combinations that are not run, each with the reason (the DataLoader rejects them, or they
        would measure the same loader again): shown as status "skipped" in the results."""
        out: dict[TrialConfig, str] = {}
        for bs, pf, pin, persist, method, order, threads, nw in self._product():
            if nw != 0:
                continue
            why = zero_worker_conflicts(pf, persist, method, order, threads)
            if why:
                config = TrialConfig(0, bs, pf if pf != DEFAULT_PREFETCH else None, pin, persist,
                                     method if method != default_start_method() else None, order, threads)  # fmt: skip
                out.setdefault(config, why)
        return list(out.items())

    def _product(self) -> itertools.product[tuple[int, int, bool, bool, str, bool, int | None, int]]:
        return itertools.product(
            self.batch_sizes,
            self.prefetch_factors,
            self.pin_memory,
            self.persistent_workers,
            self.start_methods,
            self.in_order,
            self.worker_threads,
            self.workers,
        )


def settings_options() -> list[tuple[str, Option]]:
    """The Settings fields a user can set (field name, its Option with `key` filled in), in declaration order:
    the order of `loadertop --help`."""
    found = [(f.name, f.metadata.get("option")) for f in fields(Settings)]
    return [(name, replace(opt, key=opt.key or name)) for name, opt in found if isinstance(opt, Option)]


DEFAULT_PREFETCH = 2  # the DataLoader's prefetch_factor when workers are used and none is given


def zero_worker_conflicts(
    prefetch: int, persistent: bool, start_method: str, in_order: bool, worker_threads: int | None = None
) -> str:
    """Why a combination cannot be what it says at 0 workers ("" when it can: the knobs are at their defaults)."""
    rejected = []
    if prefetch != DEFAULT_PREFETCH:
        rejected.append(f"prefetch_factor={prefetch}")
    if persistent:
        rejected.append("persistent_workers=True")
    if start_method != default_start_method():
        rejected.append(f"multiprocessing_context={start_method!r}")
    parts = [f"DataLoader rejects {', '.join(rejected)} at 0 workers"] if rejected else []
    if not in_order:
        parts.append("in_order=False does nothing at 0 workers")
    if worker_threads is not None:
        parts.append(f"worker_threads={worker_threads} needs workers (at 0 workers the training process's own "
                     "threads load)")  # fmt: skip
    return "; ".join(parts)


def auto_counts(usable_cpus: int, search: str) -> tuple[int, ...]:
    """What `--workers auto` means: a ladder for the grid, and every count up to the hard cap for the adaptive
    search (it measures a handful of them, and climbs only while throughput grows, CPU allows and memory lasts)."""
    return tuple(range(adaptive_cap(usable_cpus) + 1)) if search == "adaptive" else auto_workers(usable_cpus)


def parse_worker_counts(spec: str) -> tuple[int, ...]:
    """`0-16`, `0,2,4,8` or `1-8:2` into a sorted tuple of worker counts."""
    values: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        if not part:
            raise UsageError(f"--workers {spec!r}: empty item")
        step = 1
        if ":" in part:
            part, step_text = part.split(":", 1)
            step = _int(step_text, spec)
            if step < 1:
                raise UsageError(f"--workers {spec!r}: step must be at least 1")
        if "-" in part.lstrip("-"):
            lo_text, hi_text = part.rsplit("-", 1) if not part.startswith("-") else (part, "")
            lo, hi = _int(lo_text, spec), _int(hi_text, spec)
            if hi < lo:
                raise UsageError(f"--workers {spec!r}: range {lo}-{hi} runs backwards")
            values.update(range(lo, hi + 1, step))
        else:
            values.add(_int(part, spec))
    if any(v < 0 for v in values):
        raise UsageError(f"--workers {spec!r}: worker counts cannot be negative")
    if max(values) > 1024:
        raise UsageError(f"--workers {spec!r}: more than 1024 workers is not a sensible sweep")
    return tuple(sorted(values))


def adaptive_cap(usable_cpus: int) -> int:
    """The most workers `auto` lets the adaptive search climb to: 64, or 4 per usable CPU on bigger machines.

    Not a multiple of the cores alone: workers blocked on I/O (network storage, S3) use little CPU, and the best
    count can be many times the cores. Past 64 on a small machine the training process, which receives every
    batch through one queue, is the bottleneck long before the workers are."""
    return max(64, 4 * usable_cpus)


def auto_workers(usable_cpus: int) -> tuple[int, ...]:
    """0, 1, 2, then a ladder up to twice the usable CPUs (at least 8): past the cores is where
    I/O-bound loaders still gain and CPU-bound ones show their plateau."""
    bound = max(8, 2 * usable_cpus)
    ladder = {0, 1, 2}
    n = 2
    while n < bound:
        ladder.update({n, n + n // 2})
        n *= 2
    ladder.add(bound)
    return tuple(sorted(v for v in ladder if v <= bound))


def parse_bool_list(spec: str, flag: str) -> tuple[bool, ...]:
    words = {"on": True, "true": True, "yes": True, "1": True, "off": False, "false": False, "no": False, "0": False}
    out: list[bool] = []
    for part in spec.split(","):
        key = part.strip().lower()
        if key not in words:
            raise UsageError(f"{flag} {spec!r}: expected on/off values, got {part.strip()!r}")
        if words[key] not in out:
            out.append(words[key])
    return tuple(out)


def parse_int_list(spec: str, flag: str, minimum: int = 1) -> tuple[int, ...]:
    out: list[int] = []
    for part in spec.split(","):
        value = _int(part, spec, flag)
        if value < minimum:
            raise UsageError(f"{flag} {spec!r}: values must be at least {minimum}")
        if value not in out:
            out.append(value)
    return tuple(out)


def parse_start_methods(spec: str) -> tuple[str, ...]:
    allowed = multiprocessing.get_all_start_methods()
    out: list[str] = []
    for part in spec.split(","):
        method = part.strip()
        if method not in allowed:
            raise UsageError(f"--start-method {spec!r}: {method!r} is not one of {', '.join(allowed)}")
        if method not in out:
            out.append(method)
    return tuple(out)


def _int(text: str, spec: str, flag: str = "--workers") -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise UsageError(f"{flag} {spec!r}: {text.strip()!r} is not a whole number") from None
