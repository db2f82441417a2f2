"""`--ranks R`: R loader replicas at once, one process each, as `torchrun --nproc-per-node R` would start them.

The trial process is rank 0 and forks ranks 1..R-1 (all in the trial's process group, so one kill takes every rank
and every worker). Each rank sets the torchrun environment (RANK, LOCAL_RANK, WORLD_SIZE, ...), joins a gloo
process group on 127.0.0.1, calls the dataset factory, and builds its own DataLoader; a map-style dataset is
sharded with DistributedSampler unless the factory brings its own sampler. The ranks start their workers together
and measure over the same window, so the contention between them is in the numbers. Rank 0 reports: throughput
summed over ranks, every rank's processes for the probes.

The advice on ranks (rule of thumb, notes) is the engine's: engine/nodes/rank_notes.py.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import sys
import time
import traceback
from collections.abc import Iterable
from dataclasses import replace
from datetime import timedelta
from typing import Any

from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.figures import mean_of
from loadertop.core.model.protocol import Block, Emit, Epoch, Finished, Reply, Started, TrialNotice, Workers
from loadertop.core.trial.procs import die_with_parent
from loadertop.core.trial.world import global_rank, set_rank_environ


def aggregate(results: list[Finished]) -> Finished:
    """One Finished message for the node from every rank's: rates add up (the ranks load at once), the trial is
    as slow to start, as spread and as stalled as its worst rank, and its data-wait tails are the worst rank's
    (a synchronous step waits for the slowest rank's batch)."""
    return replace(
        results[0],
        batches_per_s=sum(r.batches_per_s for r in results),
        samples_per_s=sum(r.samples_per_s for r in results),
        spread=max((r.spread for r in results if r.spread is not None), default=None),
        first_batch_s=max(r.first_batch_s for r in results),
        workers_start_s=_worst(r.workers_start_s for r in results),
        stall_fraction=mean_of(r.stall_fraction for r in results) or 0.0,
        blocks=min(r.blocks for r in results),
        measured_s=max(r.measured_s for r in results),
        stable=all(r.stable for r in results),
        ranks=len(results),
        rank_samples_per_s=tuple(r.samples_per_s for r in results),
        warnings=tuple(dict.fromkeys(w for r in results for w in r.warnings)),
        wait_ms_p50=_worst(r.wait_ms_p50 for r in results),
        wait_ms_p95=_worst(r.wait_ms_p95 for r in results),
        wait_ms_p99=_worst(r.wait_ms_p99 for r in results),
        boundary_wait_ms=max((r.boundary_wait_ms for r in results), key=lambda b: max(b, default=0.0)),
        rank_wait_ms_p99=_each(r.wait_ms_p99 for r in results),
    )


def _each(values: Iterable[float | None]) -> tuple[float, ...]:
    known = tuple(values)
    return () if None in known else tuple(v for v in known if v is not None)


def _worst(values: Iterable[float | None]) -> float | None:
    return max((v for v in values if v is not None), default=None)


# -- the ranks (trial side) ------------------------------------------------------------------------------------------


class RankError(RuntimeError):
    pass


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_ranks(settings: Settings, config: TrialConfig, send: Emit) -> None:
    """Run one trial as `settings.ranks` ranks; this process is rank 0 and reports through `send`."""
    world = settings.ranks
    port = _free_port()
    errors_r, errors_w = os.pipe()  # ranks that fail say why here before they exit
    children: list[int] = []
    rank0 = os.getpid()
    for rank in range(1, world):
        pid = os.fork()
        if pid == 0:  # pragma: no cover (runs in the forked rank)
            die_with_parent(rank0)
            os.close(errors_r)
            code = 0
            try:
                _rank_main(rank, world, port, settings, config, lambda message: None, errors_w)
            except BaseException as exc:
                traceback.print_exc()
                _tell(errors_w, f"rank {rank}: {_describe(exc)}")
                code = 1
            finally:
                sys.stderr.flush()
            os._exit(code)
        children.append(pid)
    os.close(errors_w)
    try:
        _rank_main(0, world, port, settings, config, send, errors_r)
    except BaseException:
        for pid in children:  # they would wait for rank 0 in a collective until the timeout
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        raise
    finally:
        _reap(children)
        os.close(errors_r)


def _rank_main(
    rank: int, world: int, port: int, settings: Settings, config: TrialConfig, emit: Emit, errors: int
) -> None:
    import torch.distributed as dist

    set_rank_environ(settings, rank, port)  # on many nodes RANK / WORLD_SIZE are global; the group stays local
    print(f"--- rank {rank} of {world}, pid {os.getpid()}", file=sys.stderr, flush=True)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        # Hangs are the driver's to find (--trial-timeout, paused time excluded); a short gloo timeout would fail a
        # trial the user merely paused during a collective. A rank that dies breaks its peers' connections at once.
        timeout=timedelta(hours=24),
    )
    try:
        _measure_rank(rank, world, settings, config, emit, _Gather(dist, world, errors if rank == 0 else None))
    finally:
        with contextlib.suppress(Exception):
            dist.destroy_process_group()


def _measure_rank(rank: int, world: int, settings: Settings, config: TrialConfig, emit: Emit, gather: _Gather) -> None:
    """One rank's measured loop, in step with the others; what rank 0 emits stands for the node."""
    import torch

    from loadertop.core.trial.consumer import make_consumer
    from loadertop.core.trial.loader import build_loader
    from loadertop.core.trial.measure import MeasuredLoop

    if torch.cuda.is_available():
        torch.cuda.set_device(rank % torch.cuda.device_count())
    built = build_loader(settings, config, *global_rank(settings, rank))  # the job's share, on many nodes too
    consumer = make_consumer(settings, config)
    loop = MeasuredLoop(built.loader, config, settings, consumer, built.control, check_shards=built.iterable)

    # Every rank starts its workers, then all take their first batches together, as under torchrun.
    every = gather((os.getpid(), loop.start()))
    workers = tuple(w for _, pids in every for w in pids)
    ranks = tuple(pid for pid, _ in every[1:])
    emit(Workers(workers, ranks))
    first = loop.first_batch()
    emit(Started(workers, first, loop.batch_mb, ranks))
    for warning in loop.warm_up():
        emit(TrialNotice(f"rank {rank}: {warning}"))

    # One measured window for all: stopping one rank early would flatter the others.
    elapsed = max(gather(time.perf_counter() - loop.started - first))  # of the budget, which starts at the first batch
    window = max(settings.trial_seconds - elapsed, settings.min_blocks * settings.block_seconds)
    finished = loop.blocks(_scaled(emit, world), stop_when_stable=False, seconds=window)
    emit(aggregate(gather(finished)))

    # The epoch boundary, every rank at once (after Finished: outside the window).
    boundaries = [b for b in gather(loop.epoch_boundary()) if b is not None]
    emit(Epoch(max(boundaries) if boundaries else None))


class _Gather:
    """all_gather_object; when a peer has died, rank 0 raises with the reason that rank left in the pipe."""

    def __init__(self, dist: Any, world: int, errors: int | None) -> None:
        self.dist = dist
        self.world = world
        self.errors = errors

    def __call__(self, value: Any) -> list[Any]:
        out: list[Any] = [None] * self.world
        try:
            self.dist.all_gather_object(out, value)
        except Exception as exc:
            reason = _read_error(self.errors) if self.errors is not None else None
            if reason:
                raise RankError(reason) from exc
            raise
        return out


def _scaled(emit: Emit, world: int) -> Emit:
    """Live blocks from rank 0 stand for the node: rates × ranks (the Finished figure sums the real ones)."""

    def send(message: Reply) -> None:
        if isinstance(message, Block):
            message = replace(
                message, batches_per_s=message.batches_per_s * world, samples_per_s=message.samples_per_s * world
            )
        emit(message)

    return send


def _tell(fd: int, text: str) -> None:
    with contextlib.suppress(OSError):
        os.write(fd, (" ".join(text.split())[:3000] + "\n").encode())


def _read_error(fd: int, wait: float = 3.0) -> str | None:
    """The first failing rank's reason: it writes before it exits, and its exit is what broke the collective."""
    ready, _, _ = select.select([fd], [], [], wait)
    if not ready:
        return None
    data = os.read(fd, 65536).decode(errors="replace").strip()
    return data.splitlines()[0] if data else None


def _describe(exc: BaseException) -> str:
    try:
        from loadertop.core.trial.crashes import describe

        return describe(exc)
    except Exception:  # its own failure must not hide the rank's
        return f"{type(exc).__name__}: {exc}"


def _reap(children: list[int], timeout: float = 5.0) -> None:
    """Wait for the other ranks (they leave after the last collective); kill what dawdles."""
    deadline = time.monotonic() + timeout
    pending = set(children)
    while pending and time.monotonic() < deadline:
        for pid in list(pending):
            with contextlib.suppress(ChildProcessError):
                done, _ = os.waitpid(pid, os.WNOHANG)
                if done == 0:
                    continue
            pending.discard(pid)
        time.sleep(0.02)
    for pid in pending:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
