"""What the adaptive search knows, shared by its phases through this public face: the space and its worker counts,
the trials done, the climb's curve and its USL fit, the trace, and the decision the next trial is measured for.

The climb (adaptive.py), the bisection (refine.py), the saturated-CPU check (saturation.py) and the finalists
(finalists.py) each read it and tell it what they decided; none reaches into another's fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from loadertop.core.engine.verdict.band import merge_repeats, noise_band
from loadertop.core.engine.verdict.usl import fit_usl
from loadertop.core.engine.wording import sps, workers
from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.figures import faster_beyond
from loadertop.core.model.results import SearchStep, TrialResult, UslFit

Decision = tuple[float | None, float | None]  # (below, above) samples/s past which a trial may stop (TrialRequest)


class SearchState:
    def __init__(self, settings: Settings, space: Sequence[TrialConfig]) -> None:
        self.settings = settings
        self.tol = settings.tolerance
        self.space = list(space)
        self.counts = sorted({c.num_workers for c in self.space})
        self.trace: list[SearchStep] = []
        self.done: Sequence[TrialResult] = ()  # every trial so far, in order (the driver's)
        self.cpus: int | None = None  # usable CPUs, once the machine is known
        self.decision: Decision = (None, None)  # for the trial about to be proposed
        self.usl: UslFit | None = None
        self._template = next((c for c in self.space if c.num_workers > 0), self.space[0] if self.space else None)
        self._rungs: dict[int, tuple[int, TrialConfig]] = {}  # per count: the climb's configuration (and score)
        self._fitted: tuple[tuple[int, float], ...] | None = None
        self._dips_told: set[TrialConfig] = set()

    @property
    def template(self) -> TrialConfig | None:
        """The configuration whose other knobs the climb holds (the first with workers)."""
        return self._template

    def note(self, phase: str, message: str, config: str | None = None) -> None:
        self.trace.append(SearchStep(phase, message, config))

    def at(self, n: int) -> TrialConfig:
        """The configuration with `n` workers and the climb's other knobs (the matching 0-worker one for 0)."""
        if not self._rungs:  # once: the range may hold a thousand counts, and curve() asks for each
            template = self._template
            assert template is not None
            names = [f.name for f in dataclasses.fields(TrialConfig) if f.name != "num_workers"]
            for c in self.space:
                score = sum(getattr(c, k) == getattr(template, k) for k in names)
                if score > self._rungs.get(c.num_workers, (-1, c))[0]:
                    self._rungs[c.num_workers] = (score, c)
        return self._rungs[n][1]

    def result(self, config: TrialConfig) -> TrialResult:
        """The latest trial of `config`."""
        return next(t for t in reversed(self.done) if t.config == config)

    def measured(self, config: TrialConfig) -> bool:
        return any(t.config == config for t in self.done)

    def curve(self) -> list[TrialResult]:
        """The climb's finished points, one per worker count (repeats merged), sorted by workers."""
        self.at(self.counts[0])
        group = {c for _, c in self._rungs.values()}
        ok = [t for t in self.done if t.config in group and t.status == "ok" and t.samples_per_s is not None]
        return sorted(merge_repeats(ok), key=lambda t: t.config.num_workers)

    def fit(self) -> UslFit | None:
        """The USL fit over the climb's curve from one worker on, its dips left out (`dips`)."""
        curve = [t for t in self.curve() if t.config.num_workers >= 1]
        dips = self.dips(curve)
        points = tuple((t.config.num_workers, sps(t)) for t in curve if t not in dips)
        if points != self._fitted:  # the same points give the same fit: asked several times per trial
            self._fitted, self.usl = points, fit_usl([n for n, _ in points], [x for _, x in points])
        return self.usl

    def dips(self, curve: list[TrialResult]) -> list[TrialResult]:
        """Rungs slower than a rung below them and a rung above them, each beyond the noise band. A throughput curve
        has one peak (more workers gain, then contend), so a dip is a noisy run (a busy machine, a slow start): left
        in, one read low bends the USL fit's peak past the rungs that beat it (seen in CI: 16 workers read 536
        samples/s between 8 at 614 and 32 at 783, and the fit sent the climb on to 36 and 42 workers, the peak being
        at 20). The fit leaves dips out; the curve keeps them. Noted once each."""
        found = []
        for i, r in enumerate(curve[1:-1], start=1):
            left = max(curve[:i], key=sps)
            right = max(curve[i + 1 :], key=sps)
            if all(faster_beyond(sps(o), sps(r), noise_band(self.tol, r, o)) for o in (left, right)):
                found.append(r)
                if r.config not in self._dips_told:
                    self._dips_told.add(r.config)
                    self.note(
                        "climb",
                        f"{workers(r.config.num_workers)} ({sps(r):.0f} samples/s) is slower than both "
                        f"{workers(left.config.num_workers)} ({sps(left):.0f}) and {workers(right.config.num_workers)} "
                        f"({sps(right):.0f}) beyond the noise: a throughput curve has one peak, so that run was "
                        "noise; the USL fit leaves it out",
                        r.config.label(),
                    )
        return found
