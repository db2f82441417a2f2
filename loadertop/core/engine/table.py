"""The results table as plain strings: one formatting for the headless face, Markdown and CSV readers."""

from __future__ import annotations

from loadertop.core.model.results import SweepResult, TrialResult

HEADERS = (
    "#",
    "workers",
    "batch",
    "prefetch",
    "pin",
    "persist",
    "start",
    "samples/s",
    "±",
    "stall",
    "1st batch",
    "epoch",
    "USS/wkr MB",
    "PSS MB",
    "RSS* MB",
    "CPU %",
    "GPU %",
    "status",
)

RSS_FOOTNOTE = (
    "* RSS counts pages shared with the parent once per process; USS and PSS do not. "
    "epoch: wait from an epoch's last batch to the next one's first."
)


def num(value: float | None, fmt: str, suffix: str = "") -> str:
    return "–" if value is None else format(value, fmt) + suffix


def pct(value: float | None, fmt: str = ".0f") -> str:
    return num(None if value is None else value * 100, fmt, "%")


def marks(trial: TrialResult, result: SweepResult) -> list[str]:
    out = []
    if result.recommendation and result.recommendation.trial_index == trial.index:
        out.append("recommended")
    if result.knee and result.knee.num_workers == trial.config.num_workers and trial.status == "ok":
        out.append("knee")
    return out


def trial_cells(trial: TrialResult) -> list[str]:
    c = trial.config
    uss = max(trial.worker_uss_mb) if trial.worker_uss_mb else None
    status = trial.status if trial.status == "ok" else f"{trial.status}: {trial.error or trial.reason}"
    return [
        str(trial.index),
        str(c.num_workers),
        str(c.batch_size),
        str(c.prefetch_factor) if c.prefetch_factor else "–",
        "on" if c.pin_memory else "off",
        "on" if c.persistent_workers else "off",
        (c.start_method or "–") + ("" if c.in_order else " unordered"),
        num(trial.samples_per_s, ".0f"),
        pct(trial.spread, ".1f"),
        pct(trial.stall_fraction),
        num(trial.first_batch_s, ".2f", " s"),
        num(trial.epoch_restart_s, ".2f", " s"),
        num(uss, ".0f"),
        num(trial.total_pss_mb, ".0f"),
        num(trial.rss_mb, ".0f"),
        num(trial.cpu_percent, ".0f"),
        num(trial.gpu_util, ".0f"),
        status,
    ]
