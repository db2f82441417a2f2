"""Many nodes: the facts of each node of a many-node sweep, and each node's share of one trial.

A many-node sweep runs one loadertop agent per node (torchrun or srun starts them); node 0 plans and shows, the
others measure the same trial at the same moment and send node 0 their `TrialResult`. Node 0 merges them
(engine/nodes/merge.py) into one trial whose `samples_per_s` is the job's throughput as DDP sees it: every rank
paced by the slowest, so world ranks × the slowest rank's samples/s. These records are what it keeps per node
(engine/nodes/merge.py's `node_trial` makes one of a node's TrialResult: model/ never imports results here).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from loadertop.core.model.status import Status

NODES_PROTOCOL_VERSION = 2  # in every node's hello (model/node_protocol.py): 2 since its messages are typed


@dataclass(frozen=True)
class NodeInfo:
    """One node as its agent sees it (the result JSON's top-level `nodes` list, in node rank order)."""

    node_rank: int
    hostname: str
    usable_cpus: int  # affinity, cgroup cpu.max and SLURM_CPUS_PER_TASK applied
    mem_total_mb: float
    mem_available_mb: float
    ranks: int = 1  # local ranks per node (--ranks)
    loadertop: str = ""  # the agent's loadertop version

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NodeInfo:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class NodeTrial:
    """One node's share of one trial: what its agent measured there (its local ranks summed)."""

    node_rank: int
    status: Status
    error: str | None = None
    samples_per_s: float | None = None  # the node's ranks summed
    rank_samples_per_s: tuple[float, ...] = ()  # each local rank's (one entry with --ranks 1)
    stall_fraction: float | None = None
    wait_ms_p99: float | None = None
    total_pss_mb: float | None = None
    worker_uss_mb: tuple[float, ...] = ()
    cpu_percent: float | None = None
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for name in ("rank_samples_per_s", "worker_uss_mb", "warnings"):
            data[name] = list(getattr(self, name))
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NodeTrial:
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        for name in ("rank_samples_per_s", "worker_uss_mb", "warnings"):
            fields[name] = tuple(fields.get(name) or ())
        return cls(**fields)
