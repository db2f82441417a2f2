"""The engine's side of a many-node sweep, with no torch: the launch read from the environment (launch.py), the
NodeLink a Sweep talks through and its one-node null (node_link.py), every node's result merged into one trial
(merge.py), the per-node rows and who paces the job (node_rows.py), per-rank notes (rank_notes.py).

This `__init__` is the entry for the many-node agents (core/nodes/, over torch.distributed)."""

from loadertop.core.engine.nodes.launch import Launch, detect_launch
from loadertop.core.engine.nodes.merge import merge_nodes
from loadertop.core.engine.nodes.node_link import NodeLink, OneNode

__all__ = ["Launch", "NodeLink", "OneNode", "detect_launch", "merge_nodes"]
