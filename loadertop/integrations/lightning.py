"""PyTorch Lightning: `Trainer(callbacks=[LoadertopCallback()])` makes the fit attachable (`loadertop attach PID`).

The train loader's iteration goes through `loadertop.watch` (the code path of a hand-written loop: throughput,
stall, wait tails, worker memory, leak warnings, epochs). With `tune_budget_s=S` it goes through `loadertop.tune`
instead: the first S seconds of training try DataLoader configurations, the rest of the fit runs with the best,
and the chosen `DataLoader(...)` line is printed when it settles (`callback.tuned` holds the choice).

At `on_train_start` the loaders Lightning prepared (its samplers injected) are put behind a `LoaderProxy` in its
CombinedLoader, and the fit loop's data fetcher is restarted once so that the first epoch is watched too (the
fetcher had opened the plain loader's iterator: its workers are shut down and started again, once). A loader
reloaded later (`reload_dataloaders_every_n_epochs`) is wrapped again at its epoch's start.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import lightning.pytorch as pl

from loadertop.integrations.loaders import install, proxied, tuned_of

log = logging.getLogger("loadertop")


class LoadertopCallback(pl.Callback):
    """Watch (or, with `tune_budget_s`, tune in place) the train dataloader of every `Trainer.fit`."""

    def __init__(self, tune_budget_s: float | None = None) -> None:
        super().__init__()
        self.tune_budget_s = tune_budget_s
        self.tuned: Any = None  # the Tuned (loadertop.tune) of the first train loader, when tuning
        self._reported = False
        self._reported_missing = False

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        del pl_module  # the hooks' signature; the loaders are the trainer's
        if self._wrap(trainer):
            fetcher = getattr(trainer.fit_loop, "_data_fetcher", None)
            if fetcher is not None:  # it opened the plain loader's iterator already: open the proxy's instead
                iter(fetcher)

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        del pl_module
        if self._wrap(trainer):  # a reloaded loader: this epoch's iterator is opened after this hook
            log.debug("loadertop: a reloaded train loader is watched from its first epoch")

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        del trainer, pl_module
        tuned = self.tuned
        if tuned is not None and tuned.choice is None and not self._reported:
            self._reported = True
            print(
                f"loadertop.tune: training ended before tuning settled ({len(tuned.trace)} configurations measured"
                f" of a {tuned.budget_s:g} s budget); nothing chosen",
                file=sys.stderr,
            )

    def _wrap(self, trainer: pl.Trainer) -> bool:
        """Put every train loader of the fit loop behind a proxy; True when one was not yet."""
        if not hasattr(trainer.fit_loop, "_combined_loader"):  # a Lightning without it: the fit goes on unwatched
            if not self._reported_missing:
                self._reported_missing = True
                log.warning("loadertop: this Lightning's fit loop has no _combined_loader; the fit is not watched")
            return False
        combined = trainer.fit_loop._combined_loader
        if combined is None:  # no training batches (limit_train_batches=0)
            return False
        try:
            loaders = list(combined.flattened)
            if all(proxied(dl) is not None for dl in loaders):
                return False
            wrapped = []
            for dl in loaders:
                budget = self.tune_budget_s if self.tuned is None else None  # tune the first loader, once
                proxy = dl if proxied(dl) is not None else install(dl, budget)
                if budget is not None:
                    self.tuned = tuned_of(proxy)
                wrapped.append(proxy)
            combined.flattened = wrapped
            return True
        except Exception as exc:  # loadertop's failure never stops the fit
            log.warning("loadertop: cannot watch the train loader (%s: %s)", type(exc).__name__, exc)
            return False
