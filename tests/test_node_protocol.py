"""The nodes protocol (model/node_protocol.py): every kind round-trips on the runner protocol's codec, a hello of
another nodes protocol version is refused in one line (by the codec, and by node 0's judge on every node), a key
holding another kind is refused; NodeTrial is made in the engine, so model/nodes.py never imports model/results.py.
No torch and no subprocess: node 0's judge runs against an in-memory store."""

from __future__ import annotations

import ast
import dataclasses
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_protocol import _FIELDS

from loadertop.core.engine import Launch
from loadertop.core.engine.nodes.merge import node_trial
from loadertop.core.model.config import Settings, TrialConfig, UsageError
from loadertop.core.model.node_protocol import (
    KINDS,
    NODES_PROTOCOL_VERSION,
    NodeBye,
    NodeHello,
    NodeMessage,
    NodeReady,
    NodeSeen,
    NodeVerdict,
    ProtocolError,
    ResultBack,
    TrialOut,
    decode,
    decode_as,
    encode,
)
from loadertop.core.model.nodes import NodeInfo, NodeTrial
from loadertop.core.model.results import TrialResult
from loadertop.core.nodes.join import hello, join

pytestmark = pytest.mark.unit

INFO = NodeInfo(1, "host-b", usable_cpus=8, mem_total_mb=16000.0, mem_available_mb=9000.0, ranks=2, loadertop="1.0")
CONFIG = TrialConfig(2, 32, 2, start_method="fork")
TRIAL = TrialResult(
    3, CONFIG, "ok", samples_per_s=640.0, rank_samples_per_s=(330.0, 310.0), worker_uss_mb=(12.5, 13.0),
    warnings=("same samples",), ranks=2,
)  # fmt: skip
SETTINGS = Settings(dataset="synthetic:cpu_ms=1", workers=(0, 2), ranks=2)
EXAMPLES: list[NodeMessage] = [
    NodeHello(NODES_PROTOCOL_VERSION, INFO, "1.0", "0123456789abcdef", SETTINGS),
    NodeVerdict(None, (dataclasses.replace(INFO, node_rank=0), INFO)),
    NodeVerdict("node 1 of 2 did not join within 3 s", ()),
    NodeSeen(1),
    NodeReady(4, 1),
    TrialOut(4, CONFIG),
    TrialOut(5, None),
    ResultBack(4, 1, TRIAL),
    ResultBack(4, 1, TrialResult(4, CONFIG, "failed", error="ValueError: bad sample 7")),
    NodeBye(1),
]


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda m: type(m).__name__)
def test_every_example_round_trips_as_one_tagged_json_line(message: NodeMessage) -> None:
    line = encode(message)
    assert line.endswith("\n") and "\n" not in line[:-1]
    assert json.loads(line)["type"] == type(message).TYPE
    assert decode(line) == message and decode(line.encode()) == message


def test_the_examples_cover_every_kind_and_the_tags_are_unique() -> None:
    assert {type(m) for m in EXAMPLES} == set(KINDS)
    assert len({kind.TYPE for kind in KINDS}) == len(KINDS)


# -- every kind, with generated values (the runner protocol's field strategies, and the nodes' own records) --------

_text = st.text(max_size=20)
_size = st.floats(0, 1e7, allow_nan=False)
_info = st.builds(NodeInfo, st.integers(0, 64), _text, st.integers(1, 512), _size, _size, st.integers(1, 8), _text)
_rate = st.none() | st.floats(0, 1e9, allow_nan=False)
_trial = st.builds(
    TrialResult,
    index=st.integers(-1, 1000),
    config=_FIELDS["TrialConfig"],
    status=st.sampled_from(["ok", "failed", "skipped"]),
    error=st.none() | _text,
    samples_per_s=_rate,
    rank_samples_per_s=st.lists(st.floats(0, 1e9, allow_nan=False), max_size=4).map(tuple),
    stall_fraction=_rate,
    warnings=st.lists(_text, max_size=3).map(tuple),
)
NODE_FIELDS = {**_FIELDS, "NodeInfo": _info, "tuple[NodeInfo, ...]": st.lists(_info, max_size=4).map(tuple)}
NODE_FIELDS["TrialResult"] = _trial
NODE_FIELDS["TrialConfig | None"] = st.none() | _FIELDS["TrialConfig"]


def _message(kind: type) -> st.SearchStrategy[NodeMessage]:
    fields = {f.name: NODE_FIELDS[str(f.type)] for f in dataclasses.fields(kind)}
    if kind is NodeHello:
        fields["version"] = st.just(NODES_PROTOCOL_VERSION)
    return st.builds(kind, **fields)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(KINDS).flatmap(_message))
def test_any_message_of_any_kind_round_trips(message: NodeMessage) -> None:
    assert decode(encode(message)) == message


# -- refusals -----------------------------------------------------------------------------------------------------


def test_a_hello_of_another_version_is_refused_before_anything_else() -> None:
    line = json.loads(encode(EXAMPLES[0]))
    line.update(version=99, settings="not even settings", colour="red")  # a newer hello may carry anything
    with pytest.raises(ProtocolError) as refused:
        decode(json.dumps(line))
    assert str(refused.value) == f"it speaks nodes protocol 99, node 0 speaks {NODES_PROTOCOL_VERSION}"


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ('{"info": {}, "protocol": 1, "version": "0.9"}', "unknown message type None"),  # a version 1 hello
        ('{"type": "ready", "index": 1}', "missing 1 required positional argument: 'node_rank'"),
        ('{"type": "trial", "index": 1, "config": "end"}', "trial.config: expected an object, got 'end'"),
        ('{"type": "verdict", "error": null, "nodes": [{"node_rank": 0}]}', "verdict.nodes: "),
        ('{"type": "result", "index": 1, "node_rank": 1, "trial": {}}', "result.trial: "),
    ],
)
def test_a_bad_message_is_refused_with_what_is_wrong(line: str, says: str) -> None:
    with pytest.raises(ProtocolError) as refused:
        decode(line)
    assert says in str(refused.value)


def test_a_key_holding_another_kind_is_refused() -> None:
    assert decode_as(NodeSeen, encode(NodeSeen(2))) == NodeSeen(2)
    with pytest.raises(ProtocolError, match="expected a trial message, got bye"):
        decode_as(TrialOut, encode(NodeBye(1)))


class MemoryStore:
    """The c10d store's calls the join makes (set, get, check), in memory."""

    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}

    def set(self, key: str, value: str) -> None:
        self.values[key] = value.encode()

    def get(self, key: str) -> bytes:
        return self.values[key]

    def check(self, keys: list[str]) -> bool:
        return all(k in self.values for k in keys)


def _launch(rank: int) -> Launch:
    return Launch(node_rank=rank, nodes=2, master_addr="127.0.0.1", master_port=1, launcher="torchrun")


def test_node_0_refuses_a_hello_of_another_version_in_one_line_on_every_node() -> None:
    store = MemoryStore()
    theirs = json.loads(encode(hello(SETTINGS, 1)))
    store.set("hello/1", json.dumps({**theirs, "version": 99}))
    store.set("seen/1", encode(NodeSeen(1)))  # node 1 read the verdict: node 0 need not wait for it
    with pytest.raises(UsageError) as refused:
        join(store, _launch(0), dataclasses.replace(SETTINGS, join_timeout=2.0))
    said = str(refused.value)
    assert said == (
        f"node 1 of 2: it speaks nodes protocol 99, node 0 speaks {NODES_PROTOCOL_VERSION}; "
        f"install the same loadertop on every node"
    )
    assert decode_as(NodeVerdict, store.get("verdict")) == NodeVerdict(said, ())  # node 1 raises the same line
    with pytest.raises(UsageError, match=f"^{said}$"):
        join(store, _launch(1), dataclasses.replace(SETTINGS, join_timeout=2.0))


def test_two_nodes_join_through_typed_messages() -> None:
    store = MemoryStore()
    run = dataclasses.replace(SETTINGS, join_timeout=5.0)
    got: dict[int, Any] = {}
    follower = threading.Thread(target=lambda: got.setdefault(1, join(store, _launch(1), run)))
    follower.start()
    got[0] = join(store, _launch(0), run)
    follower.join(10)
    assert [i.node_rank for i in got[0]] == [0, 1] and got[1] == got[0]
    assert isinstance(decode(store.get("hello/1")), NodeHello)
    assert decode(store.get("seen/1")) == NodeSeen(1)


# -- NodeTrial is made in the engine ------------------------------------------------------------------------------


def test_node_trial_keeps_a_nodes_own_figures() -> None:
    share = node_trial(1, TRIAL)
    assert share == NodeTrial(
        1, "ok", samples_per_s=640.0, rank_samples_per_s=(330.0, 310.0), worker_uss_mb=(12.5, 13.0),
        warnings=("same samples",),
    )  # fmt: skip
    alone = node_trial(0, TrialResult(0, CONFIG, "ok", samples_per_s=100.0))
    assert alone.rank_samples_per_s == (100.0,)  # one rank: its rate is the node's


def test_model_nodes_imports_no_results() -> None:
    source = Path(__file__).parents[1] / "loadertop" / "core" / "model" / "nodes.py"
    imported = {
        node.module
        for node in ast.walk(ast.parse(source.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert "loadertop.core.model.results" not in imported, imported
    assert not hasattr(NodeTrial, "of")


@pytest.mark.unit
def test_a_node_told_no_more_trials_after_node_0_stopped_exits_as_stopped() -> None:
    """Node 0 stopped (Ctrl-C) says "stop" and, closing, "no more trials" for the trial a node waits on. Whichever
    the node hears first, its heartbeat's stop or that, it exits 130: not 0, as a sweep that ended as planned."""
    from torch.distributed import HashStore

    from loadertop.core.engine.nodes.launch import Launch
    from loadertop.core.model.node_protocol import TrialOut
    from loadertop.core.nodes.link import EXIT_STOPPED, StoreLink

    infos = tuple(NodeInfo(k, f"host-{k}", 2, 8000.0, 4000.0) for k in (0, 1))
    for stopped in (True, False):
        store = HashStore()
        if stopped:
            store.add("stop", 1)
        store.set("trial/0", encode(TrialOut(0, None)))
        link = StoreLink(store, HashStore(), Launch(1, 2, "127.0.0.1", 1, "torchrun"), infos)
        try:
            assert link.next_config(lambda: None) is None
            if stopped:
                assert link.exit_code == EXIT_STOPPED and link.reason == "node 0 (host-0) stopped the sweep"
            else:  # the sweep ended as planned
                assert link.exit_code == 0 and link.reason is None
        finally:
            link.close()
