"""Model machines for the search simulation (sim_bench.py): a true throughput curve per worker count, the noise a
trial sees, and what a trial costs in wall time. No torch, no processes: a trial is a TrialResult drawn from the
model, so hundreds of whole searches run in seconds.

Curve families (X(n), samples/s; n = 0 is the training process loading alone):
- cpu-bound: linear up to the usable CPUs, then flat with a slow decline (oversubscription);
- saturating: USL with contention α only (λN / (1 + α(N−1))), levelling off towards λ/α;
- retrograde: USL with coherency β, peaking at N* between a quarter of the cores and twice them, falling after;
- io-bound: workers blocked on I/O, linear far past the cores until the training process saturates (1.5-4×);
- consumer-bound: flat from 1-2 workers at the consumer's pace (and the sweep's measured ceiling says so);
- memory-capped: io-bound, but each worker holds hundreds of MB and the memory budget stops the climb first.

Noise: each trial's mean is off by a normal error of σ (1-20%, log-uniform per case) times a slow drift of the
machine (a few % over minutes); the trial reports its own spread near σ. Cost: worker start-up (fork: serial
forks plus the workers' first batches sharing the CPUs; spawn: every worker imports torch, ~1.5 CPU-seconds each)
plus the measurement (1.5 s when the spread settles within 5%, the 8 s budget when it does not).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from loadertop.core.model.config import TrialConfig
from loadertop.core.model.results import Ceiling, MachineInfo, TrialResult

FAMILIES = ("cpu-bound", "saturating", "retrograde", "io-bound", "consumer-bound", "memory-capped")
LAMBDA = 100.0  # one worker's samples/s; only ratios matter
TARGET_SPREAD = 0.05  # Settings.target_spread: a trial whose spread settles within it stops early
SETTLED_S = 1.5  # min_blocks × block_seconds: a settled trial's measurement
BUDGET_S = 8.0  # trial_seconds: an unsettled trial runs its whole budget
DECIDED_S = 0.9  # DECIDE_BLOCKS × block_seconds: a trial whose blocks lie clearly beyond its decision's edge
SKIPPED_S = 0.2  # a guard saying no costs a probe, not a trial
MEM_BASE_MB = 2000.0  # the training process


@dataclass
class Model:
    """One model machine and workload: everything a simulated trial needs, drawn from one seed."""

    family: str
    cpus: int
    top: int  # the top of the worker range
    method: str  # fork or spawn
    sigma: float  # run-to-run noise of a trial's mean
    drift: float  # amplitude of the slow drift
    period_s: float
    phase: float
    params: dict[str, float] = field(default_factory=dict)
    worker_mb: float = 150.0
    mem_available_mb: float = 1e7
    ceiling: float | None = None
    clock_s: float = 0.0  # simulated time: the drift follows it
    seen: float = 1.0  # share of the run-to-run noise a trial's own spread shows (hidden noise: 0.25)
    _best: float | None = None

    def true(self, n: int) -> float:
        """The true samples/s at n workers."""
        p, c = self.params, self.cpus
        if n == 0:
            return 0.85 * self.true(1)
        if self.family == "cpu-bound":
            x = LAMBDA * min(n, c) * (1.0 - p["decline"] * max(0, n - c) / c)
        elif self.family in ("saturating", "retrograde"):
            x = LAMBDA * n / (1.0 + p["alpha"] * (n - 1) + p["beta"] * n * (n - 1))
        elif self.family in ("io-bound", "memory-capped"):
            x = LAMBDA * min(n, p["wall"])
        else:  # consumer-bound
            x = min(LAMBDA * n, p["pace"])
        return max(x, 1e-6)

    def pss(self, n: int) -> float:
        return MEM_BASE_MB + self.worker_mb * n

    def budget_mb(self) -> float:
        return 0.5 * self.mem_available_mb  # search.MEMORY_BUDGET_FRACTION: the guard in this model says no past it

    def feasible(self, n: int) -> bool:
        return self.pss(n) <= self.budget_mb()

    def best(self) -> float:
        if self._best is None:  # asked once per trial of the grid: computed once
            self._best = max(self.true(n) for n in range(self.top + 1) if self.feasible(n))
        return self._best

    def startup_s(self, n: int) -> float:
        if n == 0:
            return 0.1
        if self.method == "spawn":
            return 0.5 + 0.02 * n + 1.5 * n / self.cpus
        return 0.2 + 0.02 * n + 0.15 * n / self.cpus

    def machine(self) -> MachineInfo:
        return MachineInfo(
            hostname="sim",
            platform="linux",
            python="3.11",
            torch=None,
            logical_cpus=self.cpus,
            usable_cpus=self.cpus,
            cpu_quota=None,
            mem_total_mb=max(self.mem_available_mb * 1.2, 4096.0),
            mem_available_mb=self.mem_available_mb,
            cgroup_mem_headroom_mb=None,
            shm_free_mb=None,
            default_start_method=self.method,
        )

    def ceilings(self, batch_size: int) -> tuple[Ceiling, ...]:
        return (Ceiling(batch_size, self.ceiling, "" if self.ceiling else "the consumer does no work"),)

    def trial(
        self,
        index: int,
        config: TrialConfig,
        rng: random.Random,
        decide: tuple[float | None, float | None] = (None, None),
        warm: bool = False,
    ) -> tuple[TrialResult, float]:
        """One simulated trial and its wall time; advances the clock. `decide`: the planner's (below, above) edges:
        the trial stops after DECIDE_BLOCKS blocks when they all lie beyond one (blocks within ± half the spread).
        `warm`: a finalist's repeat on the workers parked after its last run (trial/parked.py): no start-up."""
        n = config.num_workers
        if not self.feasible(n):
            self.clock_s += SKIPPED_S
            error = f"memory guard: {n} workers would need {self.pss(n):.0f} MB"
            return TrialResult(index, config, "skipped", error=error), SKIPPED_S
        wobble = 1.0 + self.drift * math.sin(2 * math.pi * self.clock_s / self.period_s + self.phase)
        x = self.true(n) * wobble * max(0.05, 1.0 + rng.gauss(0.0, self.sigma))
        spread = self.seen * self.sigma * rng.uniform(0.6, 1.4)
        below, above = decide
        low, high = x * (1.0 - spread / 2), x * (1.0 + spread / 2)
        decided = (above is not None and low > above) or (below is not None and high < below)
        stable = spread <= TARGET_SPREAD and not decided
        startup = 0.0 if warm else self.startup_s(n)
        cost = startup + (DECIDED_S if decided else SETTLED_S if stable else BUDGET_S)
        self.clock_s += cost
        cpu = 95.0 * min(n or 1, self.cpus) if self.family in ("cpu-bound", "retrograde") else 5.0 * n + 20.0
        result = TrialResult(
            index,
            config,
            "ok",
            samples_per_s=x,
            batches_per_s=x / config.batch_size,
            spread=spread,
            stable=stable,
            decided=decided,
            blocks=3 if decided else 5 if stable else int(BUDGET_S / 0.3),
            measured_s=cost,
            cpu_percent=cpu,
            stall_fraction=0.5,
            worker_uss_mb=(self.worker_mb,) * n,
            total_pss_mb=self.pss(n),
        )
        return result, cost


def draw(
    family: str, cpus: int, seed: int, *, top: int | None = None, method: str = "fork", seen: float = 1.0
) -> Model:
    """One case: the family's parameters, the noise and the drift, from the seed. `seen` < 1: the run-to-run noise
    is mostly hidden from the trial's own spread (load that changes between trials, not within one)."""
    rng = random.Random(f"{family}/{cpus}/{seed}/{top}")  # not the start method: fork and spawn see one case
    top = top if top is not None else max(64, 4 * cpus)  # config.adaptive_cap: what --workers auto gives
    model = Model(
        family=family,
        cpus=cpus,
        top=top,
        method=method,
        sigma=math.exp(rng.uniform(math.log(0.01), math.log(0.20))),
        drift=rng.uniform(0.0, 0.05),
        period_s=rng.uniform(300.0, 3000.0),
        phase=rng.uniform(0.0, 2 * math.pi),
        seen=seen,
    )
    p = model.params
    p.update(alpha=0.0, beta=0.0)
    if family == "cpu-bound":
        p["decline"] = rng.uniform(0.0, 0.1)
    elif family == "saturating":
        p["alpha"] = math.exp(rng.uniform(math.log(0.5 / cpus), math.log(0.2)))
    elif family == "retrograde":
        peak = rng.uniform(0.25, 2.0) * cpus
        p["alpha"] = rng.uniform(0.0, 0.05)
        p["beta"] = (1.0 - p["alpha"]) / peak**2
    elif family in ("io-bound", "memory-capped"):
        p["wall"] = min(top, round(rng.uniform(1.5, 4.0) * cpus))
    else:
        p["pace"] = LAMBDA * rng.uniform(1.0, 2.0)
        model.ceiling = p["pace"] * rng.uniform(1.0, 1.03)  # the consumer alone, measured a little fast
    if family == "memory-capped":
        model.worker_mb = rng.uniform(200.0, 800.0)
        cap = max(2, round(p["wall"] * rng.uniform(0.2, 0.7)))  # the budget allows this many workers
        model.mem_available_mb = 2.0 * (MEM_BASE_MB + model.worker_mb * (cap + 0.5))
    return model
