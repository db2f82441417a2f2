"""The runner protocol: every message between the driver (loadertop's process) and the runner (and the trials it
forks), one frozen dataclass per kind, one JSON line each.

    line = encode(TrialRequest(index, config, settings))   # '{"type": "trial", "index": 0, ...}\\n'
    message = decode(line)                                  # TrialRequest(...), or ProtocolError

Requests go driver → runner on the runner's stdin; everything else goes back on its events pipe. The runner's
first message is `Ready`, which carries PROTOCOL_VERSION: a runner from another install is refused by `decode`
before anything else is read. Field types are limited to those `model/wire.py` can encode, so every message round-trips.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.wire import Codec, ProtocolError

__all__ = ["PROTOCOL_VERSION", "ProtocolError", "decode", "decode_reply", "encode"]

PROTOCOL_VERSION = 1


# -- requests: driver → runner ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckRequest:
    """Load the dataset spec (and check the consumer and knobs) before the sweep."""

    TYPE: ClassVar[str] = "check"
    settings: Settings
    start_methods: tuple[str, ...] = ()  # those planned: spawn and forkserver need a picklable dataset
    # Build the dataset in the runner first, once, for the check, the ceiling and every trial to fork from
    # (trial/shared.py); False: each of them builds its own (--rebuild-dataset, or a build that cannot be shared).
    share: bool = False


@dataclass(frozen=True)
class TrialRequest:
    TYPE: ClassVar[str] = "trial"
    index: int
    config: TrialConfig
    settings: Settings
    # The decision the trial is measured for (the adaptive search's climb: a gain or not): it may stop as soon as
    # DECIDE_BLOCKS blocks in a row all lie above `decide_above` samples/s, or all below `decide_below`.
    decide_below: float | None = None
    decide_above: float | None = None
    # Keep the trial's workers after it, idle, for another run of the same configuration (a finalist's repeat):
    # the runner then measures again on them instead of forking anew, until a request without `park` comes.
    park: bool = False


@dataclass(frozen=True)
class CeilingRequest:
    """Measure the ceiling: the consumer alone on a cached batch, for each batch size."""

    TYPE: ClassVar[str] = "ceiling"
    index: int
    settings: Settings


# -- the runner's own messages ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ready:
    """The runner's first message: torch is imported, requests may come."""

    TYPE: ClassVar[str] = "ready"
    version: int
    pid: int


@dataclass(frozen=True)
class Checked:
    TYPE: ClassVar[str] = "checked"
    ok: bool
    error: str | None = None
    dataset: str | None = None  # the dataset's class name
    length: int | None = None  # None for an IterableDataset without __len__
    iterable: bool = False
    extra: tuple[str, ...] = ()  # DataLoader arguments the factory sets
    summary: str = ""
    extra_args: tuple[str, ...] = ()  # the same as "name=text" for the snippet (model/arg_text.py)
    built_s: float | None = None  # how long the build the check used took (the runner's shared one, or its own)
    built_mb: float | None = None  # what the shared build added to the runner's private memory (None: not shared)
    # The runner's build left threads, open files or child processes behind (named here): not checked, and not to
    # be forked from; the driver starts a fresh runner and checks again without sharing.
    unsafe: str = ""
    # The pre-flight figures (trial/preflight.py): the tensor bytes of one real batch of `batch_samples` samples
    # (None: the factory's batch_sampler sets it), and the dataset pickled as spawn/forkserver workers receive it.
    batch_bytes: int | None = None
    batch_samples: int | None = None
    pickle_bytes: int | None = None
    pickle_dumps_s: float | None = None
    pickle_loads_s: float | None = None
    # One worker of this start method (spawn when swept, else forkserver) started and given the dataset, timed.
    start_method: str | None = None
    worker_start_s: float | None = None
    # A torchdata.nodes graph: each node loadertop sweeps, with the arguments the user built it with, as constructor
    # text (`ParallelMapper(num_workers=2, in_order=True, method="thread")`); empty for a Dataset.
    graph: tuple[str, ...] = ()
    # The loader class every trial builds: a factory's StatefulDataLoader (or a subclass) stays its own class, and
    # the snippet names it.
    loader: str = "DataLoader"


@dataclass(frozen=True)
class Forked:
    """The trial's (or the ceiling's) process exists and leads its own process group."""

    TYPE: ClassVar[str] = "forked"
    index: int
    pid: int


@dataclass(frozen=True)
class Exited:
    """The forked process is gone and what was left of its group is killed and reaped."""

    TYPE: ClassVar[str] = "exited"
    index: int
    signal: int | None  # the signal that killed it, or None when it exited
    returncode: int | None
    parked: bool = False  # it is not gone: it measured, and waits with its workers for another run (park)


# -- a trial's messages (from its process; with --ranks, from rank 0) -----------------------------------------------


@dataclass(frozen=True)
class Workers:
    """The DataLoader workers exist (again, after an epoch boundary restarted them)."""

    TYPE: ClassVar[str] = "workers"
    worker_pids: tuple[int, ...]
    rank_pids: tuple[int, ...] = ()  # --ranks: the main processes of ranks 1..R-1


@dataclass(frozen=True)
class Started:
    """The first batch arrived: start-up is over and reported apart."""

    TYPE: ClassVar[str] = "started"
    worker_pids: tuple[int, ...]
    first_batch_s: float
    batch_mb: float  # what each batch in flight holds
    rank_pids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Measuring:
    """The next block opens the window (the steady part of the trial the probes summarise)."""

    TYPE: ClassVar[str] = "measuring"


@dataclass(frozen=True)
class Block:
    """One measured block: batches timed together. Rates of a --ranks trial stand for the node."""

    TYPE: ClassVar[str] = "block"
    block: int  # 1-based count of clean blocks
    batches: int
    samples: int
    seconds: float
    batches_per_s: float
    samples_per_s: float
    stall_fraction: float  # over the measured blocks so far
    elapsed_s: float  # since iter(loader)
    spread: float | None  # IQR/median of the last min_blocks blocks; None until there are that many


@dataclass(frozen=True)
class Finished:
    """The trial's measurement (the window is closed); a --ranks trial sends the node's, aggregated."""

    TYPE: ClassVar[str] = "finished"
    batches_per_s: float
    samples_per_s: float
    spread: float | None  # None when one block was all there was
    first_batch_s: float
    stall_fraction: float
    blocks: int
    measured_s: float
    warmup_batches: int
    stable: bool  # the spread reached the target before the time budget ran out
    # stopped before settling: its blocks all lay beyond an edge of the decision it was measured for (TrialRequest)
    decided: bool = False
    warm: bool = False  # measured on workers parked after an earlier run of the configuration: no start-up paid
    epoch_batches: int | None = None  # the loader's length, when it has one
    # the blocks were whole epochs, boundaries in them; else the driver adds one boundary an epoch (figures.per_epoch)
    whole_epochs: bool = False
    epoch_restart_s: float | None = None  # an epoch boundary crossed while measuring; Epoch may follow with one
    warnings: tuple[str, ...] = ()
    ranks: int = 1
    rank_samples_per_s: tuple[float, ...] = ()
    # The wait in next() per batch over the blocks counted, ms; the first batch after an epoch boundary is left
    # out (it is the boundary's wait: epoch_restart_s, and each one in boundary_wait_ms). Worst rank's with --ranks.
    wait_ms_p50: float | None = None
    wait_ms_p95: float | None = None
    wait_ms_p99: float | None = None
    boundary_wait_ms: tuple[float, ...] = ()  # the first batch after each epoch boundary crossed (the last 32)
    rank_wait_ms_p99: tuple[float, ...] = ()  # each rank's p99, when ranks > 1
    # torch.get_num_threads() in the trial's main process after the consumer's steps: the training step's threads
    main_threads: int | None = None
    workers_start_s: float | None = None  # iter(loader): the parent starting its workers (part of first_batch_s)


@dataclass(frozen=True)
class Epoch:
    """After Finished: the wait from the end of one epoch to the next one's first batch."""

    TYPE: ClassVar[str] = "epoch"
    epoch_restart_s: float | None  # None when the epoch could not be ended and none was crossed


@dataclass(frozen=True)
class TrialNotice:
    """Something the user should read about the trial (it becomes an events.Notice)."""

    TYPE: ClassVar[str] = "notice"
    message: str
    level: str = "warning"


@dataclass(frozen=True)
class Failed:
    """The trial (or the ceiling) failed; the message is one line, the traceback is in runner.log."""

    TYPE: ClassVar[str] = "failed"
    error: str
    # Raised from outside loadertop (the dataset, its collate, the user's step, torch): the data path's own
    # failure, which the sweep stops on when it repeats (engine/drive/data_stop.py); not loadertop's (no clean block).
    data: bool = False


@dataclass(frozen=True)
class CeilingMeasured:
    """The ceiling of one batch size; samples_per_s None when there is none (the note says why)."""

    TYPE: ClassVar[str] = "ceiling_result"
    batch_size: int
    samples_per_s: float | None
    note: str
    spread: float | None = None


@dataclass(frozen=True)
class TransportMeasured:
    """The transport ceiling of one (batch size, worker count, pin_memory): a null dataset that returns the
    dataset's own sample (same tensors, shapes, dtypes) without work, through the same DataLoader settings."""

    TYPE: ClassVar[str] = "transport_result"
    batch_size: int
    num_workers: int
    pin_memory: bool
    batches_per_s: float | None  # None when it could not be measured (the note says why)
    samples_per_s: float | None
    batch_mb: float  # bytes a batch holds, in MiB
    tensors: int  # tensors per batch
    float_images: bool  # a float32 tensor of at least 3 dimensions per sample (C×H×W-like)
    note: str = ""
    spread: float | None = None


Request = CheckRequest | TrialRequest | CeilingRequest
Reply = (
    Ready
    | Checked
    | Forked
    | Exited
    | Workers
    | Started
    | Measuring
    | Block
    | Finished
    | Epoch
    | TrialNotice
    | Failed
    | CeilingMeasured
    | TransportMeasured
)
Message = Request | Reply
Emit = Callable[[Reply], None]  # how the runner and the trial side send a message
KINDS: tuple[type[Message], ...] = (
    CheckRequest, TrialRequest, CeilingRequest, Ready, Checked, Forked, Exited, Workers, Started, Measuring, Block,
    Finished, Epoch, TrialNotice, Failed, CeilingMeasured, TransportMeasured,
)  # fmt: skip
_CODEC: Codec[Message] = Codec(
    KINDS,
    hello=Ready,
    version=PROTOCOL_VERSION,
    mismatch="the runner speaks protocol version {theirs}, this loadertop speaks {ours}: it comes from another "
    "loadertop install (check PYTHONPATH and the virtual environment)",
)


def encode(message: Message) -> str:
    """One JSON line (newline included), tagged with the message's type."""
    return _CODEC.encode(message)


def decode(line: str | bytes) -> Message:
    """The message a line carries. Raises ProtocolError for anything else, naming what is wrong."""
    return _CODEC.decode(line)


def decode_reply(line: str | bytes) -> Reply:
    """What the driver reads from the runner: a reply. A request coming back is a ProtocolError like any bad line."""
    message = decode(line)
    if isinstance(message, Request):
        raise ProtocolError(f"a {message.TYPE} request from the runner, which sends replies only")
    return message
