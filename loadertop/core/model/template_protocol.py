"""The runner template's protocol: what the driver (engine/drive/runner_start.py) and the runner template
(trial/runner_template.py) say over their socket, one datagram a message, on the wire codec (wire.py).

The template's first word is TemplateReady, with TEMPLATE_PROTOCOL_VERSION: a template of another loadertop (an
upgrade under a long-lived notebook) is refused in one line and never asked to fork. Then each ForkRunner, sent with
the runner's stdin, stdout and stderr as passed descriptors, is answered by RunnerForked with the new runner's pid; a
KeepWarm (a sweep still running) only keeps it from leaving idle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from loadertop.core.model.wire import Codec, ProtocolError, mapping_of

TEMPLATE_PROTOCOL_VERSION = 1


@dataclass(frozen=True)
class TemplateReady:
    """The template has imported torch and the runner's modules, and waits for requests."""

    TYPE: ClassVar[str] = "ready"
    version: int  # TEMPLATE_PROTOCOL_VERSION
    pid: int


@dataclass(frozen=True)
class ForkRunner:
    """Fork a runner with this environment and working directory, and what an exec'd runner would inherit from its
    driver at this moment (not at the template's start): resource limits by RLIMIT_ name (soft, hard), the CPUs it
    may run on, the umask."""

    TYPE: ClassVar[str] = "fork"
    env: dict[str, str]
    cwd: str
    limits: dict[str, tuple[int, int]]
    cpus: tuple[int, ...]
    umask: int
    main: str = "runner"  # what the child runs: "runner" (trial/runner.py), "stages" (trial/stages_main.py)


@dataclass(frozen=True)
class RunnerForked:
    """The runner's pid (the driver follows it through a pidfd; the kernel reaps it)."""

    TYPE: ClassVar[str] = "forked"
    pid: int


@dataclass(frozen=True)
class KeepWarm:
    """A sweep is still running: not idle (its stages child may be forked at its end). Not answered."""

    TYPE: ClassVar[str] = "keep"


TemplateMessage = TemplateReady | ForkRunner | RunnerForked | KeepWarm


def _pair(value: Any) -> tuple[int, int]:
    if not (isinstance(value, list) and len(value) == 2 and all(type(v) is int for v in value)):
        raise ProtocolError(f"expected [soft, hard], got {value!r}")
    return value[0], value[1]


_CODEC: Codec[TemplateMessage] = Codec(
    (TemplateReady, ForkRunner, RunnerForked, KeepWarm),
    hello=TemplateReady,
    version=TEMPLATE_PROTOCOL_VERSION,
    mismatch="the runner template speaks protocol {theirs}, this loadertop {ours}",
    records={
        "dict[str, tuple[int, int]]": (lambda limits: {k: list(v) for k, v in limits.items()}, mapping_of(_pair)),
    },
)


def encode(message: TemplateMessage) -> bytes:
    """One datagram: the message as a JSON line, tagged with its type."""
    return _CODEC.encode(message).encode()


def decode(datagram: bytes) -> TemplateMessage:
    """The message a datagram carries. Raises ProtocolError (VersionMismatch for a template of another version)."""
    return _CODEC.decode(datagram)
