"""Search trace lines that contradicted themselves, each fixed at its cause.

- a rung slower than the best below beyond the band was called "less than the noise band";
- a head-to-head where the cheaper finalist read faster was called "smaller than the band: within noise";
- a rung decided early on a clear loss, but noisy, was said to have "never settled", and the next line called it
  "a clear loss after 3 blocks"."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from loadertop.core.engine.search.adaptive import AdaptivePlanner
from loadertop.core.engine.search.finalists import _verdict
from loadertop.core.engine.verdict.band import Noise
from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.results import Ceiling, MachineInfo, SearchStep, TrialResult

pytestmark = pytest.mark.unit

MACHINE = MachineInfo(
    hostname="t", platform="linux", python="3.11", torch=None, logical_cpus=8, usable_cpus=8, cpu_quota=None,
    mem_total_mb=1e6, mem_available_mb=1e6, cgroup_mem_headroom_mb=None, shm_free_mb=None,
    default_start_method="fork",
)  # fmt: skip


def trial(index: int, n: int, sps: float, spread: float = 0.01, decided: bool = False) -> TrialResult:
    config = TrialConfig(n, 32, 2 if n else None, start_method="fork" if n else None)
    return TrialResult(
        index, config, "ok", samples_per_s=sps, batches_per_s=sps / 32, spread=spread, stable=spread <= 0.05,
        decided=decided, blocks=3 if decided else 5, cpu_percent=30.0 * max(n, 1), stall_fraction=0.5,
    )  # fmt: skip


def climb(result: Callable[[int, TrialConfig], TrialResult], top: int = 64) -> list[SearchStep]:
    settings = Settings(workers=tuple(range(top + 1)), batch_sizes=(32,), start_methods=("fork",), search="adaptive")
    planner = AdaptivePlanner(settings)
    planner.setup(MACHINE, (Ceiling(32, None, "no work"),))
    done: list[TrialResult] = []
    while (config := planner.next(done)) is not None and len(done) < 30:
        done.append(result(len(done), config))
    return planner.trace


def test_a_loss_beyond_the_band_is_not_called_less_than_the_band() -> None:
    curve = {0: 85.0, 1: 100.0, 2: 200.0, 4: 146.0}
    steps = climb(lambda i, c: trial(i, c.num_workers, curve.get(c.num_workers, 146.0)))
    stop = next(s for s in steps if s.phase == "stop")
    assert "−27.0% over 2 workers" in stop.message
    assert "slower beyond the 5% noise band" in stop.message and "less than" not in stop.message


def test_a_small_shortfall_is_still_less_than_the_band() -> None:
    curve = {0: 85.0, 1: 100.0, 2: 200.0, 4: 204.0}
    steps = climb(lambda i, c: trial(i, c.num_workers, curve.get(c.num_workers, 204.0)))
    stop = next(s for s in steps if s.phase == "stop")
    assert "+2.0% over 2 workers" in stop.message and "less than the 5% noise band" in stop.message


def test_a_cheaper_finalist_that_reads_faster_is_not_smaller_than_the_band() -> None:
    runs = [trial(0, 2, 560.0), trial(1, 4, 500.0), trial(2, 2, 560.0 * 1.02), trial(3, 4, 500.0 * 0.98)]
    noise = Noise.of(runs, 0.05)
    a, b = trial(4, 2, 565.6), trial(5, 4, 495.0)
    verdict = _verdict(a, b, noise)
    assert verdict is not None and "+14%" in verdict
    assert "smaller than the" not in verdict and "faster" in verdict


def test_a_cheaper_finalist_a_little_slower_is_within_noise() -> None:
    runs = [trial(0, 2, 490.0), trial(1, 4, 500.0), trial(2, 2, 490.0), trial(3, 4, 500.0)]
    verdict = _verdict(trial(4, 2, 490.0), trial(5, 4, 500.0), Noise.of(runs, 0.05))
    assert verdict is not None and "the loss is smaller than the 5% band: within noise of each other" in verdict


def test_a_noisy_rung_decided_on_a_loss_is_not_said_never_to_have_settled() -> None:
    curve = {0: 85.0, 1: 100.0, 2: 200.0, 4: 150.0, 8: 150.0}

    def result(i: int, c: TrialConfig) -> TrialResult:
        n = c.num_workers
        return trial(i, n, curve.get(n, 150.0), spread=0.18 if n == 4 else 0.01, decided=n == 4)

    steps = climb(result)
    about4 = [s.message for s in steps if s.message.startswith("4 workers")]
    assert len(about4) == 2
    patient, rung = about4
    assert "never settled" not in patient and "a clear loss after 3 blocks, but noisy" in patient
    assert "one more rung" in patient and "clear loss" not in rung  # said once, not twice


def test_a_rung_with_too_few_blocks_is_said_to_have_too_few_not_an_unsettled_spread() -> None:
    # "never settled (±4.3% over 2 blocks)", "(±0% over 1 blocks)": too few blocks, not a wide spread
    curve = {0: 85.0, 1: 100.0, 2: 200.0, 4: 150.0, 8: 150.0}

    def result(i: int, c: TrialConfig) -> TrialResult:
        n = c.num_workers
        t = trial(i, n, curve.get(n, 150.0), spread=0.0 if n == 4 else 0.01)
        return dataclasses.replace(t, blocks=1, stable=False) if n == 4 else t

    about4 = [s.message for s in climb(result) if s.message.startswith("4 workers")]
    assert "but only 1 block measured of the 5 a settled run needs: one more rung" in about4[0], about4
    assert "never settled" not in about4[0]


def test_a_duel_undecided_at_the_cap_says_which_way_the_choice_goes() -> None:
    # A default run on this machine: 4 against 5 workers over 6 runs each, −4.7%. The trace said "the
    # means decide (within the 5% band)" and the choice then kept 5: 4 was inside the band, not surely within it.
    from loadertop.core.engine.search.finalists import _undecided
    from loadertop.core.engine.verdict.band import choose, merge_repeats

    fours, fives = [576.0, 552.0, 570.0, 574.0, 558.0, 572.0], [582.0, 620.0, 566.0, 587.0, 622.0, 595.0]
    runs = [
        trial(2 * i + k, n, x)
        for i, (f, g) in enumerate(zip(fours, fives, strict=True))
        for k, (n, x) in enumerate(((4, f), (5, g)))
    ]
    a, b = sorted(merge_repeats(runs), key=lambda t: t.config.num_workers)
    text = _undecided(a, b, Noise.of(runs, 0.05))
    chosen = choose(runs, 0.05)
    assert chosen is not None and chosen[1].config.num_workers == 5
    assert "the means decide: inside the 5% band, but not by 1 standard error, " in text, text
    assert text.endswith("the cheaper one is not surely within it")
    # a pair close enough that the cheaper one holds says so
    fives = [x - 26.0 for x in fives]  # 569 samples/s: 4 workers 0.4% behind
    runs = [
        trial(2 * i + k, n, x)
        for i, (f, g) in enumerate(zip(fours, fives, strict=True))
        for k, (n, x) in enumerate(((4, f), (5, g)))
    ]
    a, b = sorted(merge_repeats(runs), key=lambda t: t.config.num_workers)
    chosen = choose(runs, 0.05)
    assert chosen is not None and chosen[1].config.num_workers == 4
    assert "the cheaper one holds" in _undecided(a, b, Noise.of(runs, 0.05))
