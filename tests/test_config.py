from __future__ import annotations

import pytest

from loadertop.core.model.config import (
    Settings,
    TrialConfig,
    UsageError,
    auto_workers,
    parse_bool_list,
    parse_int_list,
    parse_worker_counts,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("0-4", (0, 1, 2, 3, 4)),
        ("0,2,4,8", (0, 2, 4, 8)),
        ("8,2,2,0", (0, 2, 8)),
        ("0-8:4", (0, 4, 8)),
        ("3", (3,)),
    ],
)
def test_parse_workers(spec: str, expected: tuple[int, ...]) -> None:
    assert parse_worker_counts(spec) == expected


@pytest.mark.parametrize("spec", ["8-2", "-1", "x", "1,,2", "0-4:0", "2000"])
def test_parse_workers_rejects(spec: str) -> None:
    with pytest.raises(UsageError, match="--workers"):
        parse_worker_counts(spec)


def test_auto_workers_reaches_past_the_cores() -> None:
    assert auto_workers(2) == (0, 1, 2, 3, 4, 6, 8)
    big = auto_workers(48)
    assert big[:3] == (0, 1, 2) and big[-1] == 96 and 48 in big


def test_bool_and_int_lists() -> None:
    assert parse_bool_list("on,off,on", "--pin-memory") == (True, False)
    assert parse_int_list("32,128", "--batch-size") == (32, 128)
    with pytest.raises(UsageError, match="--pin-memory"):
        parse_bool_list("maybe", "--pin-memory")
    with pytest.raises(UsageError, match="at least 1"):
        parse_int_list("0", "--batch-size")


def test_trial_configs_collapse_knobs_that_need_workers() -> None:
    settings = Settings(
        workers=(0, 2), prefetch_factors=(2, 4), persistent_workers=(False, True), start_methods=("fork",)
    )
    configs = settings.trial_configs()
    zero = [c for c in configs if c.num_workers == 0]
    assert zero == [TrialConfig(0, 32)]
    assert len([c for c in configs if c.num_workers == 2]) == 4


def test_settings_round_trip() -> None:
    settings = Settings(workers=(0, 3), dataset_args=(("root", "/data"),), pin_memory=(True, False))
    assert Settings.from_dict(settings.to_dict()) == settings
