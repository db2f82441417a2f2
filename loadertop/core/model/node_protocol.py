"""The nodes protocol: what the loadertop agents of a many-node sweep write to each other through the c10d store
(core/nodes/), one frozen dataclass per kind, one JSON line each, on the runner protocol's codec (wire.py).

Each message is the value of one store key (`hello/K`, `verdict`, `seen/K`, `ready/I/K`, `trial/I`, `result/I/K`,
`bye/K`). `NodeHello` comes first and carries NODES_PROTOCOL_VERSION: node 0 refuses a node of another version in
one line before it reads anything else of it. Heartbeats (`hb/K`) and node 0's stop (`stop`) are not messages but
the store's atomic counters (`add`), read with `add(key, 0)`: a counter needs no codec and never tears.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, TypeVar

from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.nodes import NODES_PROTOCOL_VERSION, NodeInfo
from loadertop.core.model.results import TrialResult
from loadertop.core.model.wire import Codec, ProtocolError, Tagged, record, tuple_of


@dataclass(frozen=True)
class NodeHello:
    """Every node's first word (`hello/K`): its facts, its loadertop and its settings (and their digest)."""

    TYPE: ClassVar[str] = "hello"
    version: int  # NODES_PROTOCOL_VERSION
    info: NodeInfo
    loadertop: str  # the agent's loadertop version: every node must run the same one
    digest: str  # of the settings without node_rank
    settings: Settings


@dataclass(frozen=True)
class NodeVerdict:
    """Node 0's answer to the hellos (`verdict`): every node's facts in rank order, or why the sweep is refused."""

    TYPE: ClassVar[str] = "verdict"
    error: str | None
    nodes: tuple[NodeInfo, ...]


@dataclass(frozen=True)
class NodeSeen:
    """A node read the verdict (`seen/K`): node 0, refusing, waits for these before its store goes."""

    TYPE: ClassVar[str] = "seen"
    node_rank: int


@dataclass(frozen=True)
class NodeReady:
    """A node is ready for trial `index` (`ready/I/K`): node 0 sends it out once every node is."""

    TYPE: ClassVar[str] = "ready"
    index: int
    node_rank: int


@dataclass(frozen=True)
class TrialOut:
    """Node 0's trial `index` for every node (`trial/I`); `config` None: the sweep ended as planned."""

    TYPE: ClassVar[str] = "trial"
    index: int
    config: TrialConfig | None


@dataclass(frozen=True)
class ResultBack:
    """A node's own measurement of trial `index` (`result/I/K`), for node 0 to merge."""

    TYPE: ClassVar[str] = "result"
    index: int
    node_rank: int
    trial: TrialResult


@dataclass(frozen=True)
class NodeBye:
    """A node leaves (`bye/K`): before the sweep ended that is a loss; after, node 0 waited for it."""

    TYPE: ClassVar[str] = "bye"
    node_rank: int


NodeMessage = NodeHello | NodeVerdict | NodeSeen | NodeReady | TrialOut | ResultBack | NodeBye
KINDS: tuple[type[NodeMessage], ...] = (NodeHello, NodeVerdict, NodeSeen, NodeReady, TrialOut, ResultBack, NodeBye)
_CODEC: Codec[NodeMessage] = Codec(
    KINDS,
    hello=NodeHello,
    version=NODES_PROTOCOL_VERSION,
    mismatch="it speaks nodes protocol {theirs}, node 0 speaks {ours}",
    records={
        "NodeInfo": (NodeInfo.to_dict, record(NodeInfo)),
        "tuple[NodeInfo, ...]": (lambda infos: [i.to_dict() for i in infos], tuple_of(record(NodeInfo))),
        "TrialResult": (TrialResult.to_dict, record(TrialResult)),
    },
)


def encode(message: NodeMessage) -> str:
    """One JSON line (newline included), tagged with the message's type."""
    return _CODEC.encode(message)


def decode(line: str | bytes) -> NodeMessage:
    """The message a line carries. Raises ProtocolError for anything else, naming what is wrong."""
    return _CODEC.decode(line)


M = TypeVar("M", bound=Tagged)


def decode_as(kind: type[M], line: str | bytes) -> M:
    """The message of `kind` a store key holds; ProtocolError when it holds another kind."""
    message = decode(line)
    if not isinstance(message, kind):
        raise ProtocolError(f"expected a {kind.TYPE} message, got {type(message).TYPE}")
    return message


__all__ = [
    "KINDS",
    "NODES_PROTOCOL_VERSION",
    "NodeBye",
    "NodeHello",
    "NodeMessage",
    "NodeReady",
    "NodeSeen",
    "NodeVerdict",
    "ProtocolError",
    "ResultBack",
    "TrialOut",
    "decode",
    "decode_as",
    "encode",
]
