"""`KIND:PATH[:k=v,...]` dataset specs: the path and the options, one parser for every kind that has them."""

from __future__ import annotations

from collections.abc import Mapping

from loadertop.core.datasets.errors import SpecError


def split_options(
    kind: str, rest: str, kwargs: Mapping[str, str], allowed: tuple[str, ...], what: str = "path"
) -> tuple[str, dict[str, str]]:
    """`PATH[:k=v,...]` plus the --dataset-arg options into (PATH, options), each one of `allowed`. The spec's own
    options fill in what --dataset-arg did not say (an explicit flag wins)."""
    path, options = rest, dict(kwargs)
    head, sep, tail = rest.rpartition(":")
    if sep and "=" in tail:
        path = head
        for item in filter(None, (part.strip() for part in tail.split(","))):
            key, eq, value = item.partition("=")
            if not eq:
                raise SpecError(f"{kind} option {item!r}: expected key=value")
            options.setdefault(key.strip(), value.strip())
    if not path:
        raise SpecError(f"dataset spec '{kind}:' needs a {what}: {kind}:PATH")
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise SpecError(f"{kind} option {unknown[0]!r} is not one of {', '.join(allowed)}")
    return path, options


def whole(kind: str, key: str, text: str, low: int) -> int:
    """A whole-number option, at least `low`; SpecError naming the option otherwise."""
    try:
        value = int(text)
    except ValueError:
        raise SpecError(f"{kind} option {key}={text!r} is not a whole number") from None
    if value < low:
        raise SpecError(
            f"{kind} option {key}={value}: " + ("cannot be negative" if low == 0 else f"must be at least {low}")
        )
    return value
