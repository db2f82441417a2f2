"""The noise behind the band (engine/verdict/band.py Noise): run-to-run disagreement between repeats widens it, repeats
narrow it, and the recommendation's equivalence set follows. The head-to-head finalists that produce the repeats
are tested on model machines in tests/test_sim.py."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_analysis import SATURATING, SETTINGS, curve, machine, trial

from loadertop.core.engine.verdict.analysis import analyze
from loadertop.core.engine.verdict.band import Noise

pytestmark = pytest.mark.unit


def test_run_to_run_disagreement_widens_the_band_and_repeats_narrow_it():
    # Settled runs (±2% each) of 8 workers that disagree by 20%: the runs' own spread hides that noise.
    runs = [trial(0, 8, 1000.0), trial(1, 8, 1200.0), trial(2, 8, 1000.0), trial(3, 8, 1200.0)]
    noise = Noise.of(runs, 0.05)
    assert noise.between == pytest.approx(0.105, abs=1e-3)  # pooled over 3 degrees of freedom
    one, four = trial(9, 4, 1000.0), runs[0]
    assert noise.level(one) == pytest.approx(0.105, abs=1e-3)  # larger than its 2% own spread
    # one run against one: that noise itself; against a configuration measured 4 times: narrower by √(5/8)
    assert noise.band(one, trial(10, 2, 1000.0)) == pytest.approx(0.105, abs=1e-3)
    assert noise.band(one, four) == pytest.approx(0.105 * (5 / 8) ** 0.5, abs=1e-3)
    # without repeats each run's own spread stands in for its noise, and the two combine: √((3² + 7²) / 2) %
    quiet = Noise.of([trial(0, 1, 100.0, spread=0.03), trial(1, 2, 100.0, spread=0.07)], 0.05)
    band = quiet.band(trial(0, 1, 100.0, spread=0.03), trial(1, 2, 100.0, spread=0.07))
    assert quiet.between is None and band == pytest.approx(((0.03**2 + 0.07**2) / 2) ** 0.5)


def test_repeats_decide_what_one_noisy_run_could_not():
    # One run each at ±8%: 4 workers (380) is within the 8% band of 8 (405). Measured four times each, the means
    # (380 vs 405, the runs agreeing within 1%) are 6% apart: outside the narrowed band, 4 is no longer enough.
    one = curve(SATURATING, spread=0.08)
    _, rec = analyze(one, SETTINGS, machine())
    assert rec is not None and rec.config.num_workers == 4
    again = [replace(t, index=10 + 2 * i + k, samples_per_s=(t.samples_per_s or 0) * (1.0 + (-1) ** k * 0.005))
             for i, t in enumerate(x for x in one if x.config.num_workers in (4, 8)) for k in range(3)]  # fmt: skip
    _, rec = analyze([*one, *again], SETTINGS, machine())
    # 6 workers (measured once at ±8%) are within noise of the best, but not surely within the band: one standard
    # error of its single run would take it out, so the doubt goes to the faster 8 (band.Noise.surely_within) ...
    assert rec is not None and rec.config.num_workers == 8
    # ... and the set keeps every count not surely outside the band: 4 is 6.2% behind, past the 5% band by less
    # than two standard errors of the difference of the means (band.Noise.surely_outside)
    assert rec.equivalent == tuple(t.config for t in one if t.config.num_workers in (4, 6, 8, 12))
    # ... until 6 and 8 are measured again, settled (±2%), their runs agreeing: then 6 is surely within the band.
    settled = [replace(t, index=30 + 3 * i + k, samples_per_s=(t.samples_per_s or 0) * (1.0 + (-1) ** k * 0.005),
                       spread=0.02) for i, t in enumerate(x for x in one if x.config.num_workers in (6, 8))
               for k in range(3)]  # fmt: skip
    _, rec = analyze([*one, *again, *settled], SETTINGS, machine())
    assert rec is not None and rec.config.num_workers == 6
