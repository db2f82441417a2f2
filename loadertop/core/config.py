"""What one trial measures (TrialConfig) and what a whole sweep is asked to do (Settings)."""

from __future__ import annotations

import itertools
import multiprocessing
from dataclasses import asdict, dataclass, field
from typing import Any


class UsageError(ValueError):
    """Bad input from the user: reported as one line, exit code 2."""


def default_start_method() -> str:
    # The first entry is this platform's default: what the user's training script gets.
    return multiprocessing.get_all_start_methods()[0]


@dataclass(frozen=True)
class TrialConfig:
    """One DataLoader configuration. Fields that do not apply with 0 workers are None/False."""

    num_workers: int
    batch_size: int
    prefetch_factor: int | None = None
    pin_memory: bool = False
    persistent_workers: bool = False
    start_method: str | None = None

    def label(self) -> str:
        parts = [f"w={self.num_workers}", f"bs={self.batch_size}"]
        if self.num_workers:
            parts.append(f"pf={self.prefetch_factor}")
        if self.pin_memory:
            parts.append("pin")
        if self.persistent_workers:
            parts.append("persist")
        if self.num_workers and self.start_method:
            parts.append(self.start_method)
        return " ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialConfig:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass(frozen=True)
class Settings:
    """Everything a sweep needs, as plain values (JSON-friendly, picklable)."""

    dataset: str = "synthetic"
    dataset_args: tuple[tuple[str, str], ...] = ()
    workers: tuple[int, ...] = (0, 1, 2, 4)
    batch_sizes: tuple[int, ...] = (32,)
    prefetch_factors: tuple[int, ...] = (2,)
    pin_memory: tuple[bool, ...] = (False,)
    persistent_workers: tuple[bool, ...] = (False,)
    start_methods: tuple[str, ...] = field(default_factory=lambda: (default_start_method(),))
    step_ms: float = 0.0
    trial_seconds: float = 8.0
    trial_timeout: float = 60.0  # no batch for this long: the trial is hung, kill it
    interval: float = 0.5
    tolerance: float = 0.05
    target_spread: float = 0.05
    min_blocks: int = 5
    block_seconds: float = 0.3
    skip_warmup: bool = True
    search: str = "grid"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Settings:
        kwargs = {}
        for name in cls.__dataclass_fields__:
            if name in data:
                value = data[name]
                if isinstance(value, list):
                    value = tuple(tuple(v) if isinstance(v, list) else v for v in value)
                kwargs[name] = value
        return cls(**kwargs)

    def trial_configs(self) -> list[TrialConfig]:
        """The sweep space, num_workers innermost-last so the table reads as a climb per setting.

        Knobs that do not apply with 0 workers collapse, so they are measured once, not once per value.
        """
        seen: dict[TrialConfig, None] = {}
        for bs, pf, pin, persist, method, nw in itertools.product(
            self.batch_sizes,
            self.prefetch_factors,
            self.pin_memory,
            self.persistent_workers,
            self.start_methods,
            self.workers,
        ):
            if nw == 0:
                config = TrialConfig(0, bs, None, pin, False, None)
            else:
                config = TrialConfig(nw, bs, pf, pin, persist, method)
            seen.setdefault(config, None)
        return list(seen)


def parse_workers(spec: str, usable_cpus: int) -> tuple[int, ...]:
    """`0-16`, `0,2,4,8`, `1-8:2` or `auto` into a sorted tuple of worker counts."""
    spec = spec.strip()
    if spec == "auto":
        return auto_workers(usable_cpus)
    values: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        if not part:
            raise UsageError(f"--workers {spec!r}: empty item")
        step = 1
        if ":" in part:
            part, step_text = part.split(":", 1)
            step = _int(step_text, spec)
            if step < 1:
                raise UsageError(f"--workers {spec!r}: step must be at least 1")
        if "-" in part.lstrip("-"):
            lo_text, hi_text = part.rsplit("-", 1) if not part.startswith("-") else (part, "")
            lo, hi = _int(lo_text, spec), _int(hi_text, spec)
            if hi < lo:
                raise UsageError(f"--workers {spec!r}: range {lo}-{hi} runs backwards")
            values.update(range(lo, hi + 1, step))
        else:
            values.add(_int(part, spec))
    if any(v < 0 for v in values):
        raise UsageError(f"--workers {spec!r}: worker counts cannot be negative")
    if max(values) > 1024:
        raise UsageError(f"--workers {spec!r}: more than 1024 workers is not a sensible sweep")
    return tuple(sorted(values))


def auto_workers(usable_cpus: int) -> tuple[int, ...]:
    """0, 1, 2, then a ladder up to twice the usable CPUs (at least 8): past the cores is where
    I/O-bound loaders still gain and CPU-bound ones show their plateau."""
    bound = max(8, 2 * usable_cpus)
    ladder = {0, 1, 2}
    n = 2
    while n < bound:
        ladder.update({n, n + n // 2})
        n *= 2
    ladder.add(bound)
    return tuple(sorted(v for v in ladder if v <= bound))


def parse_bool_list(spec: str, flag: str) -> tuple[bool, ...]:
    words = {"on": True, "true": True, "yes": True, "1": True, "off": False, "false": False, "no": False, "0": False}
    out: list[bool] = []
    for part in spec.split(","):
        key = part.strip().lower()
        if key not in words:
            raise UsageError(f"{flag} {spec!r}: expected on/off values, got {part.strip()!r}")
        if words[key] not in out:
            out.append(words[key])
    return tuple(out)


def parse_int_list(spec: str, flag: str, minimum: int = 1) -> tuple[int, ...]:
    out: list[int] = []
    for part in spec.split(","):
        value = _int(part, spec, flag)
        if value < minimum:
            raise UsageError(f"{flag} {spec!r}: values must be at least {minimum}")
        if value not in out:
            out.append(value)
    return tuple(out)


def parse_start_methods(spec: str) -> tuple[str, ...]:
    allowed = multiprocessing.get_all_start_methods()
    out: list[str] = []
    for part in spec.split(","):
        method = part.strip()
        if method not in allowed:
            raise UsageError(f"--start-method {spec!r}: {method!r} is not one of {', '.join(allowed)}")
        if method not in out:
            out.append(method)
    return tuple(out)


def _int(text: str, spec: str, flag: str = "--workers") -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise UsageError(f"{flag} {spec!r}: {text.strip()!r} is not a whole number") from None
