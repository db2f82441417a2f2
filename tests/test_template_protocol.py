"""The runner template's protocol (model/template_protocol.py): typed messages on the wire codec, a template of
another version refused, a malformed request named."""

from __future__ import annotations

import dataclasses
import json
import resource

import pytest

from loadertop.core.model.template_protocol import (
    TEMPLATE_PROTOCOL_VERSION,
    ForkRunner,
    KeepWarm,
    RunnerForked,
    TemplateReady,
    decode,
    encode,
)
from loadertop.core.model.wire import ProtocolError, VersionMismatch

pytestmark = pytest.mark.unit


def test_each_message_round_trips() -> None:
    request = ForkRunner(
        env={"PATH": "/usr/bin", "EMPTY": "", "EQ": "a=b"},
        cwd="/tmp",
        limits={"RLIMIT_NOFILE": (200, resource.RLIM_INFINITY)},
        cpus=(0, 1),
        umask=0o022,
    )
    stages = dataclasses.replace(request, main="stages")
    for message in (TemplateReady(version=TEMPLATE_PROTOCOL_VERSION, pid=7), request, stages, RunnerForked(pid=8),
                    KeepWarm()):  # fmt: skip
        assert decode(encode(message)) == message


def test_a_template_of_another_version_is_refused_by_its_first_word() -> None:
    with pytest.raises(VersionMismatch, match="protocol 999"):
        decode(json.dumps({"type": "ready", "version": 999, "pid": 7}).encode())


@pytest.mark.parametrize(
    ("datagram", "named"),
    [
        ({"type": "fork", "env": {"A": 1}, "cwd": "/", "limits": {}, "cpus": [], "umask": 18}, "fork.env"),
        ({"type": "fork", "env": {}, "cwd": "/", "limits": {"RLIMIT_NOFILE": [1]}, "cpus": [], "umask": 18}, "limits"),
        ({"type": "forked"}, "pid"),
        ({"pid": 3}, "unknown message type"),
    ],
)
def test_a_malformed_message_is_named(datagram: dict[str, object], named: str) -> None:
    with pytest.raises(ProtocolError, match=named):
        decode(json.dumps(datagram).encode())
