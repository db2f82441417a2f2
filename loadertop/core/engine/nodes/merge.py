"""One trial of a many-node sweep from every node's own measurement of it (node 0 calls this once per trial).

Synchronous data-parallel training steps every rank together, so the job goes at its slowest rank: the merged
`samples_per_s` is total ranks × the slowest rank's samples/s, not the sum of the nodes (a node that loads faster
only waits longer). Each node's own figures stay in `node_trials` and `node_samples_per_s`, for the faces.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from loadertop.core.model.nodes import NodeInfo, NodeTrial
from loadertop.core.model.results import TrialResult
from loadertop.core.model.status import Status


def node_trial(node_rank: int, trial: TrialResult) -> NodeTrial:
    """Node `node_rank`'s share of a trial, as node 0 keeps it: what that node's agent measured there."""
    rates = trial.rank_samples_per_s or ((trial.samples_per_s,) if trial.samples_per_s is not None else ())
    return NodeTrial(
        node_rank=node_rank,
        status=trial.status,
        error=trial.error,
        samples_per_s=trial.samples_per_s,
        rank_samples_per_s=tuple(rates),
        stall_fraction=trial.stall_fraction,
        wait_ms_p99=trial.wait_ms_p99,
        total_pss_mb=trial.total_pss_mb,
        worker_uss_mb=trial.worker_uss_mb,
        cpu_percent=trial.cpu_percent,
        warnings=trial.warnings,
    )


def merge_nodes(trials: Sequence[TrialResult], nodes: Sequence[NodeInfo]) -> TrialResult:
    """trials[k] is node k's TrialResult of one configuration, nodes[k] its facts (node 0 first). The merge keeps
    node 0's index, config and probes (memory, CPU, GPU, first batch); see the module docstring for the rates."""
    if not trials or len(trials) != len(nodes):
        raise ValueError(f"merge_nodes: {len(trials)} trials for {len(nodes)} nodes")
    shares = tuple(node_trial(k, t) for k, t in enumerate(trials))
    base = dataclasses.replace(
        trials[0],
        ranks=sum(max(1, t.ranks) for t in trials),
        node_trials=shares,
        warnings=_warnings(trials),
        fraction_of_ceiling=None,  # the engine's annotate() judges the merged rate against the ceiling again
    )
    failed = _first_failure(trials, nodes)
    if failed is not None:
        return dataclasses.replace(
            base,
            status=failed[0],
            error=failed[1],
            samples_per_s=None,
            batches_per_s=None,
            rank_samples_per_s=(),
            node_samples_per_s=(),
            slowest_rank=None,
        )
    rates = [_rank_rates(t) for t in trials]
    slow_node, slow_local = min(
        ((k, r) for k, node_rates in enumerate(rates) for r in range(len(node_rates))),
        key=lambda kr: rates[kr[0]][kr[1]],
    )
    every = tuple(r for node_rates in rates for r in node_rates)
    job = len(every) * rates[slow_node][slow_local]
    worst_wait = max(trials, key=lambda t: -1.0 if t.wait_ms_p99 is None else t.wait_ms_p99)
    stalls = [t.stall_fraction for t in trials if t.stall_fraction is not None]
    spreads = [t.spread for t in trials if t.spread is not None]
    return dataclasses.replace(
        base,
        samples_per_s=job,
        batches_per_s=job / trials[0].config.batch_size if trials[0].config.batch_size else None,
        spread=max(spreads) if spreads else None,
        stable=all(t.stable for t in trials),
        stall_fraction=max(stalls) if stalls else None,
        wait_ms_p50=worst_wait.wait_ms_p50,
        wait_ms_p95=worst_wait.wait_ms_p95,
        wait_ms_p99=worst_wait.wait_ms_p99,
        rank_samples_per_s=every,
        rank_wait_ms_p99=tuple(w for t in trials for w in _rank_waits(t)),
        node_samples_per_s=tuple(float(t.samples_per_s or 0.0) for t in trials),
        slowest_rank=rank_name(nodes[slow_node], slow_local),
    )


def rank_name(node: NodeInfo, local_rank: int) -> str:
    """'node 1 (gpu-b) rank 0': a rank as every face names it (local rank: --ranks counts per node)."""
    return f"node {node.node_rank} ({node.hostname}) rank {local_rank}"


def node_name(node: NodeInfo) -> str:
    return f"node {node.node_rank} ({node.hostname})"


def _rank_rates(trial: TrialResult) -> tuple[float, ...]:
    if trial.rank_samples_per_s:
        return tuple(trial.rank_samples_per_s)
    # One rank, or ranks measured only as their sum: an even split is all the trial tells.
    ranks = max(1, trial.ranks)
    return (float(trial.samples_per_s or 0.0) / ranks,) * ranks


def _rank_waits(trial: TrialResult) -> tuple[float, ...]:
    if trial.rank_wait_ms_p99:
        return tuple(trial.rank_wait_ms_p99)
    return () if trial.wait_ms_p99 is None else (trial.wait_ms_p99,) * max(1, trial.ranks)


_NOT_FINISHED: tuple[Status, ...] = ("failed", "skipped")  # in this order: a failure wins over a skip


def _first_failure(trials: Sequence[TrialResult], nodes: Sequence[NodeInfo]) -> tuple[Status, str] | None:
    """(status, 'node K (host): error') of the first node that did not finish; a failure wins over a skip."""
    for wanted in _NOT_FINISHED:
        for trial, node in zip(trials, nodes, strict=True):
            if trial.status == wanted:
                return wanted, f"{node_name(node)}: {trial.error or trial.reason or wanted}"
    for trial, node in zip(trials, nodes, strict=True):
        if trial.samples_per_s is None:
            return "failed", f"{node_name(node)}: finished without a measured rate"
    return None


def _warnings(trials: Sequence[TrialResult]) -> tuple[str, ...]:
    """Every node's warnings once, in order; one that not every node gave names its node."""
    out: list[str] = []
    for k, trial in enumerate(trials):
        for warning in trial.warnings:
            everywhere = all(warning in t.warnings for t in trials)
            text = warning if everywhere else f"node {k}: {warning}"
            if text not in out:
                out.append(text)
    return tuple(out)
