"""The guards: memory floor (prediction before a trial, live stop during one), /dev/shm, open files.

Real trials allocate real memory (a few hundred MiB to 1.5 GiB in all, safe on a 24 GiB machine that runs
other tests too); the floors are set relative to the free memory of the moment so that they bite."""

from __future__ import annotations

import dataclasses
import re
import resource
from collections.abc import Iterator
from pathlib import Path

import pytest
from procs import FAULTS, Family

import loadertop.core.engine.drive.driver as driver
from loadertop.core.engine.drive.driver import Sweep
from loadertop.core.machine.free_memory import cgroup_memory_limit_mb, read_free_mb
from loadertop.core.machine.guards import (
    MemoryGuard,
    default_floor_mb,
    fd_problem,
    parse_mem_floor,
    shm_hint,
    shm_problem,
)
from loadertop.core.model.config import Settings, TrialConfig, UsageError
from loadertop.core.model.events import Notice, ProbeSample, TrialStarted, WorkerSample
from loadertop.core.model.results import SweepResult

W1 = TrialConfig(1, 32, 2, start_method="fork")
W2 = TrialConfig(2, 32, 2, start_method="fork")
W6 = TrialConfig(6, 32, 2, start_method="fork")
W12 = TrialConfig(12, 32, 2, start_method="fork")
W0 = TrialConfig(0, 32)


# -- the floor ----------------------------------------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize(
    ("text", "mb"),
    [("4GiB", 4096), ("512MiB", 512), ("2g", 2048), ("1.5G", 1536), ("256 MB", 256), ("10%", 2400), ("0", 0)],
)
def test_mem_floor_sizes_and_shares(text: str, mb: float) -> None:
    assert parse_mem_floor(text, total_mb=24000) == pytest.approx(mb)


@pytest.mark.unit
@pytest.mark.parametrize("text", ["lots", "4", "-1GiB", "100%", "24000MiB", "4 parsecs"])
def test_mem_floor_rejects_what_it_cannot_mean(text: str) -> None:
    with pytest.raises(UsageError, match="--mem-floor"):
        parse_mem_floor(text, total_mb=24000)


@pytest.mark.unit
def test_default_floor_is_the_larger_of_10_percent_and_2_gib_but_leaves_small_containers_room() -> None:
    assert parse_mem_floor("", 24000) == default_floor_mb(24000) == 2400
    assert default_floor_mb(16384) == 2048
    assert default_floor_mb(4096) == 1024  # a 4 GiB container keeps three quarters usable


@pytest.mark.unit
def test_cgroup_limit_is_the_tightest_along_our_cgroup(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    (root / "job" / "step").mkdir(parents=True)
    (root / "cgroup.controllers").write_text("memory\n")
    (root / "job" / "memory.max").write_text(str(8 << 30))
    (root / "job" / "step" / "memory.max").write_text("max\n")
    own = tmp_path / "self-cgroup"
    own.write_text("0::/job/step\n")
    assert cgroup_memory_limit_mb(root, own) == 8192
    (root / "job" / "memory.max").write_text("max\n")
    assert cgroup_memory_limit_mb(root, own) is None


# -- the guard's decisions, on scripted memory readings --------------------------------------------------------


class Scripted:
    """Free memory and time as a test sets them."""

    def __init__(self, free: float) -> None:
        self.free, self.now, self.kills = free, 0.0, 0

    def kill(self) -> None:
        self.kills += 1


def sample(index: int, free: float, workers_uss: tuple[float, ...] = (), pss: float | None = None) -> ProbeSample:
    workers = tuple(WorkerSample(1000 + i, uss, 0.0, uss) for i, uss in enumerate(workers_uss))
    return ProbeSample(index, 0.0, workers, None, None, pss, None, 0.0, free, None, None)


@pytest.fixture
def world() -> Iterator[tuple[Scripted, MemoryGuard]]:
    w = Scripted(free=10_000)
    guard = MemoryGuard(4000, w.kill, read_free=lambda: w.free, clock=lambda: w.now)
    yield w, guard
    guard.close()


@pytest.mark.unit
def test_guard_kills_when_free_memory_would_cross_the_floor_before_the_next_check(
    world: tuple[Scripted, MemoryGuard],
) -> None:
    w, guard = world
    guard.arm(0, W2)
    guard.observe(sample(0, 6000))
    w.now = 0.05
    guard.observe(sample(0, 5000))  # falling 20 GB/s: 4000 within the next 50 ms check and the kill
    assert w.kills == 1 and guard.tripped
    seen = guard.disarm()
    assert seen is not None and seen.stopped and seen.lowest_mb == 5000 and seen.free_before_mb == 10_000
    assert seen.describe().startswith("stopped by the memory guard: free memory 5,000 MiB, falling 20,000 MiB/s")


@pytest.mark.unit
def test_guard_lets_a_trial_run_near_the_floor_when_memory_is_steady(world: tuple[Scripted, MemoryGuard]) -> None:
    w, guard = world
    guard.arm(0, W2)
    for step in range(10):
        w.now = step * 0.05
        guard.observe(sample(0, 4100))
    assert w.kills == 0
    guard.observe(sample(0, 3999))
    assert w.kills == 1
    guard.observe(sample(0, 3000))
    assert w.kills == 1  # once per trial


@pytest.mark.unit
def test_guard_predicts_from_peaks_and_skips_what_would_not_fit(world: tuple[Scripted, MemoryGuard]) -> None:
    w, guard = world
    assert guard.check_before(W6) is None  # nothing measured yet: nothing to predict from
    guard.arm(0, W2)
    guard.observe(sample(0, 9000, workers_uss=(300, 500), pss=1000))  # main 1000 - 800 = 200
    guard.disarm()
    need, how = guard.predict_mb(W6) or (0, "")
    assert need == 200 + 6 * 500 and how == "main 200 MiB + 6 × 500 MiB per worker"
    assert guard.check_before(W2) is None  # 1200 of 10000 leaves 8800 > 4000
    reason = guard.check_before(TrialConfig(12, 32, 2))  # 6200 would leave 3800
    assert reason is not None and reason.startswith("memory guard: predicted 6,200 MiB")
    w.free = 3500
    assert "already below the floor" in (guard.check_before(W0) or "")


@pytest.mark.unit
def test_after_a_stop_more_workers_are_skipped_and_fewer_are_predicted_from_what_it_took(
    world: tuple[Scripted, MemoryGuard],
) -> None:
    w, guard = world
    guard.arm(0, TrialConfig(3, 32, 2))
    w.free = 3900
    guard.observe(sample(0, 3900))
    assert guard.disarm().stopped  # type: ignore[union-attr]
    w.free = 10_000
    assert "a trial with 3 workers was stopped" in (guard.check_before(TrialConfig(4, 32, 2)) or "")
    # It took 6100 MiB for 4 processes: 2 workers + main are predicted at 3 × 1525.
    need, _ = guard.predict_mb(W2) or (0, "")
    assert need == pytest.approx(3 * 6100 / 4)


@pytest.mark.unit
def test_a_bigger_batch_or_prefetch_predicts_a_bigger_worker(world: tuple[Scripted, MemoryGuard]) -> None:
    _, guard = world
    guard.arm(0, W2)  # batch 32, prefetch 2: a worker holds 3 batches of 10 MiB
    guard.note_batch(10.0)
    guard.observe(sample(0, 9000, workers_uss=(90, 100), pss=400))  # main 400 - 190 = 210
    guard.disarm()
    need, how = guard.predict_mb(W2) or (0, "")
    assert need == 210 + 2 * 100 and how == "main 210 MiB + 2 × 100 MiB per worker"  # as measured
    need, how = guard.predict_mb(TrialConfig(2, 128, 4, start_method="fork")) or (0, "")
    # base 100 - 3 × 10 = 70, then 5 batches of 128 × 10/32 = 40 MiB each
    assert need == 210 + 2 * (70 + 5 * 40)
    assert how == "main 210 MiB + 2 × 270 MiB per worker (70 + 5 batches of 40.0 MiB)"


@pytest.mark.unit
def test_with_ranks_the_prediction_counts_every_rank() -> None:
    w = Scripted(free=10_000)
    guard = MemoryGuard(4000, w.kill, read_free=lambda: w.free, clock=lambda: w.now, ranks=2)
    guard.arm(0, W2)  # rank 0's main, the other rank's main (400) and four workers, as the probes list them
    guard.observe(sample(0, 9000, workers_uss=(400, 100, 100, 100, 100), pss=1100))  # rank 0's main: 300
    guard.disarm()
    need, how = guard.predict_mb(W6) or (0, "")
    assert need == 2 * (300 + 6 * 400) and how == "2 ranks × (main 300 MiB + 6 × 400 MiB per worker)"
    guard.close()


@pytest.mark.unit
def test_shm_and_open_file_messages() -> None:
    assert shm_problem(None) is None and shm_problem(8000) is None
    message = shm_problem(64) or ""
    assert "only 64 MiB free" in message and "Bus error" in message and "--shm-size" in message
    assert shm_hint("trial process killed by SIGBUS", 12).endswith(
        ", 12 MiB free now; a full /dev/shm kills them with SIGBUS)"
    )
    assert shm_hint("ValueError: bad", 12) == "ValueError: bad"
    config = TrialConfig(8, 256, 4)
    assert fd_problem(config, 1, 1024) is not None and fd_problem(config, 1, 65536) is None
    assert "8 × 4 × 256 × 2 = 16,384 open files" in (fd_problem(config, 2, 1024) or "")
    assert fd_problem(W0, 100, 16) is None  # no workers, no descriptors passed between processes


# -- real trials -----------------------------------------------------------------------------------------------


def oom_kills() -> int | None:
    for line in Path("/proc/vmstat").read_text().splitlines():
        if line.startswith("oom_kill "):
            return int(line.split()[1])
    return None


def guarded_sweep(runs: Path, only: list[TrialConfig], floor_mb: float, **args: str) -> tuple[SweepResult, list]:
    settings = Settings(
        dataset=f"{FAULTS}:allocating", dataset_args=tuple(args.items()), mem_floor=f"{floor_mb:.0f}MiB",
        trial_seconds=1.5, target_spread=0.0, interval=0.2, start_methods=("fork",),
    )  # fmt: skip
    sweep = Sweep(settings, out_dir=runs, only=only)
    family = Family().watch()
    events = []
    for event in sweep.events():
        family.see(event)
        events.append(event)
        if isinstance(event, TrialStarted):
            # If the kernel ever had to choose, it would take our trial, not someone's training job.
            assert Path(f"/proc/{event.pid}/oom_score_adj").read_text().strip() == "1000"
    family.gone_within(2.0)
    assert sweep.result is not None
    return sweep.result, events


@pytest.mark.solo  # its floor is set from free memory now: a neighbour's workers would move it
def test_guard_stops_workers_that_grow_past_the_floor_before_free_memory_reaches_it(runs: Path) -> None:
    # Two workers grow by 64 MiB a sample up to 768 MiB each; the floor sits 700 MiB below free memory.
    free = read_free_mb()
    floor = free - 700
    oom_before = oom_kills()
    result, _ = guarded_sweep(runs, [W2, W0], floor, mb="768", step_mb="64")
    stopped, after = result.trials
    assert stopped.status == "failed" and (stopped.error or "").startswith("stopped by the memory guard"), stopped
    figures = re.search(r"lowest seen ([\d,]+) MiB, floor ([\d,]+) MiB", stopped.error or "")
    assert figures is not None
    lowest, floor_seen = (float(g.replace(",", "")) for g in figures.groups())
    print(f"free {free:,.0f} MiB before, lowest {lowest:,.0f} MiB, floor {floor_seen:,.0f} MiB")
    assert floor_seen == pytest.approx(floor, abs=1)
    assert lowest >= floor - 32  # stopped before free memory reached the floor (32 MiB: other tests' noise)
    # The sweep went on to the 0-worker trial: it ran, or the guard skipped or stopped it too (with a floor
    # this tight, what the machine's other processes do that second decides).
    assert not result.interrupted
    assert after.status == "ok" or "memory guard" in (after.error or ""), after
    assert oom_kills() == oom_before  # the kernel's OOM killer never acted


@pytest.mark.solo  # its floor is set from free memory now: a neighbour's workers would move it
def test_guard_skips_a_trial_predicted_not_to_fit_without_starting_it(runs: Path) -> None:
    # One worker keeps 200 MiB: measured. Twelve would take about 2.7 GiB; the floor leaves 1.8. The worker fills
    # its 200 MiB in one burst, which the guard projects over its next check (a rate of 4 GiB/s over 50 ms is 0.4
    # GiB more): 800 MiB in one burst was once projected past a floor 2.5 GiB away. Each side keeps ~0.9 GiB for
    # free memory to move by while the sweep runs.
    result, events = guarded_sweep(runs, [W1, W12], read_free_mb() - 1800, mb="200")
    measured, skipped = result.trials
    assert measured.status == "ok", measured.error
    assert skipped.status == "skipped", (skipped.status, skipped.error)
    assert re.match(
        r"memory guard: predicted [\d,]+ MiB \(main [\d,]+ MiB \+ 12 × \d{3} MiB per worker\)", skipped.error or ""
    )
    assert [e.index for e in events if isinstance(e, TrialStarted)] == [0]  # no process was started for it


@pytest.fixture
def few_open_files() -> Iterator[int]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))  # inherited by the runner, the trial, the workers
    try:
        yield 256
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_small_shm_and_a_low_open_file_limit_are_announced(
    runs: Path, few_open_files: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = driver.machine_info
    # /dev/shm cannot be shrunk here without root mounts: the machine reading is what is faked.
    monkeypatch.setattr(driver, "machine_info", lambda gpu: dataclasses.replace(real(gpu), shm_free_mb=48.0))
    settings = Settings(dataset="synthetic:cpu_ms=0.2,io_ms=0,kb=16", trial_seconds=1, interval=0.2)
    sweep = Sweep(settings, out_dir=runs, only=[TrialConfig(2, 64, 2, start_method="fork")])
    family = Family().watch()
    notices = []
    for event in sweep.events():
        family.see(event)
        if isinstance(event, Notice) and event.level == "warning":
            notices.append(event.message)
    family.gone_within(2.0)
    assert any(n.startswith("/dev/shm has only 48 MiB free") for n in notices), notices
    assert any("= 256 open files in flight could pass ulimit -n 256" in n for n in notices), notices
    assert sweep.result is not None and sweep.result.trials[0].status == "ok"  # a warning, not a refusal
