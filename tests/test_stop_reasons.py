"""Every way the adaptive search can stop, and the recommendation's reason checked clause by clause
against the search trace and the trials. "Try a wider --workers range" only when the top of the range was measured
and won; a stop on a model, a ceiling, a budget or a fault says so, with its number.

The real AdaptivePlanner is driven against small deterministic curves (no processes); the conclusion is the real
one (engine/verdict/outcome.py conclude)."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from loadertop.core.engine.search.adaptive import AdaptivePlanner
from loadertop.core.engine.verdict.band import merge_repeats
from loadertop.core.engine.verdict.outcome import conclude
from loadertop.core.engine.verdict.stops import (
    CEILING,
    FAULT,
    FLAT,
    KINDS,
    MEMORY,
    PEAK,
    SATURATED,
    TOP,
    TRANSPORT,
    last_stop,
)
from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.results import Ceiling, MachineInfo, SweepResult, TrialResult

pytestmark = pytest.mark.unit

BS = 32


def machine(cpus: int, mem_mb: float = 1e6) -> MachineInfo:
    return MachineInfo(
        hostname="t", platform="linux", python="3.11", torch=None, logical_cpus=cpus, usable_cpus=cpus,
        cpu_quota=None, mem_total_mb=mem_mb * 1.2, mem_available_mb=mem_mb, cgroup_mem_headroom_mb=None,
        shm_free_mb=None, default_start_method="fork",
    )  # fmt: skip


def transport(n: int, sps: float) -> Ceiling:
    return Ceiling(BS, sps, "", 0.01, "transport", n, False, sps / BS, sps / BS * 0.5 / 1024, 0.5, 1, False)


class Case:
    """A deterministic workload: samples/s, CPU % and memory per worker count; counts that fail; and how much a
    first run past the cores reads high (the noise the saturation rule must not believe)."""

    def __init__(
        self,
        curve: Callable[[int], float],
        *,
        top: int = 64,
        cpus: int = 8,
        cpu: Callable[[int], float] = lambda n: 30.0 * max(n, 1),
        worker_mb: float = 50.0,
        mem_mb: float = 1e6,
        ceilings: tuple[Ceiling, ...] = (),
        fail_from: int | None = None,
        lucky: float = 0.0,
    ) -> None:
        self.curve, self.top, self.cpus, self.cpu, self.worker_mb = curve, top, cpus, cpu, worker_mb
        self.mem_mb, self.ceilings, self.fail_from, self.lucky = mem_mb, ceilings, fail_from, lucky

    def trial(self, index: int, config: TrialConfig, seen: int) -> TrialResult:
        n = config.num_workers
        if self.fail_from is not None and n >= self.fail_from:
            return TrialResult(index, config, "failed", error="worker killed by signal 9")
        x = self.curve(n) * (1.0 + (self.lucky if n > self.cpus and seen == 0 else 0.0))
        return TrialResult(
            index, config, "ok", samples_per_s=x, batches_per_s=x / BS, spread=0.01, stable=True, blocks=5,
            measured_s=1.5, cpu_percent=self.cpu(n), stall_fraction=0.5, worker_uss_mb=(self.worker_mb,) * n,
            total_pss_mb=1000.0 + self.worker_mb * n,
        )  # fmt: skip

    def sweep(self) -> SweepResult:
        settings = Settings(
            workers=tuple(range(self.top + 1)), batch_sizes=(BS,), start_methods=("fork",), search="adaptive"
        )
        planner = AdaptivePlanner(settings)
        m = machine(self.cpus, self.mem_mb)
        consumer = tuple(c for c in self.ceilings if c.kind == "consumer") or (Ceiling(BS, None, "no work"),)
        ceilings = (*consumer, *(c for c in self.ceilings if c.kind == "transport"))
        planner.setup(m, ceilings)
        done: list[TrialResult] = []
        while (config := planner.next(done)) is not None:
            seen = sum(t.config == config for t in done)
            done.append(self.trial(len(done), config, seen))
            assert len(done) < 60
        return conclude(done, settings, m, ceilings=ceilings, search_trace=tuple(planner.trace)).result


def bending(n: int) -> float:
    """Rising to 8 workers ever more slowly, then falling: a USL fit over 1, 2, 4, 8 puts its peak near 8."""
    points = {0: 85.0, 1: 100.0, 2: 190.0, 4: 330.0, 6: 400.0, 8: 420.0}
    if n in points:
        return points[n]
    if n > 8:
        return 420.0 * 0.97 ** (n - 8)
    lo = max(k for k in points if k < n)
    hi = min(k for k in points if k > n)
    return points[lo] + (points[hi] - points[lo]) * (n - lo) / (hi - lo)


CASES: dict[str, Case] = {
    TOP: Case(lambda n: 100.0 * max(n, 0.85), top=8),
    PEAK: Case(bending),
    CEILING: Case(lambda n: min(100.0 * max(n, 0.85), 250.0), ceilings=(Ceiling(BS, 252.0, "step"),)),
    TRANSPORT: Case(
        lambda n: min(100.0 * max(n, 0.85), 390.0), ceilings=tuple(transport(n, 400.0) for n in (1, 2, 4, 8))
    ),
    FLAT: Case(lambda n: 100.0 * min(max(n, 0.85), 4), cpus=4, cpu=lambda n: 95.0 * min(max(n, 1), 4)),
    SATURATED: Case(lambda n: 100.0 * min(max(n, 0.85), 2), cpus=2, cpu=lambda n: 95.0 * min(max(n, 1), 2), lucky=0.15),
    MEMORY: Case(lambda n: 100.0 * max(n, 0.85), worker_mb=200.0, mem_mb=4000.0),
    FAULT: Case(lambda n: 100.0 * max(n, 0.85), fail_from=8),
}


def clauses(reason: str) -> list[str]:
    return [c.strip() for c in reason.split(";")]


@pytest.mark.parametrize("kind", list(CASES))
def test_every_stop_is_structured_and_every_reason_clause_is_true(kind: str) -> None:
    result = CASES[kind].sweep()
    stop = last_stop(result.search_trace)
    assert stop is not None and stop.stop == kind and stop.stop_workers is not None
    assert stop.phase == "stop" and stop.message.startswith("stopped climbing")
    rec = result.recommendation
    assert rec is not None
    ok = [t for t in result.trials if t.status == "ok"]
    measured = {t.config.num_workers for t in ok}
    n, top = rec.config.num_workers, result.settings.workers[-1]
    reason = rec.reason
    # "try a wider --workers range" if and only if the top of the range was measured and won
    assert ("wider --workers range" in reason) == (n == top and top in measured), reason
    assert ("the largest tried" in reason) == (n == top), reason
    for clause in clauses(reason):
        # every "N workers ... samples/s" figure the reason quotes is a measured count
        for m, _x in re.findall(r"(\d+) workers? (?:at |reach |\()?(\d+) samples/s", clause):
            assert int(m) in measured, clause
        if "fastest at" in clause:  # "fastest at N workers, the most measured": the most measured, and fastest
            at = re.search(r"fastest at (\d+)", clause)
            assert at is not None and int(at.group(1)) == n == max(measured)
            assert rec.samples_per_s >= max(t.samples_per_s or 0 for t in merge_repeats(ok)) * 0.95
        if "peak near" in clause:
            near = int(re.search(r"peak near (\d+)", clause).group(1))  # type: ignore[union-attr]
            assert stop.stop_value is not None and near == round(stop.stop_value)
            assert f"N*={stop.stop_value:.1f}" in stop.message
            assert "predicted slower and not run" in reason and not any(m > n for m in measured)
        if "samples/s ceiling" in clause:
            c = float(re.search(r"(\d+) samples/s ceiling", clause).group(1))  # type: ignore[union-attr]
            assert stop.stop_value is not None and c == round(stop.stop_value)
        if "memory budget" in clause:
            assert stop.stop == MEMORY and not any(m > (stop.stop_value or 0) for m in measured)
        if "failed" in clause:
            assert any(t.config.num_workers == stop.stop_workers and t.status != "ok" for t in result.trials)
        if "no significant win" in clause or "saturated" in clause:
            assert stop.stop == SATURATED
    expected = {
        TOP: "try a wider --workers range",
        PEAK: "the USL fit puts the peak near 8 workers; 8 measured fastest; more were predicted slower and not run",
        CEILING: "came within noise of the 252 samples/s ceiling",
        TRANSPORT: "transport-bound",
        MEMORY: "would exceed the memory budget",
        FAULT: "8 workers failed",
    }
    if kind in expected and n == max(measured):  # the reason says why nothing above the pick was measured
        assert expected[kind] in reason, reason


def test_every_kind_has_a_case() -> None:
    assert set(CASES) == set(KINDS)


def test_saturated_cpus_do_not_climb_on_one_lucky_run() -> None:
    """2 CPUs, flat from 2 workers; a first run past the cores reads 15% high. The rung and the best below are
    measured again, the gain does not hold and the climb stops at 4 (the issue's run went on to 16); 2 and 4 are
    within noise of each other."""
    result = CASES[SATURATED].sweep()
    counts = [t.config.num_workers for t in result.trials]
    assert max(counts) == 4 and counts.count(4) >= 2 and counts.count(2) >= 2
    rec = result.recommendation
    assert rec is not None and {2, 4} <= {c.num_workers for c in rec.equivalent}
    assert rec.config.num_workers in (2, 4)  # from the repeats' means (band.Noise.surely_within may keep 4)
    notes = [s.message for s in result.search_trace]
    assert any("CPUs saturated" in m and "measured again" in m for m in notes)
    assert any("no significant win" in m for m in notes)


def test_unsaturated_gain_past_the_cores_climbs_on_one_run() -> None:
    """The same lucky first runs with the CPUs far from busy (I/O-bound): no repeats before climbing on."""
    case = Case(lambda n: 100.0 * max(n, 0.85), cpus=2, top=16, cpu=lambda n: 10.0 * max(n, 1))
    result = case.sweep()
    climb = [t.config.num_workers for t in result.trials][:5]
    assert climb == [0, 1, 2, 4, 8]
