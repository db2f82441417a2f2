"""Hugging Face Transformers: `Trainer(..., callbacks=[LoadertopCallback()])` makes `Trainer.train` attachable
(`loadertop attach PID`), and `LoadertopTrainer(..., loadertop_tune_budget_s=S)` tunes its train loader in place.

The Trainer's train loader is Accelerate's prepared wrapper around a DataLoader; the callback, at
`on_train_begin`, puts `loadertop.watch` on the DataLoader inside it (`loaders.install`), so the watched iteration
sees the batches and the DataLoader's workers. `LoadertopTrainer` (or `LoadertopTrainerMixin` before your own
Trainer subclass) does it in `get_train_dataloader` with `loadertop.tune`: the first S seconds of training try
configurations, the rest runs with the best. Once it settles, the callback prints the chosen `DataLoader(...)`
line (tune's own) and the `TrainingArguments(...)` that give the Trainer that loader on the next run:
`dataloader_num_workers`, `dataloader_prefetch_factor`, `dataloader_persistent_workers`, `dataloader_pin_memory`.
"""

from __future__ import annotations

import sys
from typing import Any

from transformers import Trainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from loadertop.core.model.config import TrialConfig
from loadertop.integrations.loaders import install, tuned_of


def training_arguments(choice: TrialConfig) -> dict[str, Any]:
    """The TrainingArguments fields that make the Trainer build a DataLoader with `choice`'s knobs."""
    workers = choice.num_workers > 0
    return {
        "dataloader_num_workers": choice.num_workers,
        "dataloader_prefetch_factor": choice.prefetch_factor if workers else None,
        "dataloader_persistent_workers": choice.persistent_workers if workers else False,
        "dataloader_pin_memory": choice.pin_memory,
    }


def training_arguments_line(choice: TrialConfig) -> str:
    """`TrainingArguments(..., dataloader_num_workers=6, ...)`: the line to paste."""
    fields = ", ".join(f"{name}={value!r}" for name, value in training_arguments(choice).items())
    return f"TrainingArguments(..., {fields})"


class LoadertopCallback(TrainerCallback):
    """Watch the Trainer's train loader (`loadertop attach PID`); print the TrainingArguments once a tuned loader
    (LoadertopTrainer) settles. `tune_budget_s=S` tunes the loader from here instead (as LoadertopTrainer)."""

    def __init__(self, tune_budget_s: float | None = None) -> None:
        self.tune_budget_s = tune_budget_s
        self.tuned: Any = None  # the Tuned (loadertop.tune) behind the train loader, when tuning
        self.arguments_line = ""  # the TrainingArguments line printed, once tuning settled
        self._done = False

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        loader = kwargs.get("train_dataloader")
        if loader is None:
            return
        install(loader, self.tune_budget_s)  # in place: the Trainer iterates this very wrapper
        self.tuned = tuned_of(loader)

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        self._report()

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._report(final=True)

    def _report(self, final: bool = False) -> None:
        tuned = self.tuned
        if tuned is None or self._done:
            return
        if tuned.choice is not None:
            self._done = True
            self.arguments_line = training_arguments_line(tuned.choice)
            print(f"loadertop: for this loader on the next run, use\n  {self.arguments_line}", file=sys.stderr)
        elif final:
            self._done = True
            print(
                f"loadertop.tune: training ended before tuning settled ({len(tuned.trace)} configurations measured"
                f" of a {tuned.budget_s:g} s budget); nothing chosen",
                file=sys.stderr,
            )


class LoadertopTrainerMixin:
    """Before `Trainer` in your subclass's bases: `get_train_dataloader` returns the loader watched, or tuned in
    place when `loadertop_tune_budget_s` is set; a LoadertopCallback is added to print the TrainingArguments."""

    loadertop_tune_budget_s: float | None = None

    def get_train_dataloader(self) -> Any:
        loader = super().get_train_dataloader()  # type: ignore[misc]  # a mixin: the Trainer after it in the MRO has it
        return install(loader, self.loadertop_tune_budget_s)


class LoadertopTrainer(LoadertopTrainerMixin, Trainer):
    """`Trainer`, its train loader watched; `loadertop_tune_budget_s=S`: tuned in place for S seconds of training."""

    def __init__(self, *args: Any, loadertop_tune_budget_s: float | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.loadertop_tune_budget_s = loadertop_tune_budget_s
        if not any(isinstance(cb, LoadertopCallback) for cb in self.callback_handler.callbacks):
            self.add_callback(LoadertopCallback())
