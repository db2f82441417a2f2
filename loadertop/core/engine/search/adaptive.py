"""Search strategies: which configuration to measure next, given what has been measured.

What a planner is asked and the plain planners are in planners.py; the rungs in rungs.py. The adaptive search:
1. climb a geometric ladder of num_workers (0, 1, 2, 4, 8, ...) on the first value of every other knob, and stop
   when a rung gains less than the noise band over the best rung below it, when a rung is within noise of the
   ceiling, when a trusted USL fit over four rungs or more puts the peak at or below the rung, when a rung fails
   (a guard or a fault says no), or at the top of the range or the memory budget. The fit may move the next rung
   closer: to its predicted peak N*, or to where it predicts the ceiling is reached;
2. refine by bisection between the cheapest rung within noise of the best and the rung below it (the answer,
   "cheapest within the noise band of the best", lies between them); then between the best rung and the rung
   above it when that one was slower beyond the noise (2 → 4 skips 3), unless the trusted fit puts the peak at
   the best rung; 3. then the other knobs' values (batch size, prefetch, ...) one at a time at the choice;
4. where a worker count's epoch restart takes a share of its epoch beyond the noise band, that count with
   persistent_workers=True, asked for or not (engine/search/persist.py);
5. measure the finalists again, alternately, on workers kept between their runs, until a sequential test decides
   or a cap is reached (engine/search/finalists.py). A rung's trial stops once its decision is clear (_rung_decision).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence

from loadertop.core.engine.search.finalists import MAX_REPEATS, MIN_REPEATS, REPEAT_SHARE, duels
from loadertop.core.engine.search.persist import persist
from loadertop.core.engine.search.planners import GridPlanner, Planner, RowRerun
from loadertop.core.engine.search.refine import SearchOver, refine
from loadertop.core.engine.search.rungs import at_least, memory_cap, plan_rungs, top_above
from loadertop.core.engine.search.saturation import confirm, saturated
from loadertop.core.engine.search.state import SearchState
from loadertop.core.engine.verdict.band import Noise, choose, noise_band
from loadertop.core.engine.verdict.stops import CEILING, FAULT, FLAT, MEMORY, PEAK, TOP, TRANSPORT, Stop
from loadertop.core.engine.verdict.transport_bound import consumer_ceilings, transport_stop
from loadertop.core.engine.verdict.usl import past_peak, trusted, workers_to_reach
from loadertop.core.engine.wording import cpu_text, pct, signed, sps, workers
from loadertop.core.machine.facts import usable_cpus
from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.figures import at_least_within, faster_beyond
from loadertop.core.model.results import Ceiling, MachineInfo, SearchStep, TrialResult, UslFit

# A search cannot beat measuring everything when there is this little to measure (a climb and one repeat).
SMALL_SPACE = 4
PROCESS_ONLY = {"start_method", "persistent_workers", "worker_threads"}  # knobs thread workers do not have
# Share of the memory we may use (MemAvailable, or the cgroup's headroom if tighter) that the loader may take:
# the training process needs the rest for the model, optimizer state and its own batches.
MEMORY_BUDGET_FRACTION = 0.5


def make_planner(settings: Settings, only: Sequence[TrialConfig] | None = None) -> Planner:
    if only:
        return RowRerun(only)
    if settings.search == "adaptive":
        return AdaptivePlanner(settings, cpus=usable_cpus())
    return GridPlanner(settings.trial_configs())


class AdaptivePlanner:
    reruns_rows = False

    def __init__(
        self, settings: Settings, space: Sequence[TrialConfig] | None = None, *, cpus: int | None = None
    ) -> None:
        """`cpus`: the usable CPUs, for the plan listed before the machine is known (setup says them again)."""
        self.state = SearchState(settings, space if space is not None else settings.trial_configs())
        self.state.cpus = cpus
        self.settings = settings
        self.tol = settings.tolerance
        self.space = self.state.space
        self.counts = self.state.counts
        self._read = 0
        self._proposed: list[TrialConfig] = []
        self._projection: list[TrialConfig] = []
        self._ceilings: dict[int, float | None] = {}
        self._all_ceilings: tuple[Ceiling, ...] = ()
        self._mem_budget_mb: float | None = None
        self._patient = False  # the extra rung past an unsettled plateau has been spent (one per plateau)
        self._told: int | None = None  # the rung whose patient note already said how its trial ended
        self._fits: int | None = None  # the most workers the memory budget allows, once a rung has told
        self._unasked = 0  # trials of configurations outside the space (the epoch phase's persistent twins)
        self._keep = False  # in the finalists' head-to-head: their trials keep their workers between runs
        self._steps: Iterator[TrialConfig] = self._plan()
        if self.space and len(self.space) > SMALL_SPACE:
            self._project(self.counts[0])

    @property
    def trace(self) -> list[SearchStep]:
        return self.state.trace

    @property
    def usl(self) -> UslFit | None:
        return self.state.usl

    # -- the Planner protocol ----------------------------------------------------------------------------

    def planned(self) -> tuple[TrialConfig, ...]:
        if len(self.space) <= SMALL_SPACE:
            return tuple(self.space)
        ahead = [c for c in self._projection if c not in self._proposed]
        return tuple(self._proposed) + tuple(ahead)

    def _project(self, start: int) -> None:
        """The rungs the plan lists from `start` on: within the memory budget, at most one past the CPUs (rungs.py)."""
        cpus = max(1, self.state.cpus // self.settings.ranks) if self.state.cpus else None
        self._projection = [self.state.at(n) for n in plan_rungs(self.counts, start, cpus, self._fits)]

    def setup(self, machine: MachineInfo, ceilings: Sequence[Ceiling]) -> None:
        self.state.cpus = machine.usable_cpus
        if self._projection and not self._proposed:
            self._project(self.counts[0])
        room = [machine.mem_available_mb]
        if machine.cgroup_mem_headroom_mb is not None:
            room.append(machine.cgroup_mem_headroom_mb)
        self._mem_budget_mb = MEMORY_BUDGET_FRACTION * min(room)
        self._ceilings = {c.batch_size: c.samples_per_s for c in consumer_ceilings(ceilings)}
        self._all_ceilings = tuple(ceilings)

    def next(self, done: Sequence[TrialResult]) -> TrialConfig | None:
        self.state.done = done
        self.state.decision = (None, None)  # the phase that proposes a trial sets it
        config = next(self._steps, None)
        if config is not None:
            self._proposed.append(config)
        return config

    def take_notes(self) -> list[SearchStep]:
        notes = self.trace[self._read :]
        self._read = len(self.trace)
        return notes

    def decision(self) -> tuple[float | None, float | None]:
        return self.state.decision

    def keep(self) -> bool:
        return self._keep

    # -- the plan, as one generator: each `yield` is a trial; `self.state.done` has its result when it resumes --------

    def _plan(self) -> Iterator[TrialConfig]:
        if not self.space:
            return
        if len(self.space) <= SMALL_SPACE:
            self.state.note("plan", f"{len(self.space)} configurations: measuring all of them (no search is cheaper)")
            yield from self.space
            yield from self._persist()
            self.state.note("done", f"measured all {len(self.space)} configurations{self._twins()}")
            return
        try:
            yield from self._climb()
            yield from self._refine()
            yield from self._knobs()
            yield from self._persist()
            yield from self._repeat()
        except SearchOver:
            pass
        self._projection = []
        self.state.note("done", self._summary())

    # -- 1. climb -------------------------------------------------------------------------------------------

    def _climb(self) -> Iterator[TrialConfig]:
        lo, hi, template = self.counts[0], self.counts[-1], self.state.template
        self.state.note(
            "plan",
            f"climb num_workers {lo}, 1, 2, 4, ... up to {hi} (the top of the range; throughput, memory or a guard "
            "stop it sooner), "
            f"{template.label() if template else ''} for the other knobs; noise band {pct(self.tol)}",
        )
        n: int | None = lo
        failures = 0
        while n is not None:
            config = self.state.at(n)
            self.state.decision = self._rung_decision(n)
            yield config
            t = self.state.result(config)
            if t.status != "ok":
                failures += 1
                if n == 0 and failures == 1 and hi > 0:  # the main process may fail where workers would not
                    self.state.note("climb", f"0 workers failed ({t.error}); trying workers anyway", config.label())
                    n = at_least(self.counts, 1, above=0)
                    continue
                text = f"stopped climbing: {workers(n)} {t.status} ({t.error}): a guard or fault says no"
                self.trace.append(Stop(text, FAULT, n).step())
                return
            stop = self._stop_climbing(n, t)
            if stop is None and (prev := self._to_confirm(n, t)) is not None:
                stop = yield from confirm(
                    self.state, prev, t
                )  # engine/search/saturation.py: past saturated cores, repeats
            if stop is not None:
                self.trace.append(stop.step())
                return
            n = self._next_rung(n, t)

    def _rung_decision(self, n: int) -> tuple[float | None, float | None]:
        """The edges of a rung's decision (a gain beyond the band over the best rung below, or not), past which its
        trial may stop (TrialRequest.decide_below/above): the band's edge plus a tolerance, the best rung minus one.
        The first rungs run their course (nothing to compare)."""
        below = [r for r in self.state.curve() if 1 <= r.config.num_workers < n]
        if not below:
            return None, None
        prev = max(below, key=sps)
        x = sps(prev)
        gain = x * (1.0 + noise_band(self.tol, prev)) * (1.0 + self.tol)
        # The top of the range may stop on a clear gain: it is the climb's answer either way (measured again if it
        # meets a rival); a loss or a near tie there runs its course
        return (None, gain) if n >= self.counts[-1] else (x * (1.0 - self.tol), gain)

    def _stop_climbing(self, n: int, t: TrialResult) -> Stop | None:
        x = sps(t)
        ceiling = self._ceilings.get(t.config.batch_size)
        head = f"{workers(n)}: {x:.0f} samples/s"
        if ceiling and at_least_within(x, ceiling, noise_band(self.tol, t)):
            share = pct(x / ceiling)
            text = f"stopped climbing: {head} is within noise of the {ceiling:.0f} samples/s ceiling ({share})"
            return Stop(text, CEILING, n, ceiling)
        if n < self.counts[-1] and (stop := transport_stop(self._all_ceilings, t, self.tol, head)):
            return Stop(stop, TRANSPORT, n)
        fit = self.state.fit()
        past = past_peak(fit, n) if n < self.counts[-1] else None
        below = [r for r in self.state.curve() if 1 <= r.config.num_workers < n]
        if n >= 1 and below:
            prev = max(below, key=sps)
            band = noise_band(self.tol, t, prev)
            gain = x / sps(prev) - 1.0 if sps(prev) > 0 else math.inf
            if gain < band:
                return self._no_gain(n, t, prev, gain, band, steady_past=past is not None)
            self._patient = False  # a new gain: the next plateau gets its own extra rung
        if past and fit is not None:
            return Stop(f"stopped climbing: {head}; {past}", PEAK, n, fit.peak_workers)
        if n >= self.counts[-1]:
            return Stop(f"stopped climbing: {head}, the top of the range, still gaining", TOP, n)
        return None

    def _no_gain(
        self, n: int, t: TrialResult, prev: TrialResult, gain: float, band: float, steady_past: bool
    ) -> Stop | None:
        """A rung that gained less than the band over the best below: the stop, or None for one rung more when its
        run is unsettled (a busy machine, a short budget), unless a trusted peak is here and the rung is steady."""
        head = f"{workers(n)}: {sps(t):.0f} samples/s"
        over = f"{signed(gain)} over {workers(prev.config.num_workers)}"
        # A clear loss decided in 3 steady blocks is as good as settled; a noisy one is not (its blocks agree with
        # each other, which says nothing of how far this run is from the next)
        settled = t.stable or (t.decided and (t.spread or 0.0) <= self.settings.target_spread)
        steady_past = steady_past and (t.spread or 0.0) <= self.tol
        if not settled and not self._patient and not steady_past and n < self.counts[-1]:
            self._patient = True
            self._told = n  # _next_rung does not say "a clear loss" again
            noisy = f"±{pct(t.spread or 0.0)} over {t.blocks} blocks"
            needed = self.settings.min_blocks
            if t.decided:  # it did stop: on its decision, not on a settled spread
                why = (
                    f"a clear {'loss' if gain < 0 else 'non-gain'} after {t.blocks} blocks, but noisy ({noisy}, "
                    f"wider than the {pct(self.settings.target_spread)} of a settled run)"
                )
            elif (t.blocks or 0) < needed:  # a spread over too few blocks says little, however small
                blocks = f"{t.blocks} block{'' if t.blocks == 1 else 's'}"
                why = f"but only {blocks} measured of the {needed} a settled run needs"
            else:
                why = f"but its spread never settled ({noisy})"
            self.state.note("climb", f"{head}, {over}, {why}: one more rung before concluding")
            return None
        verdict = self._loss_text(t, prev, gain, band)
        text = f"stopped climbing: {head}, {over} ({sps(prev):.0f}), {verdict}{self._flat()}"
        return Stop(text, FLAT, n, gain)

    def _loss_text(self, t: TrialResult, prev: TrialResult, gain: float, band: float) -> str:
        """How a rung that did not gain compares: slower beyond the band only when surely so by the noise between
        runs (band.Noise.surely_outside); a loss not sure is a loss "on these runs", not a fact."""
        if gain > -band:
            return f"less than the {pct(band)} noise band"
        noise = Noise.of(self.state.done, self.tol)
        if noise.surely_outside(t, prev):
            return f"slower beyond the {pct(band)} noise band"
        how = (
            "by the noise between runs" if noise.measured() else "on one run each, how far runs differ not yet measured"
        )
        return f"a loss on these runs, but not surely beyond the {pct(band)} band ({how})"

    def _to_confirm(self, n: int, t: TrialResult) -> TrialResult | None:
        """The best rung below a rung past the cores that gained on one run while the CPUs were saturated (the
        trial's CPU near the usable CPUs): that gain must hold over repeats before the climb goes on."""
        if not self.state.cpus or n <= self.state.cpus or n >= self.counts[-1]:
            return None
        below = [r for r in self.state.curve() if 1 <= r.config.num_workers < n]
        if not below:
            return None
        prev = max(below, key=sps)
        if not faster_beyond(sps(t), sps(prev), noise_band(self.tol, t, prev)):
            return None  # no gain to confirm (an unsettled rung's patient extra rung)
        return prev if saturated(self.state.cpus, prev, t) else None

    def _next_rung(self, n: int, t: TrialResult) -> int | None:
        """The next rung: double (0 → 1), brought closer by the USL when it predicts a peak or the ceiling sooner,
        capped by the memory budget. Notes why."""
        target = 1 if n == 0 else 2 * n
        why = "next rung of the ladder"
        fit = self.state.fit()
        if fit is not None and trusted(fit):
            ceiling = self._ceilings.get(t.config.batch_size)
            reach = workers_to_reach(fit, ceiling * (1.0 - self.tol), target) if ceiling else None
            if fit.peak_workers is not None and n < fit.peak_workers < target:
                target = max(n + 1, round(fit.peak_workers))
                why = f"USL predicts the peak at N*={fit.peak_workers:.1f}, before the next doubling"
            elif reach is not None and n < reach < target:
                target = reach
                why = f"USL predicts the ceiling is reached at {workers(reach)}, before the next doubling"
        fits = memory_cap(n, t, self._mem_budget_mb)
        if fits is not None:
            self._fits = fits if self._fits is None else min(self._fits, fits)
        if fits is not None and target > fits:
            if fits <= n:
                text = f"stopped climbing: more than {workers(n)} would exceed the memory budget"
                self.trace.append(Stop(text, MEMORY, n, fits).step())
                return None
            target = fits
            why = f"memory budget ({self._mem_budget_mb:.0f} MB) allows at most {workers(fits)}"
        nxt = at_least(self.counts, target, above=n)
        if nxt is None:
            nxt = top_above(self.counts, n)  # past the top of the range: its last value
        if nxt is None:
            return None
        cpu = cpu_text(t, self.state.cpus)
        below = [sps(r) for r in self.state.curve() if 1 <= r.config.num_workers < n]
        kind = "gain" if not below or sps(t) > max(below) else "loss"  # which edge of its decision it passed
        clear = f", a clear {kind} after {t.blocks} blocks" if t.decided and self._told != n else ""
        self.state.note(
            "climb",
            f"{workers(n)}: {sps(t):.0f} samples/s{cpu}{clear}; {why}: {workers(nxt)}",
            self.state.at(nxt).label(),
        )
        self._project(nxt)
        return nxt

    # -- 2. refine: engine/search/refine.py ----------------------------------------------------------------------

    def _refine(self) -> Iterator[TrialConfig]:
        return refine(self.state)

    # -- 3. other knobs -------------------------------------------------------------------------------------

    def _knobs(self) -> Iterator[TrialConfig]:
        names = [f.name for f in dataclasses.fields(TrialConfig) if f.name != "num_workers"]
        varying = [name for name in names if len({getattr(c, name) for c in self.space}) > 1]
        for name in varying:
            chosen = choose(self.state.done, self.tol)
            if chosen is None:
                raise SearchOver
            base = chosen[1].config
            # Thread workers have no start method, persistence or worker threads: the other knobs must match.
            skip = {name} | (PROCESS_ONLY if name == "worker_method" else set())
            alternatives = [
                c
                for c in self.space
                if c.num_workers == base.num_workers
                and getattr(c, name) != getattr(base, name)
                and all(getattr(c, k) == getattr(base, k) for k in names if k not in skip)
                and not self.state.measured(c)
            ]
            for alt in alternatives:
                self.state.note(
                    "knobs",
                    f"at the choice ({base.label()}): try {name}={getattr(alt, name)}",
                    alt.label(),
                )
                yield alt
            after = choose(self.state.done, self.tol)
            if after is not None and after[1].config != base:
                self.state.note("knobs", f"{name}: {after[1].config.label()} is now the choice")

    # -- 4. persistent workers where the epoch restart costs beyond the noise: engine/search/persist.py -----------

    def _persist(self) -> Iterator[TrialConfig]:
        for config in persist(self.state):
            self._unasked += config not in self.space
            yield config

    # -- 5. repeat the finalists ----------------------------------------------------------------------------

    def _repeat(self) -> Iterator[TrialConfig]:
        # Never more trials in all than measuring every configuration once (no search is dearer than the grid), and
        # on a short range fewer repeats: one per REPEAT_SHARE counts, at least MIN_REPEATS.
        # Counts past the memory budget are not in that grid: the guard skips them at no cost.
        fits = [n for n in self.counts if self._fits is None or n <= self._fits]
        share = max(MIN_REPEATS, len(fits) // REPEAT_SHARE)
        # The persistent twins the epoch phase added widen that grid: the user's space did not hold them.
        grid = len(self.space) - sum(1 for c in self.space if c.num_workers not in fits) + self._unasked
        budget = min(MAX_REPEATS, share, grid - len(self.state.done) - 1)
        self._keep = True
        yield from duels(lambda: self.state.done, self.tol, self.state.note, budget)  # search/finalists.py

    # -- helpers --------------------------------------------------------------------------------------------

    def _summary(self) -> str:
        chosen = choose(self.state.done, self.tol)
        n = len(self.state.done)
        if chosen is None:
            return f"search done after {n} trials: no trial finished"
        best, c = chosen
        return (
            f"search done after {n} trials: best {best.config.label()} at {sps(best):.0f} samples/s; "
            f"fewest workers within the noise band: {c.config.label()} at {sps(c):.0f}"
        )

    def _twins(self) -> str:
        return f" and {self._unasked} persistent twin{'' if self._unasked == 1 else 's'}" if self._unasked else ""

    def _flat(self) -> str:
        curve = self.state.curve()
        if len(curve) < 3:
            return ""
        xs = [sps(t) for t in curve]
        top = max(xs)
        band = noise_band(self.tol, *curve)
        if top > 0 and (top - min(xs)) / top <= band:
            flat = pct((top - min(xs)) / top)
            return f"; flat within {flat} from {workers(curve[0].config.num_workers)}: no clear knee"
        return ""
