"""`for batch in loadertop.watch(loader):` iterates one epoch exactly as `for batch in loader:` and records, per
step, the wait in next() and the step time, the epoch boundaries and the iterator's worker pids, for the process's
publisher to send to `loadertop attach`.

The hot path is two perf_counter() calls and one deque append per step; everything else (sums, percentiles,
messages) is done by the publisher's thread when it drains the recorder. If loadertop cannot publish (disabled by
LOADERTOP_WATCH=0, or it failed and logged why), watch() is plain iteration.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import threading
import weakref
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from time import perf_counter
from typing import Any

from loadertop.core.job.publisher import Publisher, publisher
from loadertop.core.model import figures
from loadertop.core.model.config import TrialConfig
from loadertop.core.model.live_protocol import JobEpoch, JobSteps, JobWorkers, LiveMessage

STEP_BUFFER = 65_536  # step records kept between two drains (0.5 s); beyond it the oldest are dropped
WAITS_SENT = 512  # waits one JobSteps carries at most (live_protocol.JobSteps.waits_ms)


class StepRecorder:
    """What one watched loader did, as raw records in a bounded deque that the publisher's thread drains.

    The loop's thread only appends (atomic under the GIL, no lock); the publisher's thread only pops. Step records
    carry their epoch and their index in it, so records lost to the bound are counted (`dropped`)."""

    def __init__(self, pub: Publisher | None, loader_id: int) -> None:
        self.loader_id = loader_id
        self._pub = pub
        self._buf: deque[tuple[Any, ...]] = deque(maxlen=STEP_BUFFER)
        self._append = self._buf.append
        self._epoch = 0
        self._n = 0
        self._agg = _Aggregate()
        self.owner: weakref.ref[Any] | None = None  # the watched loader: once it is gone, the publisher forgets us
        if pub is not None:
            pub.add_recorder(self)

    def _now(self) -> float:
        return self._pub.now() if self._pub is not None else 0.0

    def epoch_started(self, epoch: int, pids: tuple[int, ...], config: TrialConfig | None) -> None:
        self._epoch, self._n = epoch, 0
        self._append(("start", self._now(), epoch, pids, config))

    def step(self, wait_s: float, step_s: float, samples: int) -> None:
        self._n += 1
        self._append((self._epoch, self._n, wait_s, step_s, samples))

    def epoch_ended(
        self, epoch: int, batches: int, seconds: float, first_batch_s: float | None, complete: bool
    ) -> None:
        self._append(("end", self._now(), epoch, batches, seconds, first_batch_s, complete))

    @property
    def done(self) -> bool:
        """Its loader is gone and everything it recorded was sent."""
        return self.owner is not None and self.owner() is None and not self._buf and not self._agg.is_open

    def drain(self, now: float) -> list[LiveMessage]:
        """The messages for the records since the last drain (the publisher's thread calls this)."""
        out: list[LiveMessage] = []
        agg, buf = self._agg, self._buf
        items = [buf.popleft() for _ in range(len(buf))]  # only this thread pops: len() is a floor
        steps: list[tuple[Any, ...]] = []
        for item in items:
            if item[0].__class__ is not str:
                if steps and item[0] != steps[-1][0]:
                    agg.add(steps)
                    steps = []
                steps.append(item)
                continue
            if steps:
                agg.add(steps)
                steps = []
            if item[0] == "start":
                _, t, epoch, pids, config = item
                agg.flush(out, t, self.loader_id)
                agg.open(epoch)
                out.append(JobWorkers(t=t, loader=self.loader_id, pids=pids, config=config))
            else:
                _, t, epoch, batches, seconds, first, complete = item
                agg.dropped += max(0, batches - agg.last_n) if agg.epoch == epoch else 0
                agg.flush(out, t, self.loader_id)
                agg.is_open = False
                out.append(JobEpoch(t, self.loader_id, epoch, batches, seconds, first, complete))
        if steps:
            agg.add(steps)
        if agg.is_open or agg.batches:  # a quiet span inside an epoch is sent too: a viewer sees the stall
            agg.flush(out, now, self.loader_id, force=True)
        return out


class _Aggregate:
    """The steps of one loader since its last JobSteps (publisher thread only)."""

    def __init__(self) -> None:
        self.epoch = -1
        self.is_open = False
        self.last_n = 0
        self.last_t: float | None = None
        self.dropped = 0
        self._reset()

    def _reset(self) -> None:
        self.batches = self.samples = 0
        self.wait_s = self.step_s = 0.0
        self.waits: list[float] = []

    def open(self, epoch: int) -> None:
        self.epoch, self.is_open, self.last_n = epoch, True, 0

    def add(self, steps: list[tuple[Any, ...]]) -> None:
        """Step records of one epoch, in order (a tight loop: this runs for every step of the job)."""
        epoch = steps[0][0]
        if epoch != self.epoch:  # its start record was dropped
            self.open(epoch)
        waits = [s[2] for s in steps]
        self.waits += waits
        self.wait_s += sum(waits)
        self.step_s += sum(s[3] for s in steps)
        self.samples += sum(s[4] for s in steps)
        self.batches += len(steps)
        self.dropped += max(0, steps[-1][1] - self.last_n - len(steps))
        self.last_n = steps[-1][1]

    def flush(self, out: list[LiveMessage], t: float, loader: int, force: bool = False) -> None:
        if not self.batches and not self.dropped and not force:
            self.last_t = t
            return
        span = t - self.last_t if self.last_t is not None else 0.0
        tails = figures.wait_tails(self.waits)
        out.append(
            JobSteps(
                t=t,
                span_s=max(0.0, span),
                loader=loader,
                epoch=max(self.epoch, 0),
                batches=self.batches,
                samples=self.samples,
                wait_s=self.wait_s,
                step_s=self.step_s,
                wait_ms_p50=tails.p50 if tails else None,
                wait_ms_p95=tails.p95 if tails else None,
                wait_ms_p99=tails.p99 if tails else None,
                wait_ms_max=max(self.waits) * 1e3 if self.waits else None,
                dropped=self.dropped,
                waits_ms=_sent(self.waits),
            )
        )
        self.last_t = t
        self.dropped = 0
        self._reset()


def _sent(waits: list[float]) -> tuple[float, ...]:
    """A span's waits as JobSteps carries them, in ms rounded to the µs: all of them up to WAITS_SENT, else that
    many evenly spaced order statistics (what the viewer's quantiles need, at a bounded size)."""
    if len(waits) <= WAITS_SENT:
        return tuple(round(w * 1e3, 3) for w in waits)
    ordered = sorted(waits)
    last = len(ordered) - 1
    return tuple(round(ordered[round(i * last / (WAITS_SENT - 1))] * 1e3, 3) for i in range(WAITS_SENT))


# -- reading a loader ----------------------------------------------------------------------------------------------


def worker_pids(iterator: Any) -> tuple[int, ...]:
    """A DataLoader iterator's live worker pids (() for 0 workers or anything else)."""
    try:
        return tuple(w.pid for w in getattr(iterator, "_workers", ()) if w.pid)
    except Exception:
        return ()


def loader_config(loader: Any) -> TrialConfig | None:
    """The loader's knobs as a TrialConfig, or None when it is not a DataLoader we can read."""
    try:
        workers = int(loader.num_workers)
        batch_size = loader.batch_size
        if batch_size is None:
            batch_size = getattr(loader.batch_sampler, "batch_size", None)
        if not isinstance(batch_size, int):
            return None
        if workers == 0:
            return TrialConfig(0, batch_size, pin_memory=bool(loader.pin_memory))
        context = loader.multiprocessing_context
        method = context.get_start_method() if context is not None else multiprocessing.get_start_method()
        return TrialConfig(
            num_workers=workers,
            batch_size=batch_size,
            prefetch_factor=loader.prefetch_factor,
            pin_memory=bool(loader.pin_memory),
            persistent_workers=bool(loader.persistent_workers),
            start_method=method,
            in_order=bool(getattr(loader, "in_order", True)),
        )
    except Exception:
        return None


def _first_leaf(batch: Any) -> Any:
    """(x, y), [x, y], {"x": x}: the first leaf, looked for 8 levels down."""
    for _ in range(8):
        if isinstance(batch, list | tuple) and batch:
            batch = batch[0]
        elif isinstance(batch, Mapping) and batch:
            batch = next(iter(batch.values()))
        else:
            break
    return batch


def samples_in(batch: Any) -> int:
    """How many samples a batch holds: the leading size of its first tensor/array (1 when it cannot tell)."""
    try:
        leaf = _first_leaf(batch)
        shape = getattr(leaf, "shape", None)
        if shape:
            return int(shape[0])
        return len(leaf) if hasattr(leaf, "__len__") else 1  # no exception on the common path: they are slow
    except Exception:
        return 1


# -- iterating a loader loadertop already watches -------------------------------------------------------------------

_own = threading.local()  # set while watch() or tune() opens an iterator of their own: `loadertop run` keeps off it


def plain_iter(loader: Any) -> Iterator[Any]:
    """iter(loader), never watched again by `loadertop run`'s hook (watch() and tune() record it themselves)."""
    _own.on = True
    try:
        return iter(loader)
    finally:
        _own.on = False


def owned() -> bool:
    """True while watch() or tune() opens an iterator (on this thread)."""
    return bool(getattr(_own, "on", False))


# -- watch() -------------------------------------------------------------------------------------------------------


@dataclass
class _LoaderState:
    """Per watched loader: the epoch counter belongs to the loader, so watch(loader) each epoch continues it."""

    epoch: int = 0
    recorder: StepRecorder | None = None
    pub: Publisher | None = None


_states: weakref.WeakKeyDictionary[Any, _LoaderState] = weakref.WeakKeyDictionary()


def state_of(loader: Any) -> _LoaderState:
    try:
        state = _states.get(loader)
        if state is None:
            state = _states[loader] = _LoaderState()
    except TypeError:  # not weak-referenceable (a list): its count starts afresh each watch()
        state = _LoaderState()
    return state


class Watched:
    """What watch(loader) returns: each iter() is one epoch of the loader; len() and attributes are the loader's."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:
        if name == "loader":  # not set yet (copy, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.loader, name)

    def __iter__(self) -> Iterator[Any]:
        try:
            pub = publisher()
            recorder = recorder_for(self.loader, pub) if pub is not None else None
        except Exception:  # loadertop's own failure: step aside for this epoch
            recorder = None
        if recorder is None:
            return iter(self.loader)
        return watched_epoch(self.loader, recorder, state_of(self.loader))


def watch(loader: Any) -> Watched:
    """`for batch in loadertop.watch(loader):` is `for batch in loader:`, watched live by `loadertop attach`."""
    return Watched(loader)


def batches_in(loader: Any) -> int:
    """The loader's batches per epoch; -1 when it has no length."""
    try:
        return len(loader)
    except Exception:  # an IterableDataset without a length
        return -1


def recorder_for(loader: Any, pub: Publisher) -> StepRecorder:
    state = state_of(loader)
    if state.recorder is None or state.pub is not pub:  # first epoch, or a new publisher since (reset)
        state.recorder = StepRecorder(pub, pub.new_loader())
        state.pub = pub
        with contextlib.suppress(TypeError):  # not weak-referenceable: kept for the publisher's life
            state.recorder.owner = weakref.ref(loader)
    return state.recorder


def _hold_plan(batch: Any) -> tuple[bool, type]:
    """From an epoch's first batch: whether its batches are held (host memory only: a batch on a GPU is never
    held longer, see watched_epoch), and a class whose batches are held as they are (a tensor, an array, a tuple)."""
    try:
        on_host = getattr(getattr(_first_leaf(batch), "device", None), "type", "cpu") == "cpu"
        return on_host, tuple if isinstance(batch, list | tuple | Mapping) else batch.__class__
    except Exception:
        return False, tuple


def _parts(batch: Any) -> Any:
    """What holds the batch's memory, taken when it is handed out: the loop may swap a dict's values for GPU
    copies in place, and those must not be held."""
    try:
        if isinstance(batch, list | tuple):
            return tuple(batch)
        if isinstance(batch, Mapping):
            return tuple(batch.values())
    except Exception:  # an odd mapping: hold the batch itself, never raise into the loop
        pass
    return batch


def watched_epoch(loader: Any, rec: StepRecorder, state: _LoaderState) -> Iterator[Any]:
    """One epoch, recorded. Exceptions of the loader pass through unchanged; break/close ends it (complete=False).

    The batch before the one handed out is held until the next next(), and let go there, inside the wait: the
    loop's own names release it only when they take the next batch (`for x, y in ...` rebinds x and y after
    next() returned), which would put its release (unmapping a worker batch's shared memory: milliseconds) in
    the step. The job's own timing around next() counts it as waiting, and so does this. Costs one more host
    batch alive during a step; a batch on a GPU is not held."""
    epoch = state.epoch  # taken when the epoch starts, not at iter(): an iterator never run uses no number
    state.epoch += 1
    t_start = perf_counter()
    it = plain_iter(loader)
    rec.epoch_started(epoch, worker_pids(it), loader_config(loader))
    fixed = getattr(loader, "batch_size", None)
    fixed = fixed if isinstance(fixed, int) and fixed > 0 else None
    last = batches_in(loader) - 1  # the last batch may be short: its samples are counted, not assumed
    append = rec._append  # the hot path: what rec.step() does, without a call (records carry epoch and index)
    batches, first, complete, in_step = 0, None, False, False
    wait = t_ready = 0.0
    samples = 0
    hold = False
    whole: type = tuple  # the class whose batches are held as they are (_hold_plan)
    held = before = None  # the batch handed out last, and the one before it (released in the next wait)
    try:
        t_ask = t_start
        while True:
            before = None  # the loop let go of it when it took the last batch: its release is waiting time
            try:
                batch = next(it)
            except StopIteration:
                complete = True
                return
            t_ready = perf_counter()
            wait = t_ready - t_ask
            if first is None:
                first = wait
                hold, whole = _hold_plan(batch)
            samples = fixed if fixed and batches != last else samples_in(batch)
            if hold:  # a tuple as it is (immutable); a list copied (the loop may change it in place)
                cls = batch.__class__
                before = held
                held = batch if cls is tuple or cls is whole else tuple(batch) if cls is list else _parts(batch)
            in_step = True
            yield batch
            t_ask = perf_counter()
            in_step = False
            batches += 1
            append((epoch, batches, wait, t_ask - t_ready, samples))
    finally:
        end = perf_counter()
        if in_step:  # the loop left during a step (break, an exception in it): that step counts
            batches += 1
            append((epoch, batches, wait, end - t_ready, samples))
        # Every batch of a sized loader handed out is a whole epoch, though the loop never asked past the last
        # (Lightning's data fetcher stops at the length, and so does zip() with a range).
        complete = complete or (last >= 0 and batches == last + 1)
        del held, before
        del it  # a DataLoader iterator shuts its workers down when released (persistent ones stay the loader's)
        rec.epoch_ended(epoch, batches, end - t_start, first, complete)
