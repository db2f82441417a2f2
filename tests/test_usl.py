"""The Universal Scalability Law fit: parameters, predicted peak, and when it declines to answer."""

from __future__ import annotations

import math

import pytest

from loadertop.core.engine.verdict.usl import fit_curve, fit_usl, past_peak, trusted, usl, workers_to_reach
from loadertop.core.model.config import TrialConfig
from loadertop.core.model.results import TrialResult

pytestmark = pytest.mark.unit

NS = [1, 2, 4, 8, 16, 32]


def test_recovers_known_parameters_and_the_peak():
    lam, alpha, beta = 100.0, 0.05, 0.002
    fit = fit_usl(NS, [usl(n, lam, alpha, beta) for n in NS])
    assert fit is not None
    assert fit.lam == pytest.approx(lam, rel=1e-3)
    assert fit.alpha == pytest.approx(alpha, abs=1e-3)
    assert fit.beta == pytest.approx(beta, rel=1e-2)
    assert fit.peak_workers == pytest.approx(math.sqrt((1 - alpha) / beta), rel=1e-2)  # 21.8
    assert fit.peak_samples_per_s == pytest.approx(usl(fit.peak_workers, lam, alpha, beta), rel=1e-3)
    assert fit.r2 > 0.999 and trusted(fit)
    assert "N*=sqrt((1−α)/β)=21.8 workers" in fit.note


def test_noisy_points_still_place_the_peak_near_the_truth():
    lam, alpha, beta = 250.0, 0.04, 0.03  # peak at 5.7 workers
    wobble = [1.03, 0.97, 1.02, 0.98, 1.01, 0.99]
    ns = [1, 2, 3, 4, 6, 8]
    fit = fit_usl(ns, [usl(n, lam, alpha, beta) * w for n, w in zip(ns, wobble, strict=True)])
    assert fit is not None and fit.peak_workers is not None
    assert 4.5 < fit.peak_workers < 7.5


def test_linear_scaling_has_no_peak():
    fit = fit_usl([1, 2, 4, 8], [100.0, 200.0, 400.0, 800.0])
    assert fit is not None
    assert fit.peak_workers is None and fit.alpha < 1e-3
    assert "still linear" in fit.note


def test_flat_curve_is_all_contention():
    fit = fit_usl([1, 2, 4, 8], [300.0, 302.0, 299.0, 301.0])
    assert fit is not None
    assert fit.alpha > 0.9  # nothing parallelises: something outside the workers sets the pace


def test_too_few_points_or_zero_workers_give_no_fit():
    assert fit_usl([1, 2], [100.0, 190.0]) is None
    assert fit_usl([0, 1, 2], [120.0, 100.0, 190.0]) is None  # 0 workers is another regime, never fitted
    assert fit_usl([1, 1, 2], [100.0, 101.0, 190.0]) is None  # three points, two worker counts


def test_poor_fit_is_shown_but_not_trusted():
    fit = fit_usl([1, 2, 4, 8, 16], [100.0, 400.0, 120.0, 500.0, 90.0])
    assert fit is not None and not trusted(fit)
    assert "poor fit" in fit.note


def test_workers_to_reach_a_target():
    fit = fit_usl(NS, [usl(n, 100.0, 0.0, 0.0) for n in NS])
    assert fit is not None
    assert workers_to_reach(fit, 950.0, 32) == 10
    assert workers_to_reach(fit, 1e9, 32) is None


def test_fit_curve_uses_trials_with_workers():
    def t(n: int, sps: float) -> TrialResult:
        return TrialResult(n, TrialConfig(n, 32, 2 if n else None), "ok", samples_per_s=sps)

    fit = fit_curve([t(0, 50.0), t(1, 100.0), t(2, 190.0), t(4, 340.0)])
    assert fit is not None and fit.points == 3


def test_past_peak_needs_a_trusted_fit_over_four_rungs_at_or_past_its_peak():
    lam, alpha, beta = 100.0, 0.02, 0.004  # N* = 15.65
    ns = [1, 2, 4, 8, 16]
    fit = fit_usl(ns, [usl(n, lam, alpha, beta) for n in ns])
    assert fit is not None and past_peak(fit, 16) is not None and "N*=15.7" in (past_peak(fit, 16) or "")
    assert past_peak(fit, 8) is None  # the peak lies above the rung: keep climbing
    three = fit_usl(ns[:3], [usl(n, lam, 0.0, 0.3) for n in ns[:3]])
    assert three is not None and three.peak_workers is not None and past_peak(three, 4) is None  # 3 rungs: no
    poor = fit_usl([1, 2, 4, 8, 16], [100.0, 400.0, 120.0, 500.0, 90.0])
    assert past_peak(poor, 16) is None
