"""The c10d store the agents of a many-node sweep talk through: torch.distributed's TCPStore at node 0's address.

Under torchrun node 0's agent already serves one there (TORCHELASTIC_USE_AGENT_STORE): every agent is a client.
Otherwise (srun, or torchrun's variables set by hand) node 0's agent serves it in its own process. Every key lives
under one prefix. Waits poll `check` (never a blocking get), so a stop or a lost node ends them at once.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from functools import partial
from typing import Any

from loadertop.core.engine.nodes import Launch
from loadertop.core.model.config import UsageError

PREFIX = "loadertop"
OP_TIMEOUT_S = 10.0  # one store operation on a store that is up (a host gone silent ends it)
POLL_S = 0.05
TRY_S = 1.0  # one try to connect to node 0's store


class StoreGone(Exception):
    """The store (node 0's side) cannot be reached any more."""


def _torch_distributed() -> Any:
    """torch.distributed with c10d's C++ log quiet: a node still waiting for node 0 would print a stack per failed
    connection try, where loadertop says one line. The level is read once, as torch loads; the trials and their
    workers (started with this environment) get the usual one."""
    before = os.environ.get("TORCH_CPP_LOG_LEVEL")
    os.environ["TORCH_CPP_LOG_LEVEL"] = "FATAL"
    try:
        import torch.distributed as dist
    finally:
        if before is None:
            os.environ.pop("TORCH_CPP_LOG_LEVEL", None)
        else:
            os.environ["TORCH_CPP_LOG_LEVEL"] = before
    return dist


def connect(launch: Launch, timeout_s: float, serve: bool) -> Any:
    """A client of the sweep's store (`serve`: node 0 also serves it). UsageError when node 0 never answers within
    `timeout_s` (tries of at most TRY_S each, so the deadline holds: torch's own retries overshoot it)."""
    dist = _torch_distributed()
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        try:
            store = dist.TCPStore(
                launch.master_addr,
                launch.master_port,
                is_master=serve,
                timeout=timedelta(seconds=max(0.1, min(TRY_S, left))),
                wait_for_workers=False,
            )
            break
        except Exception as exc:  # DistNetworkError and the like: torch's reason, one line of it
            if serve or time.monotonic() + 0.1 >= deadline:
                what = "serve" if serve else "reach"
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
                raise UsageError(
                    f"node {launch.node_rank} of {launch.nodes} could not {what} the sweep's store at "
                    f"{launch.master_addr}:{launch.master_port} within {timeout_s:g} s ({first})"
                ) from None
            time.sleep(min(POLL_S * 4, max(0.0, deadline - time.monotonic())))
    store.set_timeout(timedelta(seconds=OP_TIMEOUT_S))
    return dist.PrefixStore(PREFIX, store)


def guarded(op: Callable[[], Any]) -> Any:
    """One store operation; StoreGone when the store's side is gone (node 0's process or host)."""
    try:
        return op()
    except Exception as exc:
        raise StoreGone(
            f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        ) from exc


def wait_keys(store: Any, keys: Sequence[str], deadline: float | None, broken: threading.Event) -> list[str]:
    """Wait until every key is set; returns the ones still missing when `deadline` (monotonic) passed or `broken`
    was set (an empty list: all there)."""
    missing = list(keys)
    while missing:
        if guarded(partial(store.check, missing)):  # one round trip once everything is there
            return []
        missing = [k for k in missing if not guarded(partial(store.check, [k]))]
        if not missing or broken.is_set() or (deadline is not None and time.monotonic() >= deadline):
            break
        time.sleep(POLL_S)
    return missing
