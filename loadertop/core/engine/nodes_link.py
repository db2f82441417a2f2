"""How a Sweep on one node takes part in a many-node sweep. The engine never imports torch: the link over
torch.distributed lives in loadertop/core/nodes/ and is handed to `Sweep(settings, nodes=link)`.

Node 0's Sweep plans (its planner), sends each configuration to every node, runs it like any trial, then merges
every node's result (engine/nodes_merge.py); the others' Sweeps take node 0's configurations instead of planning,
run them the same way, and send their results back. One driver loop for both, so probes, guards, the run folder and
the faces work unchanged on every node.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from loadertop.core.model.config import TrialConfig
from loadertop.core.model.nodes import NodeInfo
from loadertop.core.model.results import TrialResult


class NodeLink(Protocol):
    node_rank: int  # 0 plans and shows; the others follow
    exit_code: int  # what this node's loadertop exits with when its face said 0 (a lost node, a stop: not 0)

    def nodes(self) -> tuple[NodeInfo, ...]:
        """Every node's facts, in node rank order (known once all joined)."""
        ...

    def next_config(self, _plan: Callable[[], TrialConfig | None], /) -> TrialConfig | None:
        """Node 0: `_plan()` (the planner's next) and send it to every node. The others: wait for node 0's.
        None ends the sweep on every node."""
        ...

    def combine(self, trial: TrialResult) -> TrialResult:
        """Node 0: wait for every node's result of this trial and return the merge (a node lost or failed fails
        the trial). The others: send theirs to node 0 and return it unchanged."""
        ...

    def on_break(self, _callback: Callable[[str], None], /) -> None:
        """Call `_callback(reason)` once, from any thread, when the sweep must stop here: node 0 said stop, node 0
        or another node was lost, or (node 0) a node failed to answer in time."""
        ...

    def stop(self) -> None:
        """Node 0: tell every node to stop now (Ctrl-C, `q`, a cancel). Elsewhere nothing."""
        ...

    def close(self) -> None:
        """Leave the sweep (idempotent); node 0 first tells the others the sweep is over."""
        ...
