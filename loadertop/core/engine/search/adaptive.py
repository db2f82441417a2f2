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
4. measure the finalists again, alternately, on workers kept between their runs, until a sequential test decides
   or a cap is reached (engine/search/finalists.py). A rung's trial stops once its decision is clear (_rung_decision).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence

from loadertop.core.engine.search.finalists import MAX_REPEATS, MIN_REPEATS, REPEAT_SHARE, duels
from loadertop.core.engine.search.planners import GridPlanner, Planner, RowRerun
from loadertop.core.engine.search.refine import SearchOver, refine
from loadertop.core.engine.search.rungs import at_least, ladder, memory_cap, top_above
from loadertop.core.engine.search.saturation import confirm, saturated
from loadertop.core.engine.verdict.band import Noise, choose, merge_repeats, noise_band
from loadertop.core.engine.verdict.stops import CEILING, FAULT, FLAT, MEMORY, PEAK, TOP, TRANSPORT, Stop
from loadertop.core.engine.verdict.transport_bound import consumer_ceilings, transport_stop
from loadertop.core.engine.verdict.usl import fit_usl, past_peak, trusted, workers_to_reach
from loadertop.core.engine.wording import cpu_text, pct, signed, sps, workers
from loadertop.core.model.config import Settings, TrialConfig
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
        return AdaptivePlanner(settings)
    return GridPlanner(settings.trial_configs())


class AdaptivePlanner:
    reruns_rows = False

    def __init__(self, settings: Settings, space: Sequence[TrialConfig] | None = None) -> None:
        self.settings = settings
        self.tol = settings.tolerance
        self.space = list(space if space is not None else settings.trial_configs())
        self.counts = sorted({c.num_workers for c in self.space})
        self.trace: list[SearchStep] = []
        self.usl: UslFit | None = None
        self._read = 0
        self._done: Sequence[TrialResult] = ()
        self._proposed: list[TrialConfig] = []
        self._projection: list[TrialConfig] = []
        self._template = next((c for c in self.space if c.num_workers > 0), self.space[0] if self.space else None)
        self._ceilings: dict[int, float | None] = {}
        self._all_ceilings: tuple[Ceiling, ...] = ()
        self._mem_budget_mb: float | None = None
        self._cpus: int | None = None
        self._rungs: dict[int, tuple[int, TrialConfig]] = {}  # per count: the climb's configuration (and score)
        self._fitted: tuple[tuple[int, float], ...] | None = None
        self._patient = False  # the extra rung past an unsettled plateau has been spent (one per plateau)
        self._told: int | None = None  # the rung whose patient note already said how its trial ended
        self._dips_told: set[TrialConfig] = set()  # dips the fit leaves out, noted once each (_dips)
        self._decision: tuple[float | None, float | None] = (None, None)
        self._fits: int | None = None  # the most workers the memory budget allows, once a rung has told
        self._keep = False  # in the finalists' head-to-head: their trials keep their workers between runs
        self._steps: Iterator[TrialConfig] = self._plan()
        if self.space and len(self.space) > SMALL_SPACE:
            self._projection = [self._at(n) for n in ladder(self.counts, self.counts[0], self.counts[-1])]

    # -- the Planner protocol ----------------------------------------------------------------------------

    def planned(self) -> tuple[TrialConfig, ...]:
        if len(self.space) <= SMALL_SPACE:
            return tuple(self.space)
        ahead = [c for c in self._projection if c not in self._proposed]
        return tuple(self._proposed) + tuple(ahead)

    def setup(self, machine: MachineInfo, ceilings: Sequence[Ceiling]) -> None:
        self._cpus = machine.usable_cpus
        room = [machine.mem_available_mb]
        if machine.cgroup_mem_headroom_mb is not None:
            room.append(machine.cgroup_mem_headroom_mb)
        self._mem_budget_mb = MEMORY_BUDGET_FRACTION * min(room)
        self._ceilings = {c.batch_size: c.samples_per_s for c in consumer_ceilings(ceilings)}
        self._all_ceilings = tuple(ceilings)

    def next(self, done: Sequence[TrialResult]) -> TrialConfig | None:
        self._done = done
        self._decision = (None, None)  # the climb sets it for its rungs
        config = next(self._steps, None)
        if config is not None:
            self._proposed.append(config)
        return config

    def take_notes(self) -> list[SearchStep]:
        notes = self.trace[self._read :]
        self._read = len(self.trace)
        return notes

    def decision(self) -> tuple[float | None, float | None]:
        return self._decision

    def keep(self) -> bool:
        return self._keep

    # -- the plan, as one generator: each `yield` is a trial; `self._done` has its result when it resumes --------

    def _plan(self) -> Iterator[TrialConfig]:
        if not self.space:
            return
        if len(self.space) <= SMALL_SPACE:
            self._note("plan", f"{len(self.space)} configurations: measuring all of them (no search is cheaper)")
            yield from self.space
            self._note("done", f"measured all {len(self.space)} configurations")
            return
        try:
            yield from self._climb()
            yield from self._refine()
            yield from self._knobs()
            yield from self._repeat()
        except SearchOver:
            pass
        self._projection = []
        self._note("done", self._summary())

    # -- 1. climb -------------------------------------------------------------------------------------------

    def _climb(self) -> Iterator[TrialConfig]:
        lo, hi = self.counts[0], self.counts[-1]
        self._note(
            "plan",
            f"climb num_workers {lo}, 1, 2, 4, ... up to {hi} (the top of the range; throughput, memory or a guard "
            "stop it sooner), "
            f"{self._template.label() if self._template else ''} for the other knobs; noise band {pct(self.tol)}",
        )
        n: int | None = lo
        failures = 0
        while n is not None:
            config = self._at(n)
            self._decision = self._rung_decision(n)
            yield config
            t = self._result(config)
            if t.status != "ok":
                failures += 1
                if n == 0 and failures == 1 and hi > 0:  # the main process may fail where workers would not
                    self._note("climb", f"0 workers failed ({t.error}); trying workers anyway", config.label())
                    n = at_least(self.counts, 1, above=0)
                    continue
                text = f"stopped climbing: {workers(n)} {t.status} ({t.error}): a guard or fault says no"
                self.trace.append(Stop(text, FAULT, n).step())
                return
            stop = self._stop_climbing(n, t)
            if stop is None and (prev := self._to_confirm(n, t)) is not None:
                stop = yield from confirm(self, prev, t)  # engine/search/saturation.py: past saturated cores, repeats
            if stop is not None:
                self.trace.append(stop.step())
                return
            n = self._next_rung(n, t)

    def _rung_decision(self, n: int) -> tuple[float | None, float | None]:
        """The edges of a rung's decision (a gain beyond the band over the best rung below, or not), past which its
        trial may stop (TrialRequest.decide_below/above): the band's edge plus a tolerance, the best rung minus one.
        The first rungs run their course (nothing to compare)."""
        below = [r for r in self._curve() if 1 <= r.config.num_workers < n]
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
        if ceiling and x >= ceiling * (1.0 - noise_band(self.tol, t)):
            share = pct(x / ceiling)
            text = f"stopped climbing: {head} is within noise of the {ceiling:.0f} samples/s ceiling ({share})"
            return Stop(text, CEILING, n, ceiling)
        if n < self.counts[-1] and (stop := transport_stop(self._all_ceilings, t, self.tol, head)):
            return Stop(stop, TRANSPORT, n)
        fit = self._fit()
        past = past_peak(fit, n) if n < self.counts[-1] else None
        below = [r for r in self._curve() if 1 <= r.config.num_workers < n]
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
            self._note("climb", f"{head}, {over}, {why}: one more rung before concluding")
            return None
        verdict = self._loss_text(t, prev, gain, band)
        text = f"stopped climbing: {head}, {over} ({sps(prev):.0f}), {verdict}{self._flat()}"
        return Stop(text, FLAT, n, gain)

    def _loss_text(self, t: TrialResult, prev: TrialResult, gain: float, band: float) -> str:
        """How a rung that did not gain compares: slower beyond the band only when surely so by the noise between
        runs (band.Noise.surely_outside); a loss not sure is a loss "on these runs", not a fact."""
        if gain > -band:
            return f"less than the {pct(band)} noise band"
        noise = Noise.of(self._done, self.tol)
        if noise.surely_outside(t, prev):
            return f"slower beyond the {pct(band)} noise band"
        how = (
            "by the noise between runs" if noise.measured() else "on one run each, how far runs differ not yet measured"
        )
        return f"a loss on these runs, but not surely beyond the {pct(band)} band ({how})"

    def _to_confirm(self, n: int, t: TrialResult) -> TrialResult | None:
        """The best rung below a rung past the cores that gained on one run while the CPUs were saturated (the
        trial's CPU near the usable CPUs): that gain must hold over repeats before the climb goes on."""
        if not self._cpus or n <= self._cpus or n >= self.counts[-1]:
            return None
        below = [r for r in self._curve() if 1 <= r.config.num_workers < n]
        if not below:
            return None
        prev = max(below, key=sps)
        if sps(t) < sps(prev) * (1.0 + noise_band(self.tol, t, prev)):
            return None  # no gain to confirm (an unsettled rung's patient extra rung)
        return prev if saturated(self._cpus, prev, t) else None

    def _next_rung(self, n: int, t: TrialResult) -> int | None:
        """The next rung: double (0 → 1), brought closer by the USL when it predicts a peak or the ceiling sooner,
        capped by the memory budget. Notes why."""
        target = 1 if n == 0 else 2 * n
        why = "next rung of the ladder"
        fit = self._fit()
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
        cpu = cpu_text(t, self._cpus)
        below = [sps(r) for r in self._curve() if 1 <= r.config.num_workers < n]
        kind = "gain" if not below or sps(t) > max(below) else "loss"  # which edge of its decision it passed
        clear = f", a clear {kind} after {t.blocks} blocks" if t.decided and self._told != n else ""
        self._note(
            "climb", f"{workers(n)}: {sps(t):.0f} samples/s{cpu}{clear}; {why}: {workers(nxt)}", self._at(nxt).label()
        )
        self._projection = [self._at(m) for m in ladder(self.counts, nxt, self.counts[-1])]
        return nxt

    # -- 2. refine: engine/search/refine.py ----------------------------------------------------------------------

    def _refine(self) -> Iterator[TrialConfig]:
        return refine(self)

    # -- 3. other knobs -------------------------------------------------------------------------------------

    def _knobs(self) -> Iterator[TrialConfig]:
        names = [f.name for f in dataclasses.fields(TrialConfig) if f.name != "num_workers"]
        varying = [name for name in names if len({getattr(c, name) for c in self.space}) > 1]
        for name in varying:
            chosen = choose(self._done, self.tol)
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
                and not self._measured(c)
            ]
            for alt in alternatives:
                self._note(
                    "knobs",
                    f"at the choice ({base.label()}): try {name}={getattr(alt, name)}",
                    alt.label(),
                )
                yield alt
            after = choose(self._done, self.tol)
            if after is not None and after[1].config != base:
                self._note("knobs", f"{name}: {after[1].config.label()} is now the choice")

    # -- 4. repeat the finalists ----------------------------------------------------------------------------

    def _repeat(self) -> Iterator[TrialConfig]:
        # Never more trials in all than measuring every configuration once (no search is dearer than the grid), and
        # on a short range fewer repeats: one per REPEAT_SHARE counts, at least MIN_REPEATS.
        # Counts past the memory budget are not in that grid: the guard skips them at no cost.
        fits = [n for n in self.counts if self._fits is None or n <= self._fits]
        share = max(MIN_REPEATS, len(fits) // REPEAT_SHARE)
        grid = len(self.space) - sum(1 for c in self.space if c.num_workers not in fits)
        budget = min(MAX_REPEATS, share, grid - len(self._done) - 1)
        self._keep = True
        yield from duels(lambda: self._done, self.tol, self._note, budget)  # engine/search/finalists.py

    # -- helpers --------------------------------------------------------------------------------------------

    def _note(self, phase: str, message: str, config: str | None = None) -> None:
        self.trace.append(SearchStep(phase, message, config))

    def _summary(self) -> str:
        chosen = choose(self._done, self.tol)
        n = len(self._done)
        if chosen is None:
            return f"search done after {n} trials: no trial finished"
        best, c = chosen
        return (
            f"search done after {n} trials: best {best.config.label()} at {sps(best):.0f} samples/s; "
            f"fewest workers within the noise band: {c.config.label()} at {sps(c):.0f}"
        )

    def _at(self, n: int) -> TrialConfig:
        """The configuration with `n` workers and the climb's other knobs (the matching 0-worker one for 0)."""
        if not self._rungs:  # once: the range may hold a thousand counts, and _curve asks for each
            template = self._template
            assert template is not None
            names = [f.name for f in dataclasses.fields(TrialConfig) if f.name != "num_workers"]
            for c in self.space:
                score = sum(getattr(c, k) == getattr(template, k) for k in names)
                if score > self._rungs.get(c.num_workers, (-1, c))[0]:
                    self._rungs[c.num_workers] = (score, c)
        return self._rungs[n][1]

    def _result(self, config: TrialConfig) -> TrialResult:
        return next(t for t in reversed(self._done) if t.config == config)

    def _measured(self, config: TrialConfig) -> bool:
        return any(t.config == config for t in self._done)

    def _curve(self) -> list[TrialResult]:
        """The climb's finished points, one per worker count (repeats merged), sorted by workers."""
        self._at(self.counts[0])
        group = {c for _, c in self._rungs.values()}
        ok = [t for t in self._done if t.config in group and t.status == "ok" and t.samples_per_s is not None]
        return sorted(merge_repeats(ok), key=lambda t: t.config.num_workers)

    def _fit(self) -> UslFit | None:
        curve = [t for t in self._curve() if t.config.num_workers >= 1]
        dips = self._dips(curve)
        points = tuple((t.config.num_workers, sps(t)) for t in curve if t not in dips)
        if points != self._fitted:  # the same points give the same fit: asked several times per trial
            self._fitted, self.usl = points, fit_usl([n for n, _ in points], [x for _, x in points])
        return self.usl

    def _dips(self, curve: list[TrialResult]) -> list[TrialResult]:
        """Rungs slower than a rung below them and a rung above them, each beyond the noise band. A throughput curve
        has one peak (more workers gain, then contend), so a dip is a noisy run (a busy machine, a slow start): left
        in, one read low bends the USL fit's peak past the rungs that beat it (seen in CI: 16 workers read 536
        samples/s between 8 at 614 and 32 at 783, and the fit sent the climb on to 36 and 42 workers, the peak being
        at 20). The fit leaves dips out; the curve keeps them. Noted once each."""
        dips = []
        for i, r in enumerate(curve[1:-1], start=1):
            left = max(curve[:i], key=sps)
            right = max(curve[i + 1 :], key=sps)
            if all(sps(r) * (1.0 + noise_band(self.tol, r, o)) < sps(o) for o in (left, right)):
                dips.append(r)
                if r.config not in self._dips_told:
                    self._dips_told.add(r.config)
                    self._note(
                        "climb",
                        f"{workers(r.config.num_workers)} ({sps(r):.0f} samples/s) is slower than both "
                        f"{workers(left.config.num_workers)} ({sps(left):.0f}) and {workers(right.config.num_workers)} "
                        f"({sps(right):.0f}) beyond the noise: a throughput curve has one peak, so that run was "
                        "noise; the USL fit leaves it out",
                        r.config.label(),
                    )
        return dips

    def _flat(self) -> str:
        curve = self._curve()
        if len(curve) < 3:
            return ""
        xs = [sps(t) for t in curve]
        top = max(xs)
        band = noise_band(self.tol, *curve)
        if top > 0 and (top - min(xs)) / top <= band:
            flat = pct((top - min(xs)) / top)
            return f"; flat within {flat} from {workers(curve[0].config.num_workers)}: no clear knee"
        return ""
