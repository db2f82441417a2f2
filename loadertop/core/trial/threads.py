"""Intra-op threads inside DataLoader workers: the `--worker-threads` axis, and the helper the snippet pastes."""

from __future__ import annotations

from collections.abc import Callable


class WorkerThreads:
    """A `worker_init_fn` that sets `torch.set_num_threads(threads)` in each worker, then runs `then` (the
    dataset's own worker_init_fn, if any). torch already sets 1 thread in its workers; this sets another count.
    A plain class, not a lambda, so spawn and forkserver workers can unpickle it."""

    def __init__(self, threads: int, then: Callable[[int], object] | None = None) -> None:
        self.threads = threads
        self.then = then

    def __call__(self, worker_id: int) -> None:
        import torch

        torch.set_num_threads(self.threads)
        if self.then is not None:
            self.then(worker_id)


def set_worker_threads(threads: int) -> WorkerThreads:
    """`DataLoader(..., worker_init_fn=loadertop.set_worker_threads(2))`: `threads` intra-op threads per worker."""
    return WorkerThreads(threads)
