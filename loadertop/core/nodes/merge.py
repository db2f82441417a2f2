"""Every node's share of one trial merged into the job's trial: engine/nodes_merge.py's `merge_nodes` once it is
there (helper "results" writes it); until then this minimal stand-in with the same semantics (HELPERS.md), so the
agents and their tests run. The lead drops the stand-in when the real one is merged.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Sequence

from loadertop.core.model.nodes import NodeInfo, NodeTrial
from loadertop.core.model.results import TrialResult

try:  # by name: the module may not be there yet, and import-linter reads a missing module as `loadertop` itself
    merge_nodes = importlib.import_module("loadertop.core.engine.nodes_merge").merge_nodes
except ImportError:  # the stand-in, until engine/nodes_merge.py is merged

    def merge_nodes(trials: Sequence[TrialResult], nodes: Sequence[NodeInfo]) -> TrialResult:
        """trials[k] is node k's own result of the same configuration (node 0's first)."""
        first = trials[0]
        host = {n.node_rank: n.hostname for n in nodes}
        shares = tuple(NodeTrial.of(k, t) for k, t in enumerate(trials))
        failed = next(((k, t) for k, t in enumerate(trials) if t.status == "failed"), None)
        if failed is not None:
            k, t = failed
            return dataclasses.replace(
                first, status="failed", error=f"node {k} ({host.get(k, '?')}): {t.error}", node_trials=shares
            )
        ranks = [(k, local, rate) for k, s in enumerate(shares) for local, rate in enumerate(s.rank_samples_per_s)]
        if not ranks or any(t.status != "ok" for t in trials):
            return dataclasses.replace(first, node_trials=shares)
        k, local, slowest = min(ranks, key=lambda r: r[2])
        worst = max(trials, key=lambda t: t.stall_fraction or 0.0)
        return dataclasses.replace(
            first,
            samples_per_s=len(ranks) * slowest,
            rank_samples_per_s=tuple(rate for _, _, rate in ranks),
            node_samples_per_s=tuple(s.samples_per_s or 0.0 for s in shares),
            node_trials=shares,
            slowest_rank=f"node {k} ({host.get(k, '?')}) rank {local}",
            stall_fraction=worst.stall_fraction,
            wait_ms_p99=worst.wait_ms_p99,
            ranks=len(ranks),
            warnings=tuple(dict.fromkeys(w for t in trials for w in t.warnings)),
        )


__all__ = ["merge_nodes"]
