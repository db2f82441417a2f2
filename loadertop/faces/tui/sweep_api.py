"""What the app needs from a sweep (the engine's `Sweep`, or a fake in tests), and how it makes one."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.events import Event
from loadertop.core.model.results import SweepResult

if TYPE_CHECKING:
    from loadertop.core.engine import SweepRequest


class SweepLike(Protocol):
    run_dir: Path
    result: SweepResult | None

    @property
    def paused(self) -> bool: ...

    def events(self) -> Iterator[Event]: ...

    def cancel(self) -> None: ...

    def stop_after_current(self) -> None: ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...


SweepFactory = Callable[[Settings, SweepResult | None, Sequence[TrialConfig] | None], SweepLike]
"""(settings, previous, only) -> a sweep that has not started yet."""


def engine_factory(request: SweepRequest) -> SweepFactory:
    """The real engine. Imported on first use so the UI (and its tests) load without it. `resume` (the finished
    trials of a run being resumed) goes to the first sweep only: a later `r` measures afresh. So does `nodes`, node 0's
    link of a many-node sweep: it closes with the first sweep, so a later `r` measures on this node alone."""
    kept, out_dir = list(request.resume), request.out_dir
    link = [request.nodes]

    def make(settings: Settings, previous: SweepResult | None, only: Sequence[TrialConfig] | None) -> SweepLike:
        from loadertop.core.engine import Sweep

        reuse = tuple(kept)
        kept.clear()
        first, link[0] = link[0], None
        if first is None and settings.nodes > 1:  # a rerun after the many-node sweep: this node's data, whole
            settings = replace(settings, nodes=1, node_rank=0)
        return Sweep(settings, out_dir=out_dir, previous=previous, only=only, resume=reuse, nodes=first)

    return make
