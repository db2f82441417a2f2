"""Where watch() puts the release of a batch the loop is done with: in the wait, as the job's own timing around
next() does (the loop's names let go of a batch only when they take the next one, after next() returned). A batch
whose release takes 30 ms (what unmapping a worker batch's shared memory costs on a loaded machine) stands in for
a DataLoader's; the recorder is read directly (no publisher, no workers)."""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from loadertop.core.job.watch import StepRecorder, _LoaderState, watched_epoch

RELEASE_S = 0.03


class SlowToFree:
    """A batch's tensor whose memory takes RELEASE_S to give back."""

    def __init__(self, device: str = "cpu") -> None:
        self.device = SimpleNamespace(type=device)
        self.shape = (4,)

    def __del__(self) -> None:
        time.sleep(RELEASE_S)


class Loader:
    """Fresh batches each epoch, none kept by the loader (as a DataLoader's iterator hands them out)."""

    batch_size = 4

    def __init__(self, batches: int, make: Any) -> None:
        self.batches, self.make = batches, make

    def __len__(self) -> int:
        return self.batches

    def __iter__(self) -> Iterator[Any]:
        return (self.make() for _ in range(self.batches))


def steps_of(rec: StepRecorder) -> list[tuple[float, float]]:
    return [(r[2], r[3]) for r in rec._buf if r[0].__class__ is not str]


@pytest.mark.unit
def test_the_release_of_the_last_batch_is_waiting_time() -> None:
    rec = StepRecorder(None, 0)
    own = []  # the loop's own timing: around next() (the batch in hand) and around the step
    t_end = time.perf_counter()
    for _x, _y in watched_epoch(Loader(6, lambda: (SlowToFree(), SlowToFree())), rec, _LoaderState()):  # names held
        t_got = time.perf_counter()
        time.sleep(0.005)  # the step
        own.append((t_got - t_end, time.perf_counter() - t_got))
        t_end = time.perf_counter()
    recorded = steps_of(rec)
    assert len(recorded) == len(own) == 6
    for (wait, step), (own_wait, own_step) in list(zip(recorded, own, strict=True))[2:]:
        assert step < 0.005 + RELEASE_S / 2, (step, own_step)  # the old code counted the release here
        assert wait >= 2 * RELEASE_S * 0.9  # x and y of the batch before, released in next()
        assert abs(wait - own_wait) < 0.004 and abs(step - own_step) < 0.004


@pytest.mark.unit
def test_gpu_batches_and_values_the_loop_swapped_are_not_held() -> None:
    rec = StepRecorder(None, 0)
    seen: list[weakref.ref[SlowToFree]] = []
    for batch in watched_epoch(Loader(4, lambda: SlowToFree("cuda")), rec, _LoaderState()):
        assert all(r() is None for r in seen)  # the GPU batch before is gone as soon as the loop let go of it
        seen.append(weakref.ref(batch))
    del batch
    swapped: list[weakref.ref[SlowToFree]] = []
    for batch in watched_epoch(Loader(4, lambda: {"x": SlowToFree()}), rec, _LoaderState()):
        assert all(r() is None for r in swapped)  # what the loop put in the dict in place is not held
        batch["x"] = SlowToFree("cuda")  # `batch[k] = batch[k].to(device)`, in place
        swapped.append(weakref.ref(batch["x"]))
