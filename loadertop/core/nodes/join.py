"""Joining a many-node sweep: every agent says hello, node 0 checks them all and gives its verdict.

A hello (model/node_protocol.py's NodeHello) carries the nodes protocol version, the node's facts (NodeInfo), its
loadertop version and its Settings with their digest (node_rank left out).
Node 0 waits up to --join-timeout for every hello; a node missing, another version or
other settings refuse the sweep on every node with one line naming what differs (exit 2).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import socket
import threading
import time
from functools import partial
from typing import Any

from loadertop.core.engine.nodes import Launch
from loadertop.core.machine.facts import mem_available_mb, usable_cpus
from loadertop.core.machine.guards import memory_total_mb
from loadertop.core.model.config import Settings, UsageError, settings_options
from loadertop.core.model.node_protocol import NodeHello, NodeSeen, NodeVerdict, ProtocolError, decode_as, encode
from loadertop.core.model.nodes import NODES_PROTOCOL_VERSION, NodeInfo
from loadertop.core.nodes.store import StoreGone, guarded, wait_keys


def loadertop_version() -> str:
    """The installed loadertop's version (the package's own __init__ would pull in the training job's side)."""
    try:
        return importlib.metadata.version("loadertop")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


VERDICT_GRACE_S = 5.0  # a follower waits this much longer than node 0 for the verdict (node 0 started later)


def comparable(settings: Settings) -> dict[str, Any]:
    """What must be equal on every node: the settings without this node's rank."""
    data: dict[str, Any] = json.loads(json.dumps(settings.to_dict(), default=str))
    data.pop("node_rank", None)
    return data


def digest(settings: Settings) -> str:
    return hashlib.sha256(json.dumps(comparable(settings), sort_keys=True).encode()).hexdigest()[:16]


def node_info(settings: Settings, node_rank: int) -> NodeInfo:
    return NodeInfo(
        node_rank=node_rank,
        hostname=socket.gethostname(),
        usable_cpus=usable_cpus(),
        mem_total_mb=round(memory_total_mb(), 1),
        mem_available_mb=round(mem_available_mb(), 1),
        ranks=settings.ranks,
        loadertop=loadertop_version(),
    )


def hello(settings: Settings, node_rank: int) -> NodeHello:
    return NodeHello(
        version=NODES_PROTOCOL_VERSION,
        info=node_info(settings, node_rank),
        loadertop=loadertop_version(),
        digest=digest(settings),
        settings=settings,
    )


def difference(mine: NodeHello, theirs: NodeHello) -> str | None:
    """What makes node K's hello unacceptable to node 0, in words; None when they may run together. (A hello of
    another nodes protocol never gets here: decoding it refuses it.)"""
    who = f"node {theirs.info.node_rank} ({theirs.info.hostname})"
    if theirs.loadertop != mine.loadertop:
        return (
            f"{who} runs loadertop {theirs.loadertop}, node 0 runs {mine.loadertop}; "
            f"install the same loadertop on every node"
        )
    if theirs.digest == mine.digest:
        return None
    a, b = comparable(mine.settings), comparable(theirs.settings)
    names = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k)) or ["(digest)"]
    shown = ", ".join(f"{_flag(k)} {_value(b.get(k))} (node 0: {_value(a.get(k))})" for k in names[:3])
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    return f"{who} has other settings: {shown}{more}; give every node the same arguments"


def _flag(name: str) -> str:
    flags = {field: opt.flag for field, opt in settings_options() if opt.flag}
    return flags.get(name, name)


def _value(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(_value(v) for v in value) or "(none)"
    return "(none)" if value is None else str(value)


def join(store: Any, launch: Launch, settings: Settings) -> tuple[NodeInfo, ...]:
    """Say hello and wait for node 0's verdict; node 0 gives it. Every node's facts in rank order, or UsageError
    (one line) on every node that got that far."""
    mine = hello(settings, launch.node_rank)
    never = threading.Event()
    try:
        guarded(lambda: store.set(f"hello/{launch.node_rank}", encode(mine)))
        if launch.node_rank == 0:
            return _judge(store, launch, settings, mine, never)
        deadline = time.monotonic() + settings.join_timeout + VERDICT_GRACE_S
        if wait_keys(store, ["verdict"], deadline, never):
            raise UsageError(
                f"node {launch.node_rank} of {launch.nodes}: node 0 gave no verdict within "
                f"{settings.join_timeout + VERDICT_GRACE_S:g} s (did every node start?)"
            )
        raw = guarded(lambda: store.get("verdict"))
        guarded(lambda: store.set(f"seen/{launch.node_rank}", encode(NodeSeen(launch.node_rank))))
        verdict = decode_as(NodeVerdict, raw)
    except StoreGone as exc:
        raise UsageError(
            f"node {launch.node_rank} of {launch.nodes}: lost node 0's store while joining ({exc})"
        ) from None
    except ProtocolError as exc:
        raise UsageError(
            f"node {launch.node_rank} of {launch.nodes}: node 0's verdict is not this loadertop's nodes protocol "
            f"{NODES_PROTOCOL_VERSION} ({exc}); install the same loadertop on every node"
        ) from None
    if verdict.error:
        raise UsageError(verdict.error)
    return verdict.nodes


def _judge(
    store: Any, launch: Launch, settings: Settings, mine: NodeHello, never: threading.Event
) -> tuple[NodeInfo, ...]:
    keys = [f"hello/{k}" for k in range(launch.nodes)]
    missing = wait_keys(store, keys, time.monotonic() + settings.join_timeout, never)
    error: str | None = None
    hellos: list[NodeHello] = []
    if missing:
        ranks = [key.split("/")[1] for key in missing]
        which = f"node {ranks[0]}" if len(ranks) == 1 else "nodes " + ", ".join(ranks)
        error = f"{which} of {launch.nodes} did not join within {settings.join_timeout:g} s"
    else:
        hellos, error = _read_hellos(store, launch)
        error = error or next((d for h in hellos[1:] if (d := difference(mine, h)) is not None), None)
    infos = tuple(h.info for h in hellos) if error is None else ()
    guarded(lambda: store.set("verdict", encode(NodeVerdict(error, infos))))
    if error is not None:
        # Node 0 may serve the store itself: stay until the nodes that joined have read why (a few seconds).
        joined = [f"seen/{k}" for k in range(1, launch.nodes) if f"hello/{k}" not in missing]
        wait_keys(store, joined, time.monotonic() + VERDICT_GRACE_S, never)
        raise UsageError(error)
    return infos


def _read_hellos(store: Any, launch: Launch) -> tuple[list[NodeHello], str | None]:
    """Every node's hello, or why one cannot be read: another nodes protocol version is refused first."""
    hellos = []
    for k in range(launch.nodes):
        raw = guarded(partial(store.get, f"hello/{k}"))
        try:
            hellos.append(decode_as(NodeHello, raw))
        except ProtocolError as exc:
            return [], f"node {k} of {launch.nodes}: {exc}; install the same loadertop on every node"
    return hellos, None
