"""A "what if" checked for real: the largest hooked stage's outputs computed once (a batch or two of samples), then the
0-worker DataLoader run with that stage replaced by its recorded outputs, in turn. Its CPU and wall time per sample
are what the pipeline costs were the stage cached; the engine sets the ceiling they give beside the predicted "were
it free" one (engine/verdict/stage_verdict.py).

The outputs are replayed in the order they were recorded, whatever sample asks: the rate is what is measured, not the
samples' content. The steps after the stage run as they are (random ones stay random). A step of an nn.Sequential is
not replayed (the Sequential holds modules only).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from loadertop.core.model.stages import Replay, Stage
from loadertop.core.trial.stage_hooks import HookSet, Site
from loadertop.core.trial.stage_rounds import rows_of

BATCHES = 2  # recorded: the replay cycles through this many batches of outputs
MIN_BATCHES = 2  # timed, at least, whatever the budget


class Recorder:
    def __init__(self, inner: Callable[..., Any], kept: list[Any]) -> None:
        self.inner = inner
        self.kept = kept

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        out = self.inner(*args, **kwargs)
        self.kept.append(out)
        return out


class Replayed:
    def __init__(self, outputs: list[Any]) -> None:
        self.outputs = outputs
        self.calls = 0

    def __call__(self, *_args: Any, **_kwargs: Any) -> Any:
        out = self.outputs[self.calls % len(self.outputs)]
        self.calls += 1
        return out


def put(site: Site, step: Callable[..., Any]) -> None:
    if isinstance(site.key, str):
        setattr(site.owner, site.key, step)
    else:
        site.owner[site.key] = step


def timed_batches(batches: Iterator[Any], batch_size: int, budget_s: float) -> tuple[int, float, float]:
    """(samples, wall s, CPU s) of the loader's batches for about `budget_s`, MIN_BATCHES at least."""
    count, samples, wall, cpu = 0, 0, time.perf_counter(), time.process_time()
    for batch in batches:
        count, samples = count + 1, samples + rows_of(batch, batch_size)
        if count >= MIN_BATCHES and time.perf_counter() - wall >= budget_s:
            break
    return samples, time.perf_counter() - wall, time.process_time() - cpu


def largest_hooked(stages: Sequence[Stage], hooks: HookSet) -> str | None:
    """The name of the sample's largest stage by CPU, when a hook holds it (a transform step, the loader)."""
    sample = [s for s in stages if s.part == "sample" and s.cpu_s is not None and s.kind != "unattributed"]
    top = max(sample, key=lambda s: s.cpu_s or 0.0, default=None)
    return top.name if top is not None and top.name in {t.name for t in hooks.tallies} else None


def replay(
    hooks: HookSet, name: str, fetch: Callable[[], Any], batches: Callable[[], Iterator[Any]], batch_size: int,
    budget_s: float,
) -> Replay | None:  # fmt: skip
    """The 0-worker loader's cost per sample with the hooked stage `name` replayed from its recorded outputs; None
    when no such stage can be replayed (not hooked, inside an nn.Sequential, no output recorded)."""
    site = next((s for s in hooks.sites if s.tally.name == name), None)
    if site is None or isinstance(site.owner, torch.nn.Sequential):
        return None
    kept: list[Any] = []
    try:
        put(site, Recorder(site.original, kept))
        for _ in range(BATCHES * batch_size):
            fetch()
        if not kept:
            return None
        put(site, Replayed(kept))
        samples, wall, cpu = timed_batches(batches(), batch_size, budget_s)
    finally:
        site.restore()
    return Replay(name, samples, wall / samples, cpu / samples) if samples else None
