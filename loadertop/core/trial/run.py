"""One trial process: build the DataLoader, run the measured loop, report; with `--ranks R`, as R ranks.

Runs in the process the runner forks per trial (it leads the trial's process group).
"""

from __future__ import annotations

from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.protocol import Emit


def run_trial(settings: Settings, config: TrialConfig, send: Emit) -> None:
    if settings.ranks > 1:
        from loadertop.core.trial.ranks import run_ranks

        run_ranks(settings, config, send)
        return
    from loadertop.core.trial.consumer import make_consumer
    from loadertop.core.trial.loader import build_loader
    from loadertop.core.trial.measure import measure

    if settings.nodes > 1:  # one rank per node: node K loads share K of the job's (world.py)
        from loadertop.core.trial.world import global_rank, set_rank_environ

        set_rank_environ(settings, 0, None)
        built = build_loader(settings, config, *global_rank(settings, 0))
    else:
        built = build_loader(settings, config)
    consumer = make_consumer(settings, config)
    measure(built.loader, config, settings, consumer, send, control=built.control, check_shards=built.iterable)
