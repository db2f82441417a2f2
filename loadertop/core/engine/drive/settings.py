"""Settings from what a user gave, built and checked in one place: the CLI and `loadertop.sweep()` both call
build_settings, so the same arguments give the same Settings and the same plan.

A value is a string as typed on the command line (`"0-8"`, `"32,64"`, `"on,off"`, `"0.1"`) or the Python value
the API takes (`[0, 2, 4]`, `64`, `True`, `0.1`); each Option's `kind` says how to read it. Bad input raises
UsageError with one line that names the flag.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from loadertop.core.datasets.errors import SpecError
from loadertop.core.datasets.names import check_factory_spec
from loadertop.core.machine.facts import usable_cpus
from loadertop.core.machine.guards import memory_total_mb, parse_mem_floor
from loadertop.core.model.config import (
    Option,
    Settings,
    UsageError,
    auto_counts,
    parse_bool_list,
    parse_int_list,
    parse_start_methods,
    parse_worker_counts,
    settings_options,
)


def build_settings(given: Mapping[str, Any]) -> Settings:
    """Settings from the user's values, keyed as the API's keywords (the flags with underscores: `batch_size`,
    `workers`, `dataset_args`, `skip_warmup`, ...); a missing or None value takes the default.

    Checks every value, then what only the values together or this machine can say: `--consumer` with
    `--step-ms`, `--workers auto` per rank on the CPUs this job may use, `--mem-floor` against its memory."""
    options = {opt.key: (name, opt) for name, opt in settings_options()}
    unknown = sorted(set(given) - set(options))
    if unknown:
        raise UsageError(f"unknown setting {unknown[0]!r} (the settings are: {', '.join(options)})")
    values: dict[str, Any] = {}
    for key, (name, opt) in options.items():
        value = given.get(key)
        value = opt.default if value is None else value
        if value is not None:
            values[name] = read(opt, value)
    workers = values.pop("workers")
    settings = Settings(**values)
    if settings.consumer and settings.step_ms:
        raise UsageError("--consumer runs your own step; drop --step-ms (it emulates one)")
    check_specs(settings)
    parse_mem_floor(settings.mem_floor, memory_total_mb())  # one line now rather than a traceback later
    if "thread" in settings.worker_methods:
        need_nodes()
    if workers == "auto":  # workers are per rank: each rank gets its share of the CPUs
        workers = auto_counts(max(1, usable_cpus() // settings.ranks), settings.search)
    return dataclasses.replace(settings, workers=workers)


def check_specs(settings: Settings) -> None:
    """A factory's file or name mistyped fails here, in milliseconds, with the close names: not in a runner after
    torch was imported."""
    for spec, what, flag in ((settings.dataset, "dataset", ""), (settings.consumer, "consumer", "--consumer: ")):
        try:
            if spec:
                check_factory_spec(spec, what)
        except SpecError as exc:
            raise UsageError(f"{flag}{exc}") from None


def need_nodes() -> None:
    """Thread workers run through torchdata.nodes, the `nodes` extra: one line when it is not installed."""
    import importlib.util

    try:
        found = importlib.util.find_spec("torchdata.nodes") is not None
    except (ImportError, ValueError):  # torchdata itself missing (or None in sys.modules)
        found = False
    if not found:
        raise UsageError('--worker-method thread needs torchdata.nodes: pip install "loadertop[graph]"')


def read(opt: Option, value: Any) -> Any:
    """One user value as its Settings field (for `workers`: "auto" stays, to be resolved on this machine)."""
    flag = opt.flag or opt.key
    return _READERS[opt.kind](opt, flag, value)


def _text(opt: Option, flag: str, value: Any) -> str:
    if not isinstance(value, str):
        raise UsageError(f"{flag} {value!r}: expected text")
    return value


def _size(opt: Option, flag: str, value: Any) -> str:
    # A size or share, checked against this machine's memory by build_settings; the API may give 0 for off.
    return "0" if value == 0 and not isinstance(value, bool) else _text(opt, flag, value)


def _choice(opt: Option, flag: str, value: Any) -> str:
    if value not in opt.choices:
        raise UsageError(f"{flag} {value!r}: choose from {', '.join(opt.choices)}")
    return str(value)


def _pairs(opt: Option, flag: str, value: Any) -> tuple[tuple[str, str], ...]:
    out = []
    for item in list(value.items()) if isinstance(value, Mapping) else _items(value):
        key, sep, text = _split(item)
        if not sep or not isinstance(key, str) or not key.isidentifier():
            raise UsageError(f"{flag} {item!r}: expected KEY=VALUE")
        if not isinstance(text, str):
            raise UsageError(f"{flag} {key}={text!r}: values are text, as on the command line")
        out.append((key, text))
    return tuple(out)


def _split(item: Any) -> tuple[Any, str, Any]:
    """`"KEY=VALUE"` or a (key, value) pair as key, "=", value; a separator of "" when it is neither."""
    if isinstance(item, str):
        return item.partition("=")
    if isinstance(item, tuple | list) and len(item) == 2:
        return item[0], "=", item[1]
    return None, "", None


def _workers(opt: Option, flag: str, value: Any) -> str | tuple[int, ...]:
    if isinstance(value, str):
        return "auto" if value.strip() == "auto" else parse_worker_counts(value)
    return parse_worker_counts(",".join(_whole(v, flag) for v in _items(value)))


def _ints(opt: Option, flag: str, value: Any) -> tuple[int, ...]:
    spec = value if isinstance(value, str) else ",".join(_whole(v, flag) for v in _items(value))
    return parse_int_list(spec, flag, minimum=int(opt.low))


def _bools(opt: Option, flag: str, value: Any) -> tuple[bool, ...]:
    if not isinstance(value, str):  # True/False as the command line spells them (it also takes 1/0, yes/no)
        value = ",".join(("on" if v else "off") if isinstance(v, bool) else str(v) for v in _items(value))
    return parse_bool_list(value, flag)


def _methods(opt: Option, flag: str, value: Any) -> tuple[str, ...]:
    return parse_start_methods(value if isinstance(value, str) else ",".join(map(str, _items(value))))


def _words(opt: Option, flag: str, value: Any) -> tuple[str, ...]:
    out: list[str] = []
    for part in value.split(",") if isinstance(value, str) else _items(value):
        word = str(part).strip()
        if word not in opt.choices:
            raise UsageError(f"{flag} {value!r}: {word!r} is not one of {', '.join(opt.choices)}")
        if word not in out:
            out.append(word)
    return tuple(out)


def _flag(opt: Option, flag: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise UsageError(f"{opt.key} {value!r}: expected True or False")
    return value


def _count(opt: Option, flag: str, value: Any) -> int:
    text = _whole(value, flag)
    try:
        number = int(text.strip())
    except ValueError:
        raise UsageError(f"{flag} {text!r}: {text.strip()!r} is not a whole number") from None
    if number < opt.low or (opt.high is not None and number > opt.high):
        allowed = f"from {opt.low:g} to {opt.high:g}" if opt.high is not None else f"at least {opt.low:g}"
        raise UsageError(f"{flag} {number}: must be {allowed}")
    return number


def _number(opt: Option, flag: str, value: Any) -> float:
    try:
        number = float(value) if not isinstance(value, bool) else float("nan")
    except (TypeError, ValueError):
        number = float("nan")
    if not number >= opt.low or (number == opt.low and not opt.zero_ok):  # NaN fails too
        raise UsageError(f"{flag} {value}: must be a {'non-negative' if opt.zero_ok else 'positive'} number")
    if opt.high is not None and number >= opt.high:
        raise UsageError(f"{flag} {number:g}: a fraction below {opt.high:g}, such as 0.05")
    return number


def _whole(value: Any, flag: str) -> str:
    """A Python whole number as the command line would spell it (so one parser checks both)."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise UsageError(f"{flag} {value!r}: {value!r} is not a whole number")
    return str(value)


def _items(value: Any) -> list[Any]:
    return list(value) if isinstance(value, Iterable) and not isinstance(value, str | bytes) else [value]


_READERS: dict[str, Callable[[Option, str, Any], Any]] = {
    "text": _text,
    "size": _size,
    "choice": _choice,
    "pairs": _pairs,
    "workers": _workers,
    "ints": _ints,
    "bools": _bools,
    "methods": _methods,
    "words": _words,
    "flag": _flag,
    "count": _count,
    "number": _number,
}
