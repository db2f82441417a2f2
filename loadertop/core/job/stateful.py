"""torchdata's StatefulDataLoader under loadertop.tune: a `state_dict()` in the user's own loader's format, exact
across tune's switches, and the measured cost of `snapshot_every_n_steps`.

tune switches loaders inside an epoch, each with its own num_workers, so no switch loader's own `state_dict()` fits
the user's loader (torchdata asserts the worker count on load). The position is what matters, and tune knows it: the
epoch's batches come from the user's batch sampler, drawn at the epoch's start, and `pos` of them were handed out.
The state is rebuilt from that: the user's batch sampler iterator replayed from the epoch's starting generator state
and advanced `pos` batches (its indices only, no sample read), wrapped in the format of a StatefulDataLoader with the
user's num_workers whose snapshot was taken after `pos` batches. torchdata itself is imported only from here, and
only once the user's loader is a StatefulDataLoader.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from loadertop.core.model.config import TrialConfig


def is_stateful(loader: Any) -> bool:
    """A torchdata StatefulDataLoader (or a subclass), told by its class: torchdata need not be installed."""
    return any(
        c.__name__ == "StatefulDataLoader" and c.__module__.startswith("torchdata") for c in type(loader).__mro__
    )


class EpochStart:
    """An epoch's batches, drawn from the user's batch sampler as the user's own loader draws them (the iterator it
    makes, its workers' base seed from the generator, and with workers a second iterator: torchdata's RandomSampler
    draws its permutation when its iterator is made, so the order depends on this), and the generators' states
    before the epoch's iterator was made (a state_dict replays from them) and after the epoch (`finish` puts them
    there: the switch loaders' own draws do not shift the user's later epochs). `before`: the previous epoch's,
    which persistent workers go on from (their iterator is only reset: the sampler's iterator made once, no seed)."""

    def __init__(self, loader: Any, before: EpochStart | None = None) -> None:
        self.loader = loader
        self.base_seed: int = 0
        gens = _generators(loader)
        sampler = loader.batch_sampler
        self.states = [(g, g.get_state()) for g in gens]
        if before is not None and loader.num_workers > 0 and loader.persistent_workers:
            self.base_seed = before.base_seed
            self.batches = [list(batch) for batch in sampler]
            self.end = [(g, g.get_state()) for g in gens]
            return
        it = iter(sampler)
        self.base_seed = int(torch.empty((), dtype=torch.int64).random_(generator=loader.generator).item())
        if loader.num_workers > 0:  # the multi-process iterator's reset makes the sampler's iterator again
            self.states = [(g, g.get_state()) for g in gens]
            it = iter(sampler)
        self.batches = [list(batch) for batch in it]
        self.end = [(g, g.get_state()) for g in gens]

    def finish(self) -> None:
        for g, state in self.end:
            g.set_state(state)

    def state_at(self, pos: int, finished: bool = False) -> dict[str, Any]:
        """The state_dict a StatefulDataLoader with the user's arguments would give after `pos` batches of this
        epoch (its workers' base seed too: a dataset's random augmentations resume as the user's loader's)."""
        mod = importlib.import_module("torchdata.stateful_dataloader.stateful_dataloader")
        sampler_state, index_state = self._sampler_after(pos, mod.try_to_serialize)
        nw = int(self.loader.num_workers)
        main: dict[str, Any] = {
            mod._SAMPLER_ITER_STATE: sampler_state,
            mod._INDEX_SAMPLER_STATE: index_state,
            mod._SAMPLER_ITER_YIELDED: pos,
            mod._ITERABLEDATASET_LEN_CALLED: None,
            mod._SHARED_SEED: None,  # a DataPipe's sharding seed: not a map-style dataset's
        }
        if nw == 0:  # the single-process format
            main.update({"_num_yielded": pos, "_fetcher_state": None, "_dataset_state": None})
            main[mod._ITERATOR_FINISHED] = finished
            return main
        cls = mod._StatefulMultiProcessingDataLoaderIter
        main[cls._NUM_WORKERS] = nw
        main[cls._BASE_SEED] = self.base_seed
        snapshot = {  # taken after `pos` batches; batch pos-1 came from worker (pos-1) % nw, as in order it does
            cls._SNAPSHOT_STEP: pos,
            cls._LAST_YIELDED_WORKER_ID: (pos - 1) % nw,
            cls._MAIN_SNAPSHOT: main,
            cls._WORKER_SNAPSHOTS: {},  # a map-style dataset's workers start afresh (a Stateful dataset: see docs)
        }
        return {cls._SNAPSHOT: snapshot, cls._STEPS_SINCE_SNAPSHOT: 0, mod._ITERATOR_FINISHED: finished}

    def _sampler_after(self, pos: int, serialize: Any) -> tuple[Any, Any]:
        """The user's batch sampler iterator replayed from the epoch's start and advanced `pos` batches, serialized;
        the generators are put back as they were (the user's next epoch draws on from them)."""
        now = [(g, g.get_state()) for g, _ in self.states]
        try:
            for g, state in self.states:
                g.set_state(state)
            sampler = self.loader.batch_sampler
            it = iter(sampler)
            for _ in range(pos):
                next(it)
            return serialize(it), serialize(sampler)
        finally:
            for g, state in now:
                g.set_state(state)


def _generators(loader: Any) -> list[torch.Generator]:
    """The loader's generator and its sampler's (the same object under shuffle=True), each once."""
    found: list[torch.Generator] = []
    sampler = getattr(loader, "sampler", None)
    inner = getattr(getattr(loader, "batch_sampler", None), "sampler", None)
    for g in (loader.generator, getattr(sampler, "generator", None), getattr(inner, "generator", None)):
        if isinstance(g, torch.Generator) and all(g is not f for f in found):
            found.append(g)
    return found


@dataclass(frozen=True)
class SnapshotCosts:
    """What each snapshot_every_n_steps costs: `costs`, (value, ms per step it adds over no snapshots, % of the
    step); `base_ms`, a batch without snapshots; `noise_ms`, the spread of that baseline between rounds (a cost
    under it is not told apart from nothing)."""

    costs: list[tuple[int, float, float]]
    base_ms: float
    noise_ms: float


def snapshot_costs(make: Any, values: Sequence[int], batches: int, step_s: float) -> SnapshotCosts:
    """`make(value)` builds a StatefulDataLoader over the same batches with the chosen knobs and that value (0:
    none); each is timed over `batches` batches after its start-up, with a pause of `step_s` (the training step's
    measured time) after each batch, as the loop takes it: the snapshots' work in the main process (a worker's
    state received at each snapshot) then lengthens the step instead of hiding in a wait on the workers. The cost
    is a share of the baseline's whole step (its wait and the pause)."""
    every = [0, *values]
    runs: list[list[float]] = [[] for _ in every]
    for _ in range(_ROUNDS):  # interleaved rounds, the fastest of each kept: the machine's drift is not a cost
        for i, value in enumerate(every):
            runs[i].append(_ms_per_batch(make(value), batches, step_s))
    base = min(runs[0])
    out = []
    for value, ms in zip(values, (min(r) for r in runs[1:]), strict=True):
        cost = max(0.0, ms - base)
        out.append((value, cost, 100.0 * cost / base if base > 0 else 0.0))
    return SnapshotCosts(out, base, max(runs[0]) - base)


_ROUNDS = 3


def _ms_per_batch(loader: Any, batches: int, step_s: float) -> float:
    it = iter(loader)
    try:
        next(it)  # the workers' start-up is not the snapshots' cost
        t0, n = time.perf_counter(), 0
        for _ in it:
            time.sleep(step_s)  # the training step's stand-in
            n += 1
            if n >= batches:
                break
        return 1000.0 * (time.perf_counter() - t0) / max(1, n)
    finally:
        stop = getattr(it, "_shutdown_workers", None)
        if callable(stop):
            stop()


def snapshot_message(measured: SnapshotCosts, config: TrialConfig) -> str:
    """One line of the reason: what each snapshot interval costs at the chosen configuration."""
    parts = [
        f"every {v}: +{ms:.2f} ms/step ({pct:.1f}% of the step{', within noise' if ms <= measured.noise_ms else ''})"
        for v, ms, pct in measured.costs
    ]
    return (
        f"snapshot_every_n_steps at {config.label()}: {', '.join(parts)} (none: {measured.base_ms:.2f} ms a step,"
        f" ±{measured.noise_ms:.2f} ms between rounds)"
    )
