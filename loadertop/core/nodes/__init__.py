"""Many nodes: one loadertop agent per node of a torchrun or srun launch, joined over torch.distributed's c10d store.

    launch = detect_launch(os.environ)         # engine/nodes/launch.py (no torch)
    settings, link = join_nodes(settings, launch)
    Sweep(settings, nodes=link)                # node 0 plans and shows; the others follow, headless

A layer above the engine (it imports torch, which the engine never does); the CLI imports it lazily, only when a
launch with more than one node is found.
"""

from __future__ import annotations

import dataclasses
import os
import signal

from loadertop.core.engine.nodes import Launch
from loadertop.core.model.config import Settings
from loadertop.core.nodes.join import join
from loadertop.core.nodes.link import EXIT_LOST, EXIT_STOPPED, StoreLink
from loadertop.core.nodes.store import OP_TIMEOUT_S, connect
from loadertop.core.trial.procs import PR_SET_PDEATHSIG, prctl


def end_with_launcher() -> None:
    """torchrun starts its worker in a session of its own and never kills it when the agent itself is killed: the
    agent going means the node's job is gone, so this agent stops too (SIGTERM: the faces cancel, trials die)."""
    parent = os.getppid()
    prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # it went before the signal was armed
        os.kill(os.getpid(), signal.SIGTERM)


def join_nodes(settings: Settings, launch: Launch) -> tuple[Settings, StoreLink]:
    """This node's settings (nodes, node_rank from the launch) and its link, once every node joined and node 0
    accepted them all. UsageError (one line, exit 2) when a node does not join in time or differs."""
    settings = dataclasses.replace(settings, nodes=launch.nodes, node_rank=launch.node_rank)
    end_with_launcher()
    serve = launch.node_rank == 0 and not launch.agent_store
    store = connect(launch, settings.join_timeout, serve)
    infos = join(store, launch, settings)
    beat = connect(dataclasses.replace(launch), OP_TIMEOUT_S, serve=False)  # the heartbeats' own connection
    return settings, StoreLink(store, beat, launch, infos)


__all__ = ["EXIT_LOST", "EXIT_STOPPED", "StoreLink", "join_nodes"]
