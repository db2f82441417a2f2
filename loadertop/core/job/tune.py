"""`loadertop.tune(loader, budget_s=120)`: the training job tunes its own DataLoader, measured by its real step.

`for batch in tuned:` iterates one epoch like the loader. While the budget lasts, configurations chosen by the
sweep's adaptive planner take turns, switching at batch boundaries: the epoch's index batches are materialised
once from the user's batch sampler, and each configuration's loader starts at the first batch not yet handed out,
so no sample is skipped or repeated. Then it keeps the choice (with the user's own sampler) and says what it chose.

Nothing of loadertop's own may raise into the training loop: an internal failure is logged once and the rest of
the run uses the user's loader configuration, from the same position. The user's own errors (the dataset's, the
sampler's) propagate as the plain loader would raise them.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from loadertop.core.engine.tune_entry import RUN_TUNE_TERMS, TUNE_TERMS, Terms
from loadertop.core.job.resume import (
    Batches,
    current_config,
    epoch_batches,
    final_loader,
    loader_from,
    shutdown,
    start_up_buffer,
    user_args,
    why_not_tunable,
)
from loadertop.core.job.stateful import EpochStart, is_stateful, snapshot_costs, snapshot_message
from loadertop.core.job.tune_measure import Meter
from loadertop.core.job.tune_plan import Choice, Tuner, read_machine, span_s, tune_settings
from loadertop.core.job.tune_viewers import Viewers
from loadertop.core.job.watch import batches_in, plain_iter, samples_in, watch, worker_pids
from loadertop.core.model.config import TrialConfig
from loadertop.core.model.live_protocol import TuneStep

log = logging.getLogger("loadertop")


def tune(
    loader: Any,
    budget_s: float = 120.0,
    *,
    max_workers: int | None = None,
    tolerance: float = 0.05,
    snapshot_every: Sequence[int] = (),
) -> Tuned:
    """Wrap `loader` so that its iteration tunes num_workers (then prefetch_factor, pin_memory with a GPU) for at
    most `budget_s` seconds of training, then keeps the best. `max_workers`: the top of the range searched.

    A torchdata StatefulDataLoader is tuned with StatefulDataLoaders, and `Tuned.state_dict()` is exact across the
    switches (docs/tune.md). `snapshot_every` (say (1, 10, 100)), with a StatefulDataLoader: once tune settles,
    measure what each `snapshot_every_n_steps` costs per step at the chosen configuration (your value is kept)."""
    return Tuned(loader, budget_s, max_workers=max_workers, tolerance=tolerance, snapshot_every=snapshot_every)


def tune_in_run(loader: Any, budget_s: float) -> Tuned:
    """`loadertop run --tune BUDGET_S`'s tune: its advice names run's one option (the budget), not tune()'s
    arguments (run has no max_workers)."""
    return Tuned(loader, budget_s, max_workers=None, tolerance=_TOLERANCE, terms=RUN_TUNE_TERMS)


class Tuned:
    """What `tune()` returns: iterate it once per epoch, as the loader. `choice`, `trace` and `snippet` say what
    tuning measured and chose (`choice` is None until it settles); `decisions`, why it tried each configuration
    and where its climb stopped (the sweep planner's notes). With a StatefulDataLoader, `state_dict()` and
    `load_state_dict()` as the loader's (in its format, for its arguments); `snapshot_costs`, what each
    snapshot_every_n_steps asked for costs: (value, ms per step, % of the step)."""

    def __init__(
        self,
        loader: Any,
        budget_s: float,
        *,
        max_workers: int | None,
        tolerance: float,
        snapshot_every: Sequence[int] = (),
        terms: Terms = TUNE_TERMS,
    ) -> None:
        self.loader = loader
        self._terms = terms  # how its advice names what the user can change: tune()'s arguments or run's
        self.budget_s = float(budget_s)
        self.choice: TrialConfig | None = None
        self.reason = ""
        self.snippet = ""
        self.trace: list[TuneStep] = []
        self.decisions: list[str] = []
        self.tuning_s = 0.0
        self._max_workers, self._tolerance = max_workers, tolerance
        self._watched: Any = None
        self._state = "tuning"  # "tuning", then "settled" or "aside" (an internal error: the user's loader)
        self._final: Any = None
        self._tuner: Tuner | None = None
        self._meter: Meter | None = None
        self._viewers = Viewers()
        self._epoch = -1
        self._span_s = span_s(self.budget_s)
        self._switch_t = 0.0
        self._epoch_began = 0.0
        self._stateful = is_stateful(loader)
        self._snapshot_every = tuple(int(v) for v in snapshot_every) if self._stateful else ()
        self.snapshot_costs: list[tuple[int, float, float]] = []
        self._place = _Place()
        self._batches: Batches = []
        self._user_step_s = 0.0
        why = why_not_tunable(loader)
        if why is not None:
            print(f"loadertop.tune: not tuning ({why}); watching the loader as it is", file=sys.stderr)
            self._watched = watch(loader)
        elif self.budget_s <= 0:
            self._state = "settled"

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        if self._watched is not None:
            return iter(self._watched)
        self._epoch += 1
        if self._place.resumed is not None and not self._place.finished:  # load_state_dict()'s epoch: the user's
            return self._resumed_epoch()
        if self._state == "tuning" and self._tuner is None:
            self._epoch_began = time.perf_counter()
            self._guard(self._start)
        if self._state == "tuning" or self._stateful:  # a StatefulDataLoader's epochs keep their position
            return self._tuning_epoch(self._epoch)
        return self._plain_epoch(self._epoch)

    # -- a StatefulDataLoader's state ----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The state a StatefulDataLoader of the user's arguments would have after the batches handed out in this
        epoch (while tuning too: the switch loaders' own states do not fit the user's loader). {} before the first
        epoch (load_state_dict({}) starts afresh)."""
        if not self._stateful:
            raise TypeError("state_dict(): the tuned loader is not a StatefulDataLoader")
        place = self._place
        if place.resumed is not None or self._watched is not None:  # the user's loader iterates: its own state
            return dict(self.loader.state_dict())
        if place.start is None:
            return {}
        return place.start.state_at(place.pos, finished=place.finished)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load `state` into the user's loader: the next epoch is that loader, resumed (not tuned); tuning, if not
        done, goes on at the epoch after."""
        if not self._stateful:
            raise TypeError("load_state_dict(): the tuned loader is not a StatefulDataLoader")
        self.loader.load_state_dict(state)
        if self._watched is None:  # watched, the user's loader iterates anyway
            self._place = _Place(resumed=self.loader)

    def _resumed_epoch(self) -> Iterator[Any]:
        try:
            yield from self.loader
        finally:
            self._place.finished = True

    # -- set-up -----------------------------------------------------------------------------------------------

    def _start(self) -> None:
        self._viewers.start()
        user = current_config(self.loader)
        cuda = _cuda()
        machine = read_machine()
        settings = tune_settings(user, machine, self._max_workers, self._tolerance, cuda)
        self._tuner = Tuner(settings, machine, user_args(self.loader), terms=self._terms, budget_s=self.budget_s)
        first = self._tuner.next()
        if first is None:
            self._settle()
        else:
            self._meter = Meter(first, skip=0)  # _open sets the skip of a fresh iterator

    # -- the tuning epoch --------------------------------------------------------------------------------------

    def _tuning_epoch(self, epoch: int) -> Iterator[Any]:
        began = self._epoch_began = time.perf_counter()
        # The user's sampler: its errors are the user's
        start = EpochStart(self.loader, self._place.start) if self._stateful else None
        self._place = _Place(start=start)
        batches = self._batches = start.batches if start is not None else epoch_batches(self.loader, epoch)
        pos, it, config, opened = 0, None, None, began
        first_batch: float | None = None
        complete = False
        step: tuple[float, float, int] | None = None  # the step the loop is in: (asked, got, samples)
        self._switch_t = began
        try:
            while pos < len(batches):
                if it is None:
                    it, config, opened = self._open(batches, pos, epoch, first=pos == 0)
                t0 = time.perf_counter()
                try:
                    batch = next(it)  # the dataset's and the user's worker errors propagate from here
                except StopIteration:
                    break
                got = time.perf_counter()
                first_batch = first_batch if first_batch is not None else got - began
                n, pos = len(batches[pos]), pos + 1
                step = (t0, got, n)
                self._place.pos = pos
                yield batch
                step = None
                if self._after_step(t0, got, n, opened, config):
                    shutdown(it)
                    it = None
            complete = pos >= len(batches)
        finally:
            self._guard(self._viewers.left_in_step, step)
            shutdown(it)
            # Every batch handed out is a whole epoch, though the loop never asked past the last (Lightning's data
            # fetcher stops at the length, and so does zip() with a range): as watch() counts it.
            complete = complete or pos >= len(batches)
            self._place.finished = complete
            if start is not None:
                start.finish()
            seconds = time.perf_counter() - began
            if self._state == "tuning":
                self.tuning_s += seconds
            self._guard(self._viewers.ended, epoch, pos, seconds, first_batch, complete)

    def _open(self, batches: Batches, pos: int, epoch: int, first: bool) -> tuple[Iterator[Any], TrialConfig, float]:
        """An iterator over batches[pos:] with the configuration now due (the one measured, the choice, or the
        user's after an internal error)."""
        config = self._config_due()
        opened = time.perf_counter()
        try:
            it = plain_iter(loader_from(self.loader, batches[pos:], config))
        except Exception as exc:  # ours: arguments the user's loader never had; the user's own knobs next
            self._aside(exc)
            config = current_config(self.loader)
            it = plain_iter(loader_from(self.loader, batches[pos:], config))
        self._guard(self._meter_opened, it, config, len(batches) - pos)
        self._guard(self._viewers.announce, epoch, it, config, first)
        return it, config, opened

    def _meter_opened(self, it: Iterator[Any], config: TrialConfig, remaining: int) -> None:
        meter = self._meter
        if meter is not None and meter.config == config:
            meter.opened(start_up_buffer(config), remaining)
            meter.pids = worker_pids(it)

    def _config_due(self) -> TrialConfig:
        if self._state == "tuning" and self._meter is not None:
            return self._meter.config
        if self._state == "settled" and self.choice is not None:
            return self.choice
        return current_config(self.loader)

    def _after_step(self, t0: float, got: float, n: int, opened: float, config: TrialConfig | None) -> bool:
        """Book one step (the user's step ran from `got` to now); True when the current iterator must be closed
        (the next configuration is due)."""
        try:
            now = time.perf_counter()
            wait_s, step_s = got - t0, now - got
            self._viewers.step(wait_s, step_s, n)
            meter = self._meter
            if self._state != "tuning" or meter is None:
                return False
            if meter.first_batch_s is None:
                meter.first_batch_s = got - opened
                meter.switch_s = got - self._switch_t
            meter.add(wait_s, step_s, n)
            left = self.budget_s - (self.tuning_s + now - self._epoch_began)
            if not (meter.done(self._span_s) or left <= 0):
                return False
            return self._next_trial(meter, left, config)
        except Exception as exc:
            self._aside(exc)
            return True

    def _next_trial(self, meter: Meter, left: float, config: TrialConfig | None) -> bool:
        tuner = self._tuner
        assert tuner is not None
        self._user_step_s = meter.mean_step_s() or self._user_step_s
        result = meter.result(len(tuner.results), tuner.settings.target_spread, self._span_s)
        tuner.feed(result, meter.mean_step_s())
        self.trace.append(self._viewers.measured(tuner.results[-1], meter))
        nxt = tuner.next() if left >= self._span_s / 2 else None
        if nxt is not None and nxt != config and left < self._span_s / 2 + _start_up_s(nxt, meter):
            # No new configuration that could not get half its span after its start-up (the switch, and its
            # start-up buffer handed out at the step's pace: 90 batches at 30 workers): its switch would be wasted.
            nxt = None
        self._switch_t = time.perf_counter()
        if nxt is None:
            self._settle()
            return self.choice != config  # keep the running iterator when it already has the choice
        # _open sets the skip of a fresh iterator; a finalist measured again right away keeps the running one.
        again = nxt == config  # measured again on the running iterator: no switch, no buffer to skip
        self._meter = Meter(nxt, skip=0, pids=meter.pids if again else (), iterators=int(again))
        return nxt != config  # a finalist measured again right away needs no restart

    # -- settled, or stepped aside: plain epochs ----------------------------------------------------------------

    def _plain_epoch(self, epoch: int) -> Iterator[Any]:
        loader = self._loader_now()
        began = time.perf_counter()
        it = plain_iter(loader)
        self._guard(self._viewers.announce, epoch, it, self.choice, True)
        batches, first, complete = 0, None, False
        # The chosen loader has the user's batch sampler (batch_size None): its batch size, or count the last batch
        size, last = _batch_size(loader), batches_in(loader) - 1
        step: tuple[float, float, int] | None = None  # the step the loop is in: (asked, got, samples)
        try:
            while True:
                t0 = time.perf_counter()
                try:
                    batch = next(it)
                except StopIteration:
                    complete = True
                    break
                got = time.perf_counter()
                first = first if first is not None else got - began
                n = size if size and batches != last else samples_in(batch)
                batches += 1
                step = (t0, got, n)
                yield batch
                step = None
                self._after_step(t0, got, n, began, None)
        finally:
            self._guard(self._viewers.left_in_step, step)
            if not getattr(loader, "persistent_workers", False):  # persistent ones live on, as the user asked
                shutdown(it)
            complete = complete or batches == batches_in(loader)  # every batch handed out: a whole epoch
            self._guard(self._viewers.ended, epoch, batches, time.perf_counter() - began, first, complete)

    def _loader_now(self) -> Any:
        if self._state != "settled" or self.choice is None:
            return self.loader
        if self._final is None:
            try:
                self._final = final_loader(self.loader, self.choice)
            except Exception as exc:
                self._aside(exc)
                return self.loader
        return self._final

    # -- settling, publishing, failures ------------------------------------------------------------------------

    def _settle(self) -> None:
        tuner = self._tuner
        assert tuner is not None
        choice = tuner.choice(current_config(self.loader))
        self.tuning_s += time.perf_counter() - self._epoch_began
        self._state = "settled"
        self._meter = None
        self.choice, self.reason, self.snippet = choice.config, choice.reason, choice.snippet
        self.decisions = list(tuner.decisions)
        self._viewers.chose(choice, len(tuner.results), self.tuning_s)
        if self._snapshot_every:
            self._guard(self._measure_snapshots, choice)
        print(f"loadertop.tune: {self._settled_line(choice)}\n  {choice.snippet}", file=sys.stderr)

    def _settled_line(self, choice: Choice) -> str:
        measured = len({t.config for t in self._tuner.results if t.status == "ok"}) if self._tuner else 0
        configurations = f"{measured} configuration{'' if measured == 1 else 's'}"
        switches = sum(step.switch_s for step in self.trace)
        if choice.kept:  # the reason leads: what was kept, and why
            spent = f"{self.tuning_s:.1f} s of training, {switches:.1f} s of it switching loaders"
            return f"{self.reason} ({configurations} measured in {spent})"
        spent = f"{self.tuning_s:.1f} s of training ({switches:.1f} s of it switching loaders)"
        return f"chose {choice.config.label()} after {configurations} in {spent}: {self.reason}"

    def _measure_snapshots(self, choice: Choice) -> None:
        """What each snapshot_every_n_steps asked for costs at the choice: real loaders over the epoch's first
        batches, timed (samples re-read outside the loop; the user's own value is kept). Said in the reason."""
        config, batches = choice.config, self._batches[:_SNAPSHOT_BATCHES]
        if config.num_workers == 0:  # no workers, no snapshots: the state is read in this process when asked
            message = f"snapshot_every_n_steps at {config.label()}: no cost (no workers: nothing to snapshot)"
            self.snapshot_costs = [(v, 0.0, 0.0) for v in self._snapshot_every]
            self.reason = f"{self.reason} {message}" if self.reason else message
            self.decisions.append(message)
            return
        step_s = self._user_step_s  # the training step's own time, as tuning measured it
        measured = snapshot_costs(
            lambda every: loader_from(self.loader, batches, config, every), self._snapshot_every, len(batches), step_s
        )
        self.snapshot_costs = measured.costs
        message = snapshot_message(measured, config)
        self.reason = f"{self.reason} {message}" if self.reason else message
        self.decisions.append(message)

    def _guard(self, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:
            self._aside(exc)

    def _aside(self, exc: BaseException) -> None:
        """An internal failure: log once, stop tuning, and use the user's own loader configuration from here on."""
        if self._state != "aside":
            log.warning(
                "loadertop.tune: internal error (%s: %s); continuing with your loader as it is", type(exc).__name__, exc
            )
        self._state = "aside"
        self._meter = None


_SNAPSHOT_BATCHES = 100  # batches each snapshot interval is timed over (fewer in a shorter epoch)
_TOLERANCE = 0.05  # tune()'s default noise band, for run --tune


@dataclass
class _Place:
    """Where the epoch is, for a StatefulDataLoader's state_dict: its start (its batches, drawn as the user's
    loader draws them), the batches handed out; `resumed`: the user's loader, resumed by load_state_dict(),
    iterates this epoch."""

    start: EpochStart | None = None
    pos: int = 0
    finished: bool = False
    resumed: Any = None


def _start_up_s(config: TrialConfig, meter: Meter) -> float:
    """The expected time from switching to `config` to its first measured batch: the last switch's cost, scaled
    by the workers to start (forking 30 takes about twice as long as 15), then the start-up buffer, which the
    training step consumes at its own pace."""
    scale = max(1.0, config.num_workers / max(1, meter.config.num_workers))
    return meter.switch_s * scale + start_up_buffer(config) * (meter.mean_step_s() or 0.0)


def _cuda() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def _batch_size(loader: Any) -> int | None:
    """The loader's fixed batch size, its batch sampler's where it has one (None: count each batch)."""
    size = getattr(loader, "batch_size", None) or getattr(getattr(loader, "batch_sampler", None), "batch_size", None)
    return size if isinstance(size, int) and size > 0 else None
