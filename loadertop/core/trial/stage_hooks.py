"""The stages the dataset names itself, timed by hooks put in place and taken out again: each step of its transforms
(`transform`, `transforms`, `target_transform`: a torchvision Compose or transforms.v2.Compose, anything with a
`.transforms` list, a list, an nn.Sequential, or one callable) and its `.loader` (ImageFolder's read and decode),
on the dataset and one level down through `.dataset` (a Subset and the like).

A hook adds two clock reads per call (about 1 µs); it records only while its HookSet is recording, so the profiled
rounds run through it without counting (trial/stage_rounds.py).
"""

from __future__ import annotations

import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

HOLDER_ATTRS = ("transform", "transforms", "target_transform")
# torchvision's own loaders: Image.open, then convert("RGB") (which reads and decodes the pixels).
PIL_LOADERS = ("pil_loader", "default_loader")


@dataclass
class Tally:
    """One hooked stage's time while recording, over every call."""

    name: str
    kind: str  # "transform" or "read+decode"
    recording: list[bool]  # shared by the HookSet: one switch for every hook
    wall_s: float = 0.0
    cpu_s: float = 0.0
    calls: int = 0
    out_bytes: float = 0.0  # what the calls returned (a loader's decoded image)
    measure_output: bool = False

    def add(self, wall: float, cpu: float, out: Any) -> None:
        if self.recording[0]:
            self.wall_s += wall
            self.cpu_s += cpu
            self.calls += 1
            if self.measure_output:
                self.out_bytes += decoded_bytes(out)


def decoded_bytes(value: Any) -> int:
    """The bytes a decoded value holds: a PIL image, a NumPy array, a tensor; 0 for anything else."""
    if isinstance(value, torch.Tensor):
        return int(value.numel() * value.element_size())
    nbytes = getattr(value, "nbytes", None)
    if isinstance(nbytes, int):
        return nbytes
    size, bands = getattr(value, "size", None), getattr(value, "getbands", None)
    if isinstance(size, tuple) and len(size) == 2 and callable(bands):
        return int(size[0] * size[1] * len(bands()))
    return 0


class Timed:
    """A step or a loader, called through: its time goes to its tally."""

    def __init__(self, inner: Callable[..., Any], tally: Tally) -> None:
        self.inner = inner
        self.tally = tally

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        wall, cpu = time.perf_counter(), time.process_time()
        out = self.inner(*args, **kwargs)
        self.tally.add(time.perf_counter() - wall, time.process_time() - cpu, out)
        return out


class TimedModule(torch.nn.Module):
    """A step of an nn.Sequential, which holds modules only."""

    def __init__(self, inner: torch.nn.Module, tally: Tally) -> None:
        super().__init__()
        self.inner = inner
        self.tally = tally

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        wall, cpu = time.perf_counter(), time.process_time()
        out = self.inner(*args, **kwargs)
        self.tally.add(time.perf_counter() - wall, time.process_time() - cpu, out)
        return out


@dataclass
class Site:
    """Where a hook goes: an attribute of an object, or an item of a list or an nn.Sequential."""

    owner: Any
    key: str | int
    original: Any
    tally: Tally
    own_attr: bool = True  # the attribute was the instance's own (else it came from the class: deleted on restore)

    def install(self) -> None:
        if isinstance(self.key, str):
            setattr(self.owner, self.key, Timed(self.original, self.tally))
        elif isinstance(self.owner, torch.nn.Sequential):
            self.owner[self.key] = TimedModule(self.original, self.tally)
        else:
            self.owner[self.key] = Timed(self.original, self.tally)

    def restore(self) -> None:
        if isinstance(self.key, str):
            if self.own_attr:
                setattr(self.owner, self.key, self.original)
            else:
                delattr(self.owner, self.key)
        else:
            self.owner[self.key] = self.original


@dataclass
class HookSet:
    """Every hook found on a dataset: installed and restored together."""

    sites: list[Site] = field(default_factory=list)
    recording: list[bool] = field(default_factory=lambda: [False])
    installed: bool = False

    @property
    def tallies(self) -> list[Tally]:
        return [site.tally for site in self.sites]

    def install(self, record: bool) -> None:
        self.recording[0] = record
        if not self.installed:
            for site in self.sites:
                site.install()
            self.installed = True

    def restore(self) -> None:
        self.recording[0] = False
        if self.installed:
            for site in reversed(self.sites):
                site.restore()
            self.installed = False

    def wrapper_codes(self) -> set[Any]:
        """The hooks' own code objects, as a profile names them."""
        return {Timed.__call__.__code__, TimedModule.forward.__code__}


def _attr(owner: Any, name: str) -> Any:
    try:
        return getattr(owner, name, None)
    except Exception:  # a property that fails: nothing to hook there
        return None


def holders(dataset: Any) -> Iterator[Any]:
    """The dataset, and the one it wraps (`.dataset`), if any."""
    yield dataset
    inner = _attr(dataset, "dataset")
    if inner is not None and inner is not dataset and not isinstance(inner, str | bytes):
        yield inner


def steps_of(value: Any) -> list[Any] | torch.nn.Sequential | None:
    """The steps of a composite transform, to be hooked in place (a list, an nn.Sequential, or a Compose's
    `.transforms` list); None for anything else."""
    if isinstance(value, list | torch.nn.Sequential):
        return value
    inner = _attr(value, "transforms")
    return inner if isinstance(inner, list | torch.nn.Sequential) else None


def step_name(step: Any) -> str:
    """A function by its name, anything else (a transform object) by its class."""
    if isinstance(step, types.FunctionType | types.BuiltinFunctionType | types.MethodType):
        return "lambda" if step.__name__ == "<lambda>" else step.__name__
    return type(step).__name__


def loader_name(loader: Any) -> str:
    name = getattr(loader, "__name__", type(loader).__name__)
    return "read+decode (PIL.Image.open/convert)" if name in PIL_LOADERS else f"read+decode (loader: {name})"


def _own(holder: Any, attr: str) -> bool:
    return attr in getattr(holder, "__dict__", {})


def find_hooks(dataset: Any) -> HookSet:
    """The hooks a dataset's transforms and loader take (none installed yet)."""
    hooks = HookSet()
    seen: set[int] = set()  # a Compose reachable twice (transform and transforms) is hooked once
    names: dict[str, int] = {}

    def add(owner: Any, key: str | int, original: Any, name: str, kind: str, own_attr: bool = True) -> None:
        names[name] = names.get(name, 0) + 1
        label = name if names[name] == 1 else f"{name} #{names[name]}"
        tally = Tally(label, kind, hooks.recording, measure_output=kind == "read+decode")
        hooks.sites.append(Site(owner, key, original, tally, own_attr))

    for holder in holders(dataset):
        for attr in HOLDER_ATTRS:
            value = _attr(holder, attr)
            # A torchvision StandardTransform wraps transform and target_transform: hooked through those instead.
            if value is None or _attr(value, "transform") is not None:
                continue
            steps = steps_of(value)
            if id(value if steps is None else steps) in seen:
                continue
            seen.add(id(value if steps is None else steps))
            prefix = "target: " if attr == "target_transform" else ""
            if steps is not None:
                for index, step in enumerate(list(steps)):
                    add(steps, index, step, prefix + step_name(step), "transform")
            elif callable(value):
                add(holder, attr, value, prefix + step_name(value), "transform", _own(holder, attr))
        loader = _attr(holder, "loader")
        if callable(loader) and not isinstance(loader, type) and id(loader) not in seen:
            seen.add(id(loader))
            add(holder, "loader", loader, loader_name(loader), "read+decode", _own(holder, "loader"))
    return hooks
