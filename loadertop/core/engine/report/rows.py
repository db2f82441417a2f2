"""The report of a sweep: one row per configuration with every figure, mark and comparison a face shows.

Headless text, Markdown, CSV and the TUI table all render from `build_report`, and every figure reads through the
formatters of wording.py here, so no two faces can disagree on a number or on how it is printed."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from loadertop.core.engine.nodes.node_rows import NODE_COLUMNS, NODE_HEADERS, NodeRow, node_rows, pacing
from loadertop.core.engine.verdict.band import merge_repeats
from loadertop.core.engine.verdict.epoch import restart_costs
from loadertop.core.engine.wording import NONE, num, pct, percent, rate, seconds
from loadertop.core.model.config import TrialConfig
from loadertop.core.model.curves import curve_key, family_key, on_curve
from loadertop.core.model.nodes import NodeInfo
from loadertop.core.model.results import SweepResult, TrialResult

RECOMMENDED, KNEE, EQUIVALENT = "★", "◆", "≈"

# (key, header): the faces pick columns by key; headless and Markdown show them all ("change" only with a previous run)
COLUMNS = (
    ("mark", ""),
    ("runs", "#"),
    ("workers", "workers"),
    ("batch", "batch"),
    ("prefetch", "prefetch"),
    ("pin", "pin"),
    ("persist", "persist"),
    ("start", "start"),
    ("samples/s", "samples/s"),
    ("nodes", "per node"),  # a many-node sweep's only
    ("spread", "±"),
    ("stall", "stall"),
    ("p50", "p50 ms"),
    ("p99", "p99 ms"),
    ("first", "1st batch"),
    ("epoch", "epoch"),
    ("uss", "USS/wkr MB"),
    ("pss", "PSS MB"),
    ("rss", "RSS* MB"),
    ("cpu", "CPU"),
    ("gpu", "GPU"),
    ("change", "vs prev"),
    ("status", "status"),
    ("why", "why"),
)
HEADERS = dict(COLUMNS)

FOOTNOTE = (
    f"{RECOMMENDED} recommended, {KNEE} knee (on the recommended configuration's curve), {EQUIVALENT} within noise "
    "of the best on that curve, as the recommended one (the cheapest of them) is. One row per configuration: "
    "# lists its trials; samples/s and ± of one measured more than once are over its runs, as the recommendation "
    "quotes them. USS/wkr: the largest worker's. * RSS counts pages shared with the parent once per process; USS "
    "and PSS do not. p50/p99 ms: the wait in next() per batch (median, 99th percentile), without the first batch "
    "after an epoch boundary: that burst is the epoch column, the wait from an epoch's last batch to the next one's "
    "first. CPU: percent of one CPU."
)
THREADS_FOOTNOTE = (
    "start thread: torchdata.nodes thread workers inside the training process; there are no worker processes, so "
    "USS/wkr is empty and PSS is the training process's alone."
)
NODES_FOOTNOTE = (
    "Many nodes: samples/s is the job's as DDP sees it, every rank paced by the slowest (ranks × the slowest rank's "
    "samples/s); per node: each node's own samples/s, node 0 first; stall and p50/p99 are the worst node's."
)


def config_cells(c: TrialConfig) -> dict[str, str]:
    """The knobs as every face prints them (a live table also shows rows not measured yet)."""
    return {
        "workers": str(c.num_workers),
        "batch": str(c.batch_size),
        "prefetch": NONE if c.prefetch_factor is None else str(c.prefetch_factor),
        "pin": "on" if c.pin_memory else "off",
        "persist": "on" if c.persistent_workers else "off",
        # Thread workers, order and worker threads ride on the start cell, only when set: the TUI's table keeps
        # its width. Thread workers have no start method: the cell says "thread" instead.
        "start": ("thread" if c.worker_method == "thread" else (c.start_method or NONE))
        + ("" if c.in_order else " unordered")
        + ("" if c.worker_threads is None else f" th={c.worker_threads}"),
    }


@dataclass(frozen=True)
class ReportRow:
    """One configuration. Throughput, spread, stall and CPU are over its finished runs (the analysis's merge, the
    figure the recommendation quotes); memory is its latest run read with no other pool parked beside it
    (engine/verdict/memory.py: a parked pool splits PSS); first batch, epoch, data-wait tails and GPU are its latest
    finished run's."""

    config: TrialConfig
    status: str  # ok when any run finished, else the latest run's status
    runs: tuple[int, ...]  # the indexes of its trials, in order
    ok_runs: int
    samples_per_s: float | None
    spread: float | None
    stall_fraction: float | None
    wait_ms_p50: float | None
    wait_ms_p99: float | None
    first_batch_s: float | None
    epoch_restart_s: float | None
    uss_per_worker_mb: float | None  # the largest worker's
    pss_mb: float | None
    rss_mb: float | None
    cpu_percent: float | None
    gpu_util: float | None
    stable: bool
    reason: str
    error: str | None
    warnings: tuple[str, ...]
    recommended: bool
    knee: bool
    equivalent: bool  # within noise of the best on the recommendation's curve (the recommendation itself is not marked)
    change: float | None  # samples/s against the same configuration in the previous run
    in_previous: bool  # the previous run finished this configuration
    # Many nodes (engine/nodes/node_rows.py): each node's share of its latest run, the rank that paced it and what that
    # cost; empty on one node.
    nodes: tuple[NodeRow, ...] = ()
    slowest_rank: str | None = None
    pacing: str = ""

    @property
    def marks(self) -> str:
        return (
            (RECOMMENDED if self.recommended else "")
            + (KNEE if self.knee else "")
            + (EQUIVALENT if self.equivalent else "")
        )

    def cells(self, compared: bool = False) -> dict[str, str]:
        """Every column as text, by key: what each face prints."""
        return {
            "mark": self.marks,
            "runs": ",".join(map(str, self.runs)),
            **config_cells(self.config),
            "samples/s": rate(self.samples_per_s),
            "nodes": " / ".join(rate(n.samples_per_s) if n.status == "ok" else NONE for n in self.nodes),
            "spread": pct(self.spread),
            "stall": pct(self.stall_fraction),
            "p50": num(self.wait_ms_p50, 1),
            "p99": num(self.wait_ms_p99, 1),
            "first": seconds(self.first_batch_s),
            "epoch": seconds(self.epoch_restart_s),
            "uss": num(self.uss_per_worker_mb),
            "pss": num(self.pss_mb),
            "rss": num(self.rss_mb),
            "cpu": percent(self.cpu_percent),
            "gpu": percent(self.gpu_util),
            "change": self._change_cell() if compared else "",
            "status": self.status if self.status == "ok" else f"{self.status}: {self.error or self.reason}",
            "why": self.reason if self.status == "ok" else "",
        }

    def _change_cell(self) -> str:
        if self.status != "ok" or self.samples_per_s is None:
            return NONE
        return pct(self.change, signed=True) if self.in_previous else "new"


def node_cells(row: NodeRow) -> dict[str, str]:
    """One node's share of a trial as text, by NODE_COLUMNS key."""
    behind = row.behind
    return {
        "node": f"{row.node_rank}{' ◀' if row.paces else ''}",  # ◀ the node of the job's slowest rank
        "host": row.hostname or NONE,
        "samples/s": rate(row.samples_per_s),
        "per rank": " ".join(rate(r) for r in row.rank_samples_per_s) or NONE,
        "behind": NONE if behind is None else ("fastest" if behind <= 0 else pct(-behind, signed=True)),
        "stall": pct(row.stall_fraction),
        "p99": num(row.wait_ms_p99, 1),
        "uss": num(row.uss_per_worker_mb),
        "pss": num(row.pss_mb),
        "cpu": percent(row.cpu_percent),
        "status": row.status if row.status == "ok" else f"{row.status}: {row.error or 'no reason given'}",
    }


@dataclass(frozen=True)
class Report:
    rows: tuple[ReportRow, ...]
    compared: bool  # built against a previous result: the "change" column means something
    nodes: tuple[NodeInfo, ...] = ()  # a many-node sweep's nodes
    node_columns: tuple[str, ...] = tuple(key for key, _ in NODE_COLUMNS)
    node_headers: dict[str, str] = field(default_factory=lambda: dict(NODE_HEADERS))
    footnote: str = FOOTNOTE
    # Columns a narrow face keeps, dropping others first: the epoch restart when some row's restart takes a share
    # of its epoch beyond the noise band (verdict/epoch.py), the figure persistent workers change.
    kept: tuple[str, ...] = ()

    @property
    def many_nodes(self) -> bool:
        """Rows merged from several nodes (node 0's view); another node's own result lists nodes but is one node's."""
        return any(row.nodes for row in self.rows)

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(
            key for key, _ in COLUMNS if (key != "change" or self.compared) and (key != "nodes" or self.many_nodes)
        )

    @property
    def recommended(self) -> ReportRow | None:
        return next((row for row in self.rows if row.recommended), None)

    def node_cells(self, row: NodeRow) -> dict[str, str]:
        return node_cells(row)

    def row_for(self, config: TrialConfig) -> ReportRow | None:
        return next((row for row in self.rows if row.config == config), None)

    def cells(self, row: ReportRow) -> dict[str, str]:
        return row.cells(self.compared)


def build_report(result: SweepResult, previous: SweepResult | None = None) -> Report:
    """`result` as one row per configuration, in `ordered` order, with Δ against `previous` (same configuration)."""
    groups: dict[TrialConfig, list[TrialResult]] = {}
    for trial in result.trials:
        groups.setdefault(trial.config, []).append(trial)
    merged = _merged(result.trials)
    before = _merged(previous.trials) if previous is not None else {}
    knee = _knee_config(result, merged)
    rec = result.recommendation.config if result.recommendation else None
    same = set(result.recommendation.equivalent) if result.recommendation else set()
    rows = []
    for config in ordered(groups):
        runs = groups[config]
        best = merged.get(config)
        old = before.get(config)
        shown = best or runs[-1]
        rows.append(
            ReportRow(
                config=config,
                status="ok" if best is not None else runs[-1].status,
                runs=tuple(t.index for t in runs),
                ok_runs=sum(1 for t in runs if _finished(t)),
                samples_per_s=shown.samples_per_s,
                spread=shown.spread,
                stall_fraction=shown.stall_fraction,
                wait_ms_p50=shown.wait_ms_p50,
                wait_ms_p99=shown.wait_ms_p99,
                first_batch_s=shown.first_batch_s,
                epoch_restart_s=shown.epoch_restart_s,
                uss_per_worker_mb=max(shown.worker_uss_mb) if shown.worker_uss_mb else None,
                pss_mb=shown.total_pss_mb,
                rss_mb=shown.rss_mb,
                cpu_percent=shown.cpu_percent,
                gpu_util=shown.gpu_util,
                stable=shown.stable,
                # Every run of a configuration gives its reason; the first says it without "(repeat of #n)".
                reason=next((t.reason for t in runs if _finished(t)), shown.reason),
                error=shown.error,
                warnings=shown.warnings,
                recommended=config == rec,
                equivalent=config in same and config != rec,
                knee=config == knee,
                change=_change(best, old),
                in_previous=old is not None,
                nodes=node_rows(runs[-1], result.nodes),
                slowest_rank=runs[-1].slowest_rank,
                pacing=pacing(runs[-1], result.nodes),
            )
        )
    many = any(row.nodes for row in rows)
    footnote = f"{FOOTNOTE} {NODES_FOOTNOTE}" if many else FOOTNOTE
    if any(r.config.worker_method == "thread" for r in rows):
        footnote = f"{footnote} {THREADS_FOOTNOTE}"
    tol = result.settings.tolerance
    kept = ("epoch",) if any(restart_costs(t, tol) for t in merged.values()) else ()
    return Report(tuple(rows), compared=previous is not None, nodes=result.nodes, footnote=footnote, kept=kept)


def ordered(configs: Iterable[TrialConfig]) -> list[TrialConfig]:
    """Curve by curve as first measured, the 0-worker origin leading its family, each curve by worker count."""
    unique = list(dict.fromkeys(configs))
    families = list(dict.fromkeys(family_key(c) for c in unique))
    curves = list(dict.fromkeys(curve_key(c) for c in unique if c.num_workers > 0))

    def key(c: TrialConfig) -> tuple[int, int, int]:
        curve = -1 if c.num_workers == 0 else curves.index(curve_key(c))
        return families.index(family_key(c)), curve, c.num_workers

    return sorted(unique, key=key)


def _finished(trial: TrialResult) -> bool:
    return trial.status == "ok" and trial.samples_per_s is not None


def _merged(trials: Sequence[TrialResult]) -> dict[TrialConfig, TrialResult]:
    return {t.config: t for t in merge_repeats([t for t in trials if _finished(t)])}


def _change(new: TrialResult | None, old: TrialResult | None) -> float | None:
    if new is None or old is None or not new.samples_per_s or not old.samples_per_s:
        return None
    return new.samples_per_s / old.samples_per_s - 1.0


def _knee_config(result: SweepResult, merged: dict[TrialConfig, TrialResult]) -> TrialConfig | None:
    """The one knee rule of every face: the knee's worker count on the recommended configuration's curve. A
    0-worker recommendation starts every curve of its family: its knee is read on the family's fastest curve."""
    knee, rec = result.knee, result.recommendation
    if knee is None or knee.num_workers is None or rec is None:
        return None
    key = curve_key(rec.config)
    if rec.config.num_workers == 0:
        wider = [t for t in merged.values() if t.config.num_workers > 0 and family_key(t.config) == family_key(key)]
        if wider:
            key = curve_key(max(wider, key=lambda t: t.samples_per_s or 0.0).config)
    return next((c for c in merged if c.num_workers == knee.num_workers and on_curve(c, key)), None)
