"""What `loadertop.tune` tells the job's viewers (`loadertop attach`, `loadertop run`): the loop's epochs and steps
as watch() records them, each switch's new workers, and tune's own trace and choice. Viewers are a bonus: without a
publisher (none could start) tuning goes on and only `Tuned.trace` keeps the steps."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

from loadertop.core.job.publisher import Publisher, publisher
from loadertop.core.job.tune_measure import Meter
from loadertop.core.job.tune_plan import Choice, step_message
from loadertop.core.job.watch import StepRecorder, worker_pids
from loadertop.core.model.config import TrialConfig
from loadertop.core.model.live_protocol import JobWorkers, TuneChose, TuneStep

log = logging.getLogger("loadertop")


class Viewers:
    """The publisher, its loader number and the step recorder of one tuned loader (all None before `start`)."""

    def __init__(self) -> None:
        self.pub: Publisher | None = None
        self.recorder: StepRecorder | None = None
        self.loader_id = 0

    def start(self) -> None:
        try:
            self.pub = publisher()
            self.loader_id = self.pub.new_loader() if self.pub is not None else 0
            self.recorder = StepRecorder(self.pub, self.loader_id)
        except Exception as exc:
            log.warning("loadertop.tune: cannot publish to viewers (%s: %s); tuning anyway", type(exc).__name__, exc)
            self.pub, self.recorder = None, None

    def step(self, wait_s: float, step_s: float, samples: int) -> None:
        if self.recorder is not None:
            self.recorder.step(wait_s, step_s, samples)

    def measured(self, result: Any, meter: Meter) -> TuneStep:
        """One configuration measured: its trace step, sent to the viewers."""
        message = TuneStep(
            t=self.pub.now() if self.pub is not None else 0.0,
            loader=self.loader_id,
            config=result.config,
            batches=meter.batches,
            samples_per_s=result.samples_per_s,
            stall_fraction=result.stall_fraction,
            wait_ms_p95=result.wait_ms_p95,
            switch_s=meter.switch_s,
            message=step_message(result, meter.switch_s),
        )
        log.debug("loadertop.tune: %s", message.message)
        if self.pub is not None:
            self.pub.append_trace(message)
        return message

    def chose(self, choice: Choice, trials: int, tuning_s: float) -> None:
        if self.pub is None:
            return
        message = TuneChose(
            t=self.pub.now(),
            loader=self.loader_id,
            config=choice.config,
            samples_per_s=choice.samples_per_s,
            reason=choice.reason,
            snippet=choice.snippet,
            tuning_s=tuning_s,
            trials=trials,
        )
        self.pub.append_trace(message)

    def announce(self, epoch: int, it: Iterator[Any], config: TrialConfig | None, first: bool) -> None:
        pids = worker_pids(it)
        if first and self.recorder is not None:
            self.recorder.epoch_started(epoch, pids, config)
        elif self.pub is not None:  # a switch inside the epoch: its new workers
            self.pub.send(JobWorkers(t=self.pub.now(), loader=self.loader_id, pids=pids, config=config))

    def left_in_step(self, step: tuple[float, float, int] | None) -> None:
        """The loop left during a step (a break, an exception in it, or no next() after the last batch, as
        Lightning's fetcher does): that step counts, as in watch(), and no batch is reported dropped."""
        if step is not None:
            t0, got, n = step
            self.step(got - t0, time.perf_counter() - got, n)

    def ended(self, epoch: int, batches: int, seconds: float, first: float | None, complete: bool) -> None:
        if self.recorder is not None:
            self.recorder.epoch_ended(epoch, batches, seconds, first, complete)
