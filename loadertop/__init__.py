"""loadertop: find the fastest PyTorch DataLoader configuration on the machine where you train."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loadertop.core.model.version import VERSION

__version__ = VERSION

if TYPE_CHECKING:
    from loadertop.core.engine import stages as stages
    from loadertop.core.engine import sweep as sweep
    from loadertop.core.job.tune import tune as tune
    from loadertop.core.job.watch import watch as watch
    from loadertop.core.model.config import DataError as DataError
    from loadertop.core.model.config import UsageError as UsageError
    from loadertop.core.trial.threads import set_worker_threads as set_worker_threads


def __getattr__(name: str) -> Any:
    # `import loadertop` stays cheap (the CLI's --help must not pay for torch).
    if name == "sweep":
        from loadertop.core.engine import sweep

        return sweep
    if name == "stages":  # where a sample's time goes: loadertop.stages("train.py:make")
        from loadertop.core.engine import stages

        return stages
    if name == "watch":  # `for batch in loadertop.watch(loader):` in a training script
        from loadertop.core.job.watch import watch

        return watch
    if name == "tune":  # `for batch in loadertop.tune(loader, budget_s=120):`
        from loadertop.core.job.tune import tune

        return tune
    if name == "UsageError":  # what loadertop.sweep(...) raises for bad input
        from loadertop.core.model.config import UsageError

        return UsageError
    if name == "DataError":  # a UsageError: the data fails the same way in every configuration (with the fix)
        from loadertop.core.model.config import DataError

        return DataError
    if name == "set_worker_threads":  # a picklable worker_init_fn: the snippet's --worker-threads
        from loadertop.core.trial.threads import set_worker_threads

        return set_worker_threads
    raise AttributeError(name)
