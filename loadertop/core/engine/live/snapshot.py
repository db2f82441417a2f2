"""Folding one interval of a live job into figures: the job's messages (steps, epochs, tune lines) and the probe
samples (per-worker memory and CPU, the GPUs)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from loadertop.core.engine.wording import rate
from loadertop.core.machine.gpu import GpuProbe
from loadertop.core.model import figures
from loadertop.core.model.events import ProbeSample
from loadertop.core.model.figures import mean_of
from loadertop.core.model.live_protocol import (
    JobEpoch,
    JobSteps,
    JobWorkers,
    LiveMessage,
    TuneChose,
    TuneStep,
)

SLACK_S = 0.05  # a step span ending this close before attach still counts (clock rounding)


@dataclass
class Interval:
    """What the job said between two snapshots."""

    batches: int = 0
    samples: int = 0
    wait_s: float = 0.0
    step_s: float = 0.0
    waits_ms: list[float] = field(default_factory=list)  # each span's waits as the job sent them (JobSteps.waits_ms)
    wait_max_ms: list[float] = field(default_factory=list)
    dropped: int = 0
    epoch_ends: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    first_t: float | None = None  # the job's clock where its first step span folded here began
    last_t: float | None = None  # the job's clock at its last message folded here

    def saw(self, t: float, span_s: float = 0.0) -> None:
        self.last_t = t if self.last_t is None else max(self.last_t, t)
        self.first_t = t - span_s if self.first_t is None else min(self.first_t, t - span_s)

    def wait_tails(self) -> tuple[float | None, float | None, float | None, float | None]:
        """The wait's p50, p95 and p99 over the interval's waits (figures.wait_tails), and its maximum (ms)."""
        tails = figures.wait_tails([w / 1e3 for w in self.waits_ms])
        top = max(self.wait_max_ms) if self.wait_max_ms else None
        return (tails.p50, tails.p95, tails.p99, top) if tails else (None, None, None, top)

    def wait_mean_ms(self) -> float | None:
        """The mean wait for a batch (ms) over the interval: a start-up wait weighs in once, not as the p95."""
        return self.wait_s / self.batches * 1000.0 if self.batches else None

    def rates(self, seconds: float) -> tuple[float | None, float | None, float | None, float | None]:
        """samples/s, batches/s, stall fraction, mean step (ms); None without a step."""
        if self.batches == 0 or seconds <= 0:
            return None, None, None, None
        busy = self.wait_s + self.step_s
        return (
            self.samples / seconds,
            self.batches / seconds,
            self.wait_s / busy if busy > 0 else None,
            self.step_s / self.batches * 1000.0,
        )


def _epoch_note(message: JobEpoch) -> str:
    first = "" if message.first_batch_s is None else f", first batch after {message.first_batch_s:.2f} s"
    early = "" if message.complete else " (the loop left it early)"
    return (
        f"loader {message.loader}: epoch {message.epoch} ended{early}: {message.batches} batches in "
        f"{message.seconds:.1f} s{first}"
    )


def _tune_note(message: TuneStep | TuneChose) -> str:
    if isinstance(message, TuneChose):
        chose = "" if message.samples_per_s is None else f" ({rate(message.samples_per_s)} samples/s)"
        return (
            f"tune chose {message.config.label()}{chose} after {message.trials} trials in {message.tuning_s:.0f} s: "
            f"{message.reason} · {message.snippet}"
        )
    if message.message:
        return f"tune: {message.message}"
    return f"tune: {message.config.label()} {rate(message.samples_per_s)} samples/s (switch {message.switch_s:.2f} s)"


class MessageFold:
    """The job's messages, folded interval by interval. Times are attach-relative: the job's `t` counts from its
    first watch() (wall clock `started` in its hello), so t_attach = started + t - attach wall time."""

    def __init__(self, started_wall: float, attach_wall: float) -> None:
        self._shift = started_wall - attach_wall
        self._shown_t = -self._shift  # the job's clock where the last interval's figures ended: attach, at first
        self.epoch: int | None = None
        self.worker_pids: dict[int, tuple[int, ...]] = {}  # loader -> its live iterator's workers
        # The job's clock where its last recorded step ended, per loader. A span ends when the publisher drains
        # (every 0.5 s), in the middle of a batch; timed to that end, an interval's whole batches read 11 samples/s
        # then 21 for a steady 16. Each step is recorded when the next one is asked for, so a span's steps end its
        # wait and step time (Σ wait + Σ step) after the last one's: a steady job reads steady.
        self._step_end: dict[int, float] = {}

    def fold(self, messages: Iterable[LiveMessage], interval: Interval) -> None:
        """Fold messages into the interval being gathered. Steps that ended before attach (history the job
        replays to a new viewer) move the epoch and the workers but not the rates. A live span that arrives
        after its interval closed counts in this one: none is lost (the rates add up to the job's)."""
        for message in messages:
            if isinstance(message, JobWorkers):
                self.worker_pids[message.loader] = message.pids
                self._step_end[message.loader] = message.t  # a new iterator: its first wait starts here
            elif isinstance(message, JobSteps):
                self.epoch = message.epoch
                start, end = self._steps_ended(message)
                if message.t + self._shift >= -SLACK_S:
                    interval.saw(end, end - start)
                    interval.batches += message.batches
                    interval.samples += message.samples
                    interval.wait_s += message.wait_s
                    interval.step_s += message.step_s
                    interval.dropped += message.dropped
                    interval.waits_ms += message.waits_ms
                    if message.wait_ms_max is not None:
                        interval.wait_max_ms.append(message.wait_ms_max)
            elif isinstance(message, JobEpoch):
                self._step_end[message.loader] = message.t  # its iteration ended here, after its last step
                if message.t + self._shift >= -SLACK_S:
                    interval.saw(message.t)
                interval.epoch_ends.append(round(message.t + self._shift, 3))
                interval.notes.append(_epoch_note(message))
            elif isinstance(message, TuneStep | TuneChose):
                interval.notes.append(_tune_note(message))

    def _steps_ended(self, message: JobSteps) -> tuple[float, float]:
        """Where on the job's clock the span's recorded steps began and ended: from the last one's end (or the
        span's start, for the first span seen) on for their wait and step time, never past the span's end."""
        start = self._step_end.get(message.loader, message.t - message.span_s)
        end = min(message.t, start + message.wait_s + message.step_s) if message.batches else start
        self._step_end[message.loader] = end
        return min(start, end), end

    def job_seconds(self, interval: Interval) -> float | None:
        """How long the job took for what the interval holds, on the job's own clock: from the last interval's
        last message (or the start of a span that began before attach and counts whole) to this one's last.
        Rates over it are the job's stopwatch rates: a span that reaches the viewer late moves to the next
        interval with its own time, never halving one interval and doubling the next. None when the job said
        nothing."""
        if interval.last_t is None:
            return None
        start = self._shown_t if interval.first_t is None else min(self._shown_t, interval.first_t)
        seconds, self._shown_t = interval.last_t - start, interval.last_t
        return seconds

    def workers(self) -> tuple[int, ...]:
        return tuple(dict.fromkeys(pid for pids in self.worker_pids.values() for pid in pids))


def job_gpus(probe: GpuProbe, pids: set[int]) -> tuple[set[int], str | None]:
    """The indices of the GPUs whose running compute processes include one of `pids`, and why none is shown."""
    if not probe.available:
        return set(), probe.unavailable or "unavailable"
    found = probe.gpus_running(pids)
    if found:
        return found, None
    return found, "the job runs nothing on the GPUs NVML lists (in a container NVML may list host pids)"


def gpu_util(samples: Sequence[ProbeSample], indices: set[int]) -> float | None:
    values = [g.util_percent for s in samples for g in s.gpus if g.index in indices]
    return mean_of(values)
