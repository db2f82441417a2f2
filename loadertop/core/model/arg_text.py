"""A DataLoader argument's value as the text a snippet pastes: literals as Python writes them, a function by its
name, any other object as its class ("DistributedSampler(...)": yours, built as you built it). Plain Python, so the
runner (a dataset factory's mapping) and the training job's side (a live loader) write them the same way."""

from __future__ import annotations

from typing import Any


def arg_text(value: Any) -> str:
    if value is None or isinstance(value, bool | int | float | str):
        return repr(value) if not isinstance(value, str) else f'"{value}"'
    name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
    if callable(value) and isinstance(name, str) and name.replace(".", "").isidentifier():
        return name  # a function or class of theirs, by the name they gave it
    if callable(value) and isinstance(name, str) and "<lambda>" in name:
        return "lambda ...: ..."  # theirs, inline: the snippet cannot repeat its body
    return f"{type(value).__name__}(...)"


def loader_arg_texts(extra: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """A factory's DataLoader keyword arguments as (name, text) pairs, in its order."""
    return tuple((name, arg_text(value)) for name, value in extra.items())
