"""The live protocol: what a training job that runs `loadertop.watch(loader)` or `loadertop.tune(loader)` sends to
the viewers attached to its Unix socket (`loadertop attach`), one frozen dataclass per kind, one JSON line each.

The job's publisher sends `JobHello` first to each viewer (it carries LIVE_PROTOCOL_VERSION: a viewer of another
version refuses it), then the recent history it kept (bounded), then messages as they come. Times `t` are seconds
on the job's monotonic clock since its first `watch()`, so a viewer that attaches late lines them up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from loadertop.core.model.config import TrialConfig
from loadertop.core.model.wire import Codec

LIVE_PROTOCOL_VERSION = 2


@dataclass(frozen=True)
class JobHello:
    """First message to each viewer; also written as the job folder's job.json."""

    TYPE: ClassVar[str] = "hello"
    version: int
    pid: int
    argv: tuple[str, ...]
    started: float  # wall clock (time.time()) of the job's first watch()
    hostname: str
    loadertop: str  # loadertop's version in the job


@dataclass(frozen=True)
class JobWorkers:
    """A watched loader's iterator started (an epoch began, or a tuned loader switched): its worker processes."""

    TYPE: ClassVar[str] = "workers"
    t: float
    loader: int  # which watched loader of the job (0, 1, ... in the order watch() first saw them)
    pids: tuple[int, ...]
    config: TrialConfig | None  # the loader's knobs as loadertop reads them; None when they could not be read


@dataclass(frozen=True)
class JobSteps:
    """The steps since the last JobSteps of this loader, aggregated by the publisher thread (not the loop)."""

    TYPE: ClassVar[str] = "steps"
    t: float  # end of the span
    span_s: float  # wall time the span covers
    loader: int
    epoch: int  # 0-based epoch of the loader's iteration
    batches: int
    samples: int
    wait_s: float  # Σ time blocked in next()
    step_s: float  # Σ time from a batch handed out to the next next() call (the training step)
    wait_ms_p50: float | None  # the span's tails (model/figures.py: wait_tails)
    wait_ms_p95: float | None
    wait_ms_max: float | None
    dropped: int = 0  # step records lost because the bounded buffer was full
    wait_ms_p99: float | None = None
    # The span's waits in ms, in order (every one up to WAITS_SENT; beyond, that many evenly spaced order
    # statistics): a viewer's tails over several spans are read off these (Interval.wait_tails), not off their tails
    waits_ms: tuple[float, ...] = ()


@dataclass(frozen=True)
class JobEpoch:
    """An epoch of a watched loader ended (its iterator was exhausted or closed)."""

    TYPE: ClassVar[str] = "epoch"
    t: float
    loader: int
    epoch: int
    batches: int
    seconds: float  # from iter() to the end
    first_batch_s: float | None  # the wait for its first batch: worker start-up, the boundary stall
    complete: bool  # False when the loop left the epoch early (break, exception)


@dataclass(frozen=True)
class TuneStep:
    """`loadertop.tune` measured one configuration inside the training loop."""

    TYPE: ClassVar[str] = "tune_step"
    t: float
    loader: int
    config: TrialConfig
    batches: int  # measured batches (after its start-up buffer)
    samples_per_s: float | None
    stall_fraction: float | None
    wait_ms_p95: float | None
    switch_s: float  # what switching to it cost: from the switch to its first batch (worker start-up)
    message: str


@dataclass(frozen=True)
class TuneChose:
    """`loadertop.tune` settled: the configuration it keeps, why, and the line to paste."""

    TYPE: ClassVar[str] = "tune_chose"
    t: float
    loader: int
    config: TrialConfig
    samples_per_s: float | None
    reason: str
    snippet: str
    tuning_s: float  # wall time spent tuning, switches included
    trials: int


@dataclass(frozen=True)
class JobBye:
    """The job's publisher is closing (interpreter exit, or it stepped aside after a failure)."""

    TYPE: ClassVar[str] = "bye"
    t: float
    reason: str


LiveMessage = JobHello | JobWorkers | JobSteps | JobEpoch | TuneStep | TuneChose | JobBye
KINDS: tuple[type[LiveMessage], ...] = (JobHello, JobWorkers, JobSteps, JobEpoch, TuneStep, TuneChose, JobBye)
_CODEC: Codec[LiveMessage] = Codec(
    KINDS,
    hello=JobHello,
    version=LIVE_PROTOCOL_VERSION,
    mismatch="the job speaks live protocol version {theirs}, this loadertop speaks {ours}: "
    "attach with the loadertop installed in the job's environment",
)


def encode(message: LiveMessage) -> str:
    """One JSON line (newline included), tagged with the message's type."""
    return _CODEC.encode(message)


def decode(line: str | bytes) -> LiveMessage:
    """The message a line carries. Raises ProtocolError for anything else, naming what is wrong."""
    return _CODEC.decode(line)
