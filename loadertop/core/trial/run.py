"""One trial process: build the DataLoader, run the measured loop, report; with `--ranks R`, as R ranks.

Runs in the process the runner forks per trial (it leads the trial's process group).
"""

from __future__ import annotations

from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.protocol import Emit


def run_trial(
    settings: Settings, config: TrialConfig, send: Emit, decide: tuple[float | None, float | None] = (None, None)
) -> None:
    """`decide`: the (below, above) edges of the decision the trial is measured for (TrialRequest); ranks measure
    their whole window together and ignore it."""
    if settings.ranks > 1:
        from loadertop.core.trial.ranks import run_ranks

        run_ranks(settings, config, send)
        return
    from loadertop.core.trial.consumer import make_consumer
    from loadertop.core.trial.loader import build_loader
    from loadertop.core.trial.measure import measure

    built = build_loader(settings, config)
    consumer = make_consumer(settings, config)
    measure(
        built.loader,
        config,
        settings,
        consumer,
        send,
        control=built.control,
        check_shards=built.iterable,
        decide=decide,
    )
