"""What a curve is: throughput against num_workers, every other knob held. One definition for every face."""

from __future__ import annotations

from dataclasses import replace

from loadertop.core.model.config import TrialConfig


def curve_key(config: TrialConfig) -> TrialConfig:
    """The curve a configuration lies on: everything but the worker count."""
    return replace(config, num_workers=0)


def family_key(config: TrialConfig) -> TrialConfig:
    """What a curve shares with its 0-worker origin: the knobs that apply without workers (batch size, pinning,
    order). A 0-worker configuration has no prefetch, persistence, start method, worker threads or worker method
    (it is the same loader for process and thread workers), so it starts every curve of its family."""
    return replace(
        config, num_workers=0, prefetch_factor=None, persistent_workers=False, start_method=None, worker_threads=None,
        worker_method="process",
    )  # fmt: skip


def on_curve(config: TrialConfig, key: TrialConfig) -> bool:
    """Whether `config` is a point of the curve `key` (its own, or the family's 0-worker origin). Order applies
    only with workers, so the (ordered) 0-worker point is the origin of the unordered curves too."""
    if config.num_workers == 0:
        return family_key(config) == family_key(replace(key, in_order=config.in_order))
    return curve_key(config) == key
