"""How a Sweep on one node takes part in a many-node sweep. The engine never imports torch: the link over
torch.distributed lives in loadertop/core/nodes/ and is handed to `Sweep(settings, nodes=link)`.

Node 0's Sweep plans (its planner), sends each configuration to every node, runs it like any trial, then merges
every node's result (engine/nodes/merge.py); the others' Sweeps take node 0's configurations instead of planning,
run them the same way, and send their results back. One driver loop for both, so probes, guards, the run folder and
the faces work unchanged on every node. A sweep on one node talks through OneNode, the null link: the driver never
asks whether it has a link, only (`many`) whether the trial it runs is one node's share of a bigger one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from loadertop.core.model.config import TrialConfig
from loadertop.core.model.nodes import NodeInfo
from loadertop.core.model.results import TrialResult


class NodeLink(Protocol):
    node_rank: int  # 0 plans and shows; the others follow
    # More than one node: every node measures the same whole window, cold (node 0's planner decides on the merged
    # trial, and a follower's knows nothing of finalists), and a stop is node 0's verdict, sent through the link.
    many: bool
    exit_code: int  # what this node's loadertop exits with when its face said 0 (a lost node, a stop: not 0)

    def nodes(self) -> tuple[NodeInfo, ...]:
        """Every node's facts, in node rank order (known once all joined); none on one node."""
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


class OneNode:
    """The NodeLink of a sweep on one node: it plans its own trials, shares them with no one and never breaks."""

    node_rank = 0
    many = False
    exit_code = 0  # one node never loses another

    def nodes(self) -> tuple[NodeInfo, ...]:
        return ()  # a one-node result names no nodes

    def next_config(self, plan: Callable[[], TrialConfig | None], /) -> TrialConfig | None:
        return plan()

    def combine(self, trial: TrialResult) -> TrialResult:
        return trial

    def on_break(self, callback: Callable[[str], None], /) -> None:
        pass  # nothing but this node: nothing to lose

    def stop(self) -> None:
        pass

    def close(self) -> None:
        pass
