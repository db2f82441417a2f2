"""Is this agent one node of a many-node launch? Read from torchrun's or SLURM's environment (no torch here).

    torchrun --nnodes N --nproc-per-node 1 --node-rank K --master-addr HOST --master-port PORT -m loadertop ...
    srun --ntasks-per-node 1 loadertop ...

One agent runs per node, so torchrun's RANK is the node rank and WORLD_SIZE the node count. Under SLURM it is an
srun step (the batch script itself is not a launch): SLURM_PROCID is the node rank, node 0's address is MASTER_ADDR
when the batch script exports it, else the first host of the step's (or job's) node list, and the port is
MASTER_PORT or one derived from the job id (every node derives the same one).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from loadertop.core.model.config import UsageError

SLURM_PORT_BASE = 29500  # torchrun's default port, then the job id spreads jobs sharing a node over 1000 ports
SLURM_PORT_SPAN = 1000


@dataclass(frozen=True)
class Launch:
    node_rank: int
    nodes: int
    master_addr: str
    master_port: int
    launcher: Literal["torchrun", "slurm"]
    agent_store: bool = False  # torchrun's agent on node 0 already serves the store at master_addr:master_port


def detect_launch(environ: Mapping[str, str]) -> Launch | None:
    """The launch this process is one node of; None on one node or without a launcher. UsageError (one line)
    when the launch environment is malformed or starts more than one agent per node."""
    if "WORLD_SIZE" in environ or "TORCHELASTIC_RUN_ID" in environ:
        return _torchrun(environ)
    # An srun step, not the batch script itself (which has SLURM_NTASKS and SLURM_PROCID=0 too, but no step).
    if "SLURM_PROCID" in environ and any(
        k in environ for k in ("SLURM_STEP_ID", "SLURM_STEPID", "SLURM_STEP_NUM_TASKS")
    ):
        return _slurm(environ)
    return None


def _int(environ: Mapping[str, str], name: str, launcher: str) -> int:
    value = environ.get(name)
    if value is None:
        raise UsageError(f"{launcher} launch: {name} is not set")
    try:
        number = int(value)
    except ValueError:
        raise UsageError(f"{launcher} launch: {name}={value!r} is not a whole number") from None
    if number < 0:
        raise UsageError(f"{launcher} launch: {name}={value!r} is negative")
    return number


def _port(value: str, name: str, launcher: str) -> int:
    if not value.isdigit() or not 0 < int(value) < 65536:
        raise UsageError(f"{launcher} launch: {name}={value!r} is not a port (1-65535)")
    return int(value)


def _torchrun(environ: Mapping[str, str]) -> Launch | None:
    world = _int(environ, "WORLD_SIZE", "torchrun")
    per_node = _int(environ, "LOCAL_WORLD_SIZE", "torchrun") if "LOCAL_WORLD_SIZE" in environ else 1
    if per_node != 1:
        raise UsageError(
            f"torchrun launch: {per_node} processes per node; loadertop runs one agent per node "
            "(--nproc-per-node 1) and measures R ranks per node with --ranks R"
        )
    if world <= 1:
        return None
    rank = _int(environ, "GROUP_RANK" if "GROUP_RANK" in environ else "RANK", "torchrun")
    if rank >= world:
        raise UsageError(f"torchrun launch: node rank {rank} is not below WORLD_SIZE={world}")
    addr = environ.get("MASTER_ADDR", "")
    if not addr:
        raise UsageError("torchrun launch: MASTER_ADDR is not set")
    port = _port(environ.get("MASTER_PORT", ""), "MASTER_PORT", "torchrun")
    agent_store = environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
    return Launch(rank, world, addr, port, "torchrun", agent_store)


def _slurm(environ: Mapping[str, str]) -> Launch | None:
    tasks = _int(environ, _first(environ, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"), "slurm")
    if tasks <= 1:
        return None
    nodes_name = _first(environ, "SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES")
    nodes = _int(environ, nodes_name, "slurm") if nodes_name in environ else tasks
    if nodes != tasks:
        raise UsageError(
            f"slurm launch: {tasks} tasks on {nodes} nodes; loadertop runs one agent per node "
            "(srun --ntasks-per-node 1) and measures R ranks per node with --ranks R"
        )
    rank = _int(environ, "SLURM_PROCID", "slurm")
    if rank >= tasks:
        raise UsageError(f"slurm launch: SLURM_PROCID={rank} is not below SLURM_NTASKS={tasks}")
    addr = environ.get("MASTER_ADDR") or first_host(
        environ.get(_first(environ, "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"), "")
    )
    if "MASTER_PORT" in environ:
        port = _port(environ["MASTER_PORT"], "MASTER_PORT", "slurm")
    else:
        job = _int(environ, "SLURM_JOB_ID", "slurm")
        port = SLURM_PORT_BASE + job % SLURM_PORT_SPAN
    return Launch(rank, tasks, addr, port, "slurm")


def _first(environ: Mapping[str, str], step: str, job: str) -> str:
    """The step's variable when srun set it (the step may use part of the job), else the job's."""
    return step if step in environ else job


_RANGE = re.compile(r"^(?P<prefix>[^\[\],]*)\[(?P<body>[^\]]+)\](?P<suffix>[^,]*)")


def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list: "a,b" -> a, "node[01-04,07]" -> node01. UsageError otherwise."""
    text = nodelist.strip()
    if not text:
        raise UsageError("slurm launch: SLURM_JOB_NODELIST is not set (or export MASTER_ADDR)")
    match = _RANGE.match(text)
    if match is None:
        host = text.split(",")[0].strip()
        if not host or "[" in host or "]" in host:
            raise UsageError(f"slurm launch: SLURM_JOB_NODELIST={nodelist!r} cannot be read (export MASTER_ADDR)")
        return host
    first = match["body"].split(",")[0].split("-")[0].strip()
    if not first.isdigit():
        raise UsageError(f"slurm launch: SLURM_JOB_NODELIST={nodelist!r} cannot be read (export MASTER_ADDR)")
    return f"{match['prefix']}{first}{match['suffix']}"
