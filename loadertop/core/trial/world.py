"""Which share of the data a trial's rank loads, and the torchrun environment it sees.

On one node `--ranks R` are ranks 0..R-1 of R. On many nodes (settings.nodes, settings.node_rank, set by the agents)
local rank L of node K is global rank K × R + L of nodes × R: the data is sharded as the real job would shard it,
while the ranks' gloo group stays local to the node (only the data split spans the nodes). The trial process
inherits the agent's launch variables (torchrun's RANK, MASTER_ADDR, TORCHELASTIC_USE_AGENT_STORE, ...); they are
replaced here, so a rank's rendezvous never reaches the real job's store and a dataset that reads RANK and
WORLD_SIZE (webdataset's split_by_node) splits over the whole job.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

from loadertop.core.model.config import Settings

# Launch variables that must not reach a trial as the agent got them.
LAUNCH_VARIABLES = (
    "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_ERROR_FILE", "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR",
    "MASTER_PORT",
)  # fmt: skip


def global_rank(settings: Settings, local: int) -> tuple[int, int]:
    """(rank, world) of local rank `local` over every node's ranks."""
    return settings.node_rank * settings.ranks + local, settings.nodes * settings.ranks


def set_rank_environ(
    settings: Settings, local: int, port: int | None, environ: MutableMapping[str, str] | None = None
) -> None:
    """The torchrun variables of local rank `local` (`port`: its node-local gloo group's, None without one)."""
    env = os.environ if environ is None else environ
    for name in LAUNCH_VARIABLES:
        env.pop(name, None)
    rank, world = global_rank(settings, local)
    env.update(
        RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(local), LOCAL_WORLD_SIZE=str(settings.ranks),
        GROUP_RANK=str(settings.node_rank),
    )  # fmt: skip
    if port is not None:
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
