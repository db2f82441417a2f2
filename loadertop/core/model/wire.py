"""One JSON line per message: the codec shared by every protocol that crosses a process boundary (the runner's,
`protocol.py`; a live training job's, `live_protocol.py`; the many-node agents', `node_protocol.py`).

A protocol is a set of frozen dataclasses, each with a `TYPE` tag, and one hello kind that carries the protocol's
`version` and must be checked before anything else is read. Field types are limited to those in `_CODECS`, so
every message round-trips; a kind with another field type fails when its `Codec` is built (at import).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from loadertop.core.model.config import Settings, TrialConfig


class ProtocolError(ValueError):
    """A line that is not a message of this protocol version."""


class VersionMismatch(ProtocolError):
    """A hello of another version of the protocol: the peer is another loadertop (the message says which)."""


class Tagged(Protocol):
    """A message kind: a dataclass with its `TYPE` tag."""

    TYPE: ClassVar[str]
    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]


M = TypeVar("M", bound=Tagged)  # one protocol's messages: the union of its kinds


def _int(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ProtocolError(f"expected an integer, got {value!r}")


def _float(value: Any) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise ProtocolError(f"expected a number, got {value!r}")


def _str(value: Any) -> str:
    if isinstance(value, str):
        return value
    raise ProtocolError(f"expected a string, got {value!r}")


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise ProtocolError(f"expected true or false, got {value!r}")


def optional(read: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else read(value)


def tuple_of(read: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def read_all(value: Any) -> tuple[Any, ...]:
        if not isinstance(value, list):
            raise ProtocolError(f"expected a list, got {value!r}")
        return tuple(read(v) for v in value)

    return read_all


def mapping_of(read: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """from JSON for a mapping of names to values (an object on the wire)."""

    def read_all(value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise ProtocolError(f"expected an object, got {value!r}")
        return {str(k): read(v) for k, v in value.items()}

    return read_all


def record(kind: Any) -> Callable[[Any], Any]:
    """from JSON for a record type with `from_dict` (an object on the wire)."""

    def read(value: Any) -> Any:
        if not isinstance(value, dict):
            raise ProtocolError(f"expected an object, got {value!r}")
        return kind.from_dict(value)

    return read


def _same(value: Any) -> Any:
    return value


# annotation → (to JSON, from JSON)
_CODECS: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    "int": (_same, _int),
    "float": (_same, _float),
    "str": (_same, _str),
    "bool": (_same, _bool),
    "int | None": (_same, optional(_int)),
    "float | None": (_same, optional(_float)),
    "str | None": (_same, optional(_str)),
    "tuple[int, ...]": (list, tuple_of(_int)),
    "tuple[float, ...]": (list, tuple_of(_float)),
    "tuple[str, ...]": (list, tuple_of(_str)),
    "dict[str, str]": (dict, mapping_of(_str)),
    "TrialConfig": (TrialConfig.to_dict, record(TrialConfig)),
    "TrialConfig | None": (lambda c: None if c is None else c.to_dict(), optional(record(TrialConfig))),
    "Settings": (Settings.to_dict, record(Settings)),
}


class Codec(Generic[M]):
    """encode/decode for one protocol: its message kinds, and the hello kind whose `version` must match."""

    def __init__(
        self,
        kinds: Sequence[type[M]],
        hello: type[M],
        version: int,
        mismatch: str,
        records: Mapping[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] | None = None,
    ) -> None:
        # `records`: a protocol's own record types (annotation -> (to JSON, from JSON)), e.g. the nodes' TrialResult
        self._codecs = {**_CODECS, **(records or {})}
        for kind in kinds:  # a field of another type would not round-trip: fail at import, not mid-run
            for f in dataclasses.fields(kind):
                if str(f.type) not in self._codecs:
                    raise TypeError(f"{kind.__name__}.{f.name}: the protocol has no codec for {f.type}")
        self._by_type: dict[str, type[M]] = {kind.TYPE: kind for kind in kinds}
        self._hello = hello
        self.version = version
        self._mismatch = mismatch  # formatted with {theirs} and {ours}

    def encode(self, message: M) -> str:
        """One JSON line (newline included), tagged with the message's type."""
        data: dict[str, Any] = {"type": message.TYPE}
        for f in dataclasses.fields(message):
            data[f.name] = self._codecs[str(f.type)][0](getattr(message, f.name))
        return json.dumps(data) + "\n"

    def decode(self, line: str | bytes) -> M:
        """The message a line carries. Raises ProtocolError for anything else, naming what is wrong."""
        try:
            data = json.loads(line)
        except ValueError as exc:
            raise ProtocolError(f"not a JSON line ({exc}): {_clip(line)}") from None
        if not isinstance(data, dict):
            raise ProtocolError(f"not a JSON object: {_clip(line)}")
        tag = data.pop("type", None)
        kind = self._by_type.get(tag) if isinstance(tag, str) else None
        if kind is None:
            raise ProtocolError(f"unknown message type {tag!r}: {_clip(line)}")
        if kind is self._hello and data.get("version") != self.version:  # first, whatever else a newer hello has
            raise VersionMismatch(self._mismatch.format(theirs=repr(data.get("version")), ours=self.version))
        fields = {f.name: str(f.type) for f in dataclasses.fields(kind)}
        if unknown := sorted(set(data) - set(fields)):
            raise ProtocolError(f"{tag}: unknown fields {', '.join(unknown)}")
        values = {}
        for name, value in data.items():
            try:
                values[name] = self._codecs[fields[name]][1](value)
            except (ProtocolError, TypeError, ValueError, KeyError, AttributeError) as exc:
                raise ProtocolError(f"{tag}.{name}: {exc}") from None
        try:
            return kind(**values)
        except TypeError as exc:  # a required field is missing
            raise ProtocolError(f"{tag}: {exc}") from None


def _clip(line: str | bytes, limit: int = 200) -> str:
    text = line.decode(errors="replace") if isinstance(line, bytes) else line
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "…"
