"""The engine's NodeLink (engine/nodes/node_link.py) over the c10d store: trials out, results back, heartbeats.

Keys (under the store's prefix), each holding one message of model/node_protocol.py: `ready/I/K` node K is ready
for trial I (NodeReady); `trial/I` node 0's trial I (TrialOut, its config None: the sweep ended); `result/I/K` node
K's TrialResult of trial I (ResultBack); `bye/K` node K left (NodeBye). Two counters: `hb/K` node K's heartbeat,
`stop` node 0 stopped the sweep. A heartbeat thread per node beats every BEAT_S on its own connection; node 0
watches every node, the others watch node 0. A counter that has not moved for LOST_S, a node that left early, or
a store that is gone breaks the sweep here (the Sweep cancels), and node 0 then tells every node to stop.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from loadertop.core.engine.nodes import Launch, merge_nodes
from loadertop.core.model.config import TrialConfig
from loadertop.core.model.node_protocol import (
    NodeBye,
    NodeReady,
    ProtocolError,
    ResultBack,
    TrialOut,
    decode_as,
    encode,
)
from loadertop.core.model.nodes import NodeInfo
from loadertop.core.model.results import TrialResult
from loadertop.core.nodes.store import StoreGone, guarded, wait_keys

BEAT_S = 0.5
LOST_S = 3.0  # six missed beats: a node this quiet is gone (a busy node still beats: its own thread)
BYE_WAIT_S = 5.0  # node 0 serving the store stays this long for the others' last reads
EXIT_LOST = 1  # a node was lost: the sweep failed
EXIT_STOPPED = 130  # node 0 was interrupted: every node stops as if it had been


class StoreLink:
    """One node's end of a many-node sweep (the NodeLink protocol)."""

    many = True

    def __init__(self, store: Any, beat_store: Any, launch: Launch, infos: tuple[NodeInfo, ...]) -> None:
        self.node_rank = launch.node_rank
        self.reason: str | None = None  # why the sweep broke here (None: it did not)
        self.exit_code = 0  # what the agent should exit with when its face said 0
        self._launch = launch
        self._infos = infos
        self._store = store
        self._beat = beat_store
        self._index = 0  # the next trial's number: the same on every node
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[str], None]] = []
        self._broken = threading.Event()  # a node lost, or node 0 said stop (the others)
        self._halt = threading.Event()  # broken, or node 0 stopping: every wait here ends
        self._ended = threading.Event()  # the sweep ended as planned: a node leaving now is no loss
        self._closed = threading.Event()
        self._lost: dict[int, str] = {}  # node rank -> why it is gone (for its share of the trial)
        self._thread = threading.Thread(target=self._heartbeat, name="loadertop-heartbeat", daemon=True)
        self._thread.start()

    # -- NodeLink ---------------------------------------------------------------------------------------------------

    def nodes(self) -> tuple[NodeInfo, ...]:
        return self._infos

    def next_config(self, plan: Callable[[], TrialConfig | None]) -> TrialConfig | None:
        if self._halt.is_set():
            return None
        index = self._index
        try:
            if self.node_rank == 0:
                config = plan()
                if config is None:
                    self._end()
                    return None
                ready = [f"ready/{index}/{k}" for k in self._others()]
                if wait_keys(self._store, ready, None, self._halt):
                    return None  # a node lost, or stopped, while waiting
                guarded(lambda: self._store.set(f"trial/{index}", encode(TrialOut(index, config))))
            else:
                hello = encode(NodeReady(index, self.node_rank))
                guarded(lambda: self._store.set(f"ready/{index}/{self.node_rank}", hello))
                if wait_keys(self._store, [f"trial/{index}"], None, self._halt):
                    return None
                out = decode_as(TrialOut, guarded(lambda: self._store.get(f"trial/{index}")))
                if out.config is None:
                    # Node 0 also says "no more trials" when it was stopped: whichever this node hears first, the
                    # heartbeat's "stop" or this, the stop is the stop (exit 130), not a sweep that ended as planned
                    if guarded(lambda: self._store.add("stop", 0)) > 0:
                        self._break(f"{self._who(0)} stopped the sweep", EXIT_STOPPED)
                    else:
                        self._ended.set()
                    return None
                config = out.config
        except StoreGone as exc:
            self._gone(exc)
            return None
        except ProtocolError as exc:
            self._garbled(f"trial/{index}", exc)
            return None
        self._index += 1
        return config

    def combine(self, trial: TrialResult) -> TrialResult:
        index = self._index - 1
        try:
            if self.node_rank != 0:
                back = encode(ResultBack(index, self.node_rank, trial))
                guarded(lambda: self._store.set(f"result/{index}/{self.node_rank}", back))
                return trial
            keys = {k: f"result/{index}/{k}" for k in self._others()}
            missing = set(wait_keys(self._store, list(keys.values()), None, self._halt))
            shares = [trial]
            for k, key in keys.items():
                if key in missing:
                    why = self._lost.get(k) or "sent no result (the sweep stopped)"
                    shares.append(TrialResult(trial.index, trial.config, "failed", error=why))
                else:
                    raw = guarded(partial(self._store.get, key))
                    shares.append(decode_as(ResultBack, raw).trial)
        except StoreGone as exc:
            self._gone(exc)
            return TrialResult(trial.index, trial.config, "failed", error=self.reason)
        except ProtocolError as exc:
            self._garbled(f"result/{index}", exc)
            return TrialResult(trial.index, trial.config, "failed", error=self.reason)
        return merge_nodes(shares, self._infos)

    def on_break(self, callback: Callable[[str], None]) -> None:
        with self._lock:
            self._callbacks.append(callback)
            reason = self.reason
        if reason is not None:  # it broke before the Sweep listened
            callback(reason)

    def stop(self) -> None:
        if self.node_rank != 0 or self._ended.is_set():
            return
        if self.reason is None:
            self.exit_code = EXIT_STOPPED
        self._halt.set()  # node 0 waits for nobody now (a bye after this is no loss)
        with contextlib.suppress(StoreGone):  # gone: nobody left to tell
            guarded(lambda: self._store.add("stop", 1))

    def close(self) -> None:
        if self._closed.is_set():
            return
        try:
            if self.node_rank == 0:
                if not self._broken.is_set():
                    self._end()
                live = [f"bye/{k}" for k in self._others() if k not in self._lost]
                wait_keys(self._store, live, time.monotonic() + BYE_WAIT_S, threading.Event())
            else:
                guarded(lambda: self._store.set(f"bye/{self.node_rank}", encode(NodeBye(self.node_rank))))
        except StoreGone:
            pass
        finally:
            self._closed.set()
            self._thread.join(2 * BEAT_S + 1)

    # -- breaking -----------------------------------------------------------------------------------------------------

    def _others(self) -> range:
        return range(1, self._launch.nodes)

    def _end(self) -> None:
        self._ended.set()
        guarded(lambda: self._store.set(f"trial/{self._index}", encode(TrialOut(self._index, None))))

    def _who(self, k: int) -> str:
        host = self._infos[k].hostname if k < len(self._infos) else "?"
        return f"node {k} ({host})"

    def _gone(self, exc: StoreGone) -> None:
        if self.node_rank == 0:
            self._break(f"the sweep's store is gone ({exc})", EXIT_LOST)
        else:
            self._lost[0] = "lost: its store is gone"
            self._break(f"{self._who(0)} {self._lost[0]}", EXIT_LOST)

    def _garbled(self, key: str, exc: ProtocolError) -> None:
        """A message this agent cannot read (the versions were checked at the hello: a bug, never a peer's)."""
        self._break(f"node {self.node_rank}: unreadable {key} ({exc})", EXIT_LOST)

    def _break(self, reason: str, code: int) -> None:
        with self._lock:
            if self.reason is not None or self._ended.is_set() or self._closed.is_set():
                return
            self.reason = reason
            self.exit_code = code
            self._broken.set()
            self._halt.set()
            callbacks = list(self._callbacks)
        for callback in callbacks:
            callback(reason)

    # -- heartbeats (their own thread and connection) ---------------------------------------------------------------

    def _heartbeat(self) -> None:
        watched = list(self._others()) if self.node_rank == 0 else [0]
        seen = {k: (-1, time.monotonic()) for k in watched}
        while not self._closed.wait(BEAT_S):
            try:
                guarded(lambda: self._beat.add(f"hb/{self.node_rank}", 1))
                if self.node_rank != 0 and guarded(lambda: self._beat.add("stop", 0)) > 0:
                    self._break(f"{self._who(0)} stopped the sweep", EXIT_STOPPED)
                for k in watched:
                    self._watch(k, seen)
            except StoreGone as exc:
                self._gone(exc)
            if self._halt.is_set() or self._ended.is_set():
                # Keep beating (node 0 still waits for this node's bye), but watch no more.
                watched = []

    def _watch(self, k: int, seen: dict[int, tuple[int, float]]) -> None:
        count = guarded(lambda: self._beat.add(f"hb/{k}", 0))
        now = time.monotonic()
        last, since = seen[k]
        if count != last:
            seen[k] = (count, now)
        elif now - since > LOST_S:
            self._lost[k] = f"lost: no heartbeat for {LOST_S:g} s"
            self._break(f"{self._who(k)} {self._lost[k]}", EXIT_LOST)
            return
        if self.node_rank == 0 and guarded(lambda: self._beat.check([f"bye/{k}"])):
            self._lost[k] = "left the sweep"
            self._break(f"{self._who(k)} {self._lost[k]}", EXIT_LOST)
