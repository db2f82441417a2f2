"""The stages protocol: what `loadertop stages` (engine/drive/stages_run.py) and its child process
(trial/stages_main.py) say, one JSON line each on the wire codec (wire.py).

The engine writes one StagesRequest on the child's stdin. The child answers on its stdout: StagesReady first, with
STAGES_PROTOCOL_VERSION (a child of another install is refused in one line), then either the StagesMeasurement or
StagesFailed, whose `kind` says whose fault it is: "spec" (the dataset spec cannot be built), "data" (the dataset
fails on its samples) or "bug" (loadertop's own).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from loadertop.core.model.stages import LazyImport, LibraryShare, Replay, Stage, StagesMeasurement
from loadertop.core.model.wire import Codec, ProtocolError, optional, record, tuple_of

__all__ = ["STAGES_PROTOCOL_VERSION", "ProtocolError", "decode", "encode"]

STAGES_PROTOCOL_VERSION = 1
FAILURES = ("spec", "data", "bug")


@dataclass(frozen=True)
class StagesRequest:
    """Measure this dataset's stages for about `seconds` (or `samples` samples per way of timing, if sooner)."""

    TYPE: ClassVar[str] = "request"
    spec: str
    dataset_args: dict[str, str]
    seconds: float
    samples: int
    batch_size: int


@dataclass(frozen=True)
class StagesReady:
    """The child has imported torch and read the request: it builds the dataset next."""

    TYPE: ClassVar[str] = "ready"
    version: int  # STAGES_PROTOCOL_VERSION
    pid: int


@dataclass(frozen=True)
class StagesFailed:
    TYPE: ClassVar[str] = "failed"
    kind: str  # one of FAILURES
    error: str  # one line


StagesMessage = StagesRequest | StagesReady | StagesMeasurement | StagesFailed


def _rows(kind: type) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    """(to JSON, from JSON) for a tuple of one of the flat records in model/stages.py."""
    return (lambda items: [asdict(item) for item in items], tuple_of(record(kind)))


_CODEC: Codec[StagesMessage] = Codec(
    (StagesRequest, StagesReady, StagesMeasurement, StagesFailed),
    hello=StagesReady,
    version=STAGES_PROTOCOL_VERSION,
    mismatch="the stages child speaks protocol {theirs}, this loadertop {ours} (another install on the path?)",
    records={
        "tuple[Stage, ...]": _rows(Stage),
        "tuple[LibraryShare, ...]": _rows(LibraryShare),
        "tuple[LazyImport, ...]": _rows(LazyImport),
        "Replay | None": (lambda replay: None if replay is None else asdict(replay), optional(record(Replay))),
    },
)


def encode(message: StagesMessage) -> str:
    """One JSON line, tagged with the message's type."""
    return _CODEC.encode(message)


def decode(line: str | bytes) -> StagesMessage:
    """The message a line carries. Raises ProtocolError (VersionMismatch for a child of another version)."""
    return _CODEC.decode(line)
