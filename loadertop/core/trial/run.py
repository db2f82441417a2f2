"""One trial process: build the DataLoader, run the measured loop, report; with `--ranks R`, as R ranks.

Runs in the process the runner forks per trial (it leads the trial's process group).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.protocol import Emit, Epoch, Finished, Started, TrialNotice, Workers
from loadertop.core.trial.loader import EpochControl
from loadertop.core.trial.measure import MeasuredLoop


def run_trial(
    settings: Settings,
    config: TrialConfig,
    send: Emit,
    decide: tuple[float | None, float | None] = (None, None),
    park: tuple[int, int] | None = None,
) -> None:
    """`decide`: the (below, above) edges of the decision the trial is measured for (TrialRequest); ranks measure
    their whole window together and ignore it. `park`: the (go, ready) pipes of a trial that waits with its workers
    for more runs after the first (trial/parked.py); ranks do not park."""
    if settings.ranks > 1:
        from loadertop.core.trial.ranks import run_ranks

        run_ranks(settings, config, send)
        return
    from loadertop.core.trial.consumer import make_consumer
    from loadertop.core.trial.loader import build_loader
    from loadertop.core.trial.parked import wait_for_again

    if settings.nodes > 1:  # one rank per node: node K loads share K of the job's (world.py)
        from loadertop.core.trial.world import global_rank, set_rank_environ

        set_rank_environ(settings, 0, None)
        built = build_loader(settings, config, *global_rank(settings, 0))
    else:
        built = build_loader(settings, config)
    consumer = make_consumer(settings, config)
    loop = measure(
        built.loader,
        config,
        settings,
        consumer,
        send,
        control=built.control,
        check_shards=built.iterable,
        decide=decide,
    )
    while park is not None and wait_for_again(*park):
        measure_again(loop, send)


def measure(
    loader: Any,
    config: TrialConfig,
    settings: Settings,
    consumer: Callable[[Any], None],
    emit: Emit,
    control: EpochControl | None = None,
    check_shards: bool = False,
    decide: tuple[float | None, float | None] = (None, None),
) -> MeasuredLoop:
    """One trial of one process: every step of the MeasuredLoop, reported through `emit`. Returns the loop, its
    workers alive (measure_again)."""
    loop = MeasuredLoop(loader, config, settings, consumer, control, check_shards)
    loop.decide = decide
    loop.on_new_workers = lambda pids: emit(Workers(tuple(pids)))
    emit(Workers(tuple(loop.start())))
    first = loop.first_batch()
    emit(Started(tuple(loop.worker_pids()), first, loop.batch_mb))
    for warning in loop.warm_up():
        emit(TrialNotice(warning))
    finished = loop.blocks(emit)
    emit(finished)
    # After Finished: the window is closed, so the restart's CPU burst and new workers stay out of the trial's CPU
    # and memory figures. New workers are in the trial's process group all the same.
    loop.on_new_workers = None
    loop.boundary_s = loop.epoch_boundary() if boundary_matters(finished, settings) else None
    emit(Epoch(loop.boundary_s))
    return loop


BOUNDARY_WORTH = 0.01  # an epoch boundary likely under this share of an epoch is not measured (boundary_matters)


def boundary_matters(finished: Finished, settings: Settings) -> bool:
    """Whether the epoch boundary could weigh in what training sees: its likely cost, the first batch's wait
    (iter() starts the workers as a new epoch does), against an epoch's length. Under BOUNDARY_WORTH of a long epoch
    it is not worth the second or more its measurement takes at many workers, unless persistent_workers is swept:
    the boundary is what it changes."""
    if len(settings.persistent_workers) > 1 or not finished.epoch_batches or finished.batches_per_s <= 0:
        return True
    return finished.first_batch_s * finished.batches_per_s / finished.epoch_batches >= BOUNDARY_WORTH


def measure_again(loop: MeasuredLoop, emit: Emit) -> None:
    """Another run on the workers of the last (a parked trial, trial/parked.py): no start-up, and the buffer they
    refilled while idle is skipped like the first one. The start-up figures and the epoch boundary reported are the
    first run's; Finished says `warm`."""
    loop.again()
    loop.on_new_workers = lambda pids: emit(Workers(tuple(pids)))
    pids = tuple(loop.worker_pids())
    emit(Workers(pids))
    emit(Started(pids, loop.first_batch_s, loop.batch_mb))
    loop.warm_up()  # its warnings were said on the first run; Finished carries them again
    emit(replace(loop.blocks(emit), warm=True))
    loop.on_new_workers = None
    emit(Epoch(loop.boundary_s))
