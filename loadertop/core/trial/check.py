"""The check before the sweep, in a process the runner forks: the dataset loads (or the runner's shared build is
there), workers of every planned start method can receive it, its first batch goes through the data path, and the
consumer and knobs can be honoured. Any failure is one line (a SpecError) and exit code 2.

Imports torch and the user's code.
"""

from __future__ import annotations

import time
import traceback
from typing import Any

from loadertop.core.datasets.errors import SpecError
from loadertop.core.datasets.fixes import FIRST_BATCH_FAILS, bad_data
from loadertop.core.model.arg_text import loader_arg_texts
from loadertop.core.model.config import Settings
from loadertop.core.model.protocol import Checked, CheckRequest, Emit
from loadertop.core.trial.shared import dataset_for, shared

FIRST_BATCH = 2  # samples: enough for the collate to meet what the dataset returns, cheap for any dataset


def check_child(request: CheckRequest, emit: Emit) -> int:
    """Check, and say so in one Checked message; returns the process exit code (0, or 2 for bad input)."""
    settings = request.settings
    try:
        start = time.perf_counter()
        dataset, extra = dataset_for(settings)
        build = shared()
        built_s = build.seconds if build is not None and not build.unsafe else time.perf_counter() - start
        methods = set(request.start_methods)
        if methods & {"spawn", "forkserver"}:
            check_picklable(dataset, extra, sorted(methods & {"spawn", "forkserver"}))
        iterable = check_items(dataset, settings.dataset)
        if settings.ranks == 1 and settings.nodes == 1:  # a rank's data is read by its rank, never by the check
            check_first_batch(dataset, extra, settings)
        check_settings(settings, extra)
        check_threads(settings, extra, iterable)
        emit(checked(dataset, extra, iterable, built_s))
        return 0
    except SpecError as exc:
        traceback.print_exc()
        emit(Checked(ok=False, error=str(exc)))
        return 2
    except Exception as exc:  # the user's code failed in a way load_dataset did not foresee: still one line
        traceback.print_exc()
        error = " ".join(f"checking the dataset raised {type(exc).__name__}: {exc}".split())
        emit(Checked(ok=False, error=error))
        return 2


def checked(dataset: Any, extra: dict[str, Any], iterable: bool, built_s: float) -> Checked:
    """The check's answer; `built_s` is the build the check used (the runner's shared one, or its own)."""
    summary = f"dataset {type(dataset).__name__}"
    length = _len(dataset)
    summary += f", {length} samples" if length is not None else " (iterable)"
    if extra:
        summary += f"; the factory sets {', '.join(sorted(extra))}"
    build = shared()
    mb = build.mb if build is not None and not build.unsafe else None
    texts = tuple(f"{name}={text}" for name, text in loader_arg_texts(extra))  # the snippet keeps them
    return Checked(
        True, None, type(dataset).__name__, length, iterable, tuple(sorted(extra)), summary, texts, built_s, mb
    )


def check_picklable(dataset: Any, extra: dict[str, Any], methods: list[str]) -> None:
    """What spawn and forkserver workers receive must pickle: the dataset and the functions they call."""
    import pickle

    parts = {"the dataset": dataset, **{k: extra[k] for k in ("collate_fn", "worker_init_fn") if extra.get(k)}}
    for name, value in parts.items():
        try:
            pickle.dumps(value)
        except Exception as exc:
            raise SpecError(
                f"{name} cannot be pickled for {'/'.join(methods)} workers ({type(exc).__name__}: {exc}); "
                "define classes and functions at module level, or use --start-method fork"
            ) from exc


def check_items(dataset: Any, spec: str) -> bool:
    """An IterableDataset has no length: make sure it yields something. True when it is iterable-style."""
    from torch.utils.data import IterableDataset

    if not isinstance(dataset, IterableDataset):
        return False
    try:
        next(iter(dataset))
    except StopIteration:
        raise SpecError(f"dataset {spec} is an IterableDataset that yields nothing") from None
    except Exception as exc:
        raise SpecError(f"iterating dataset {spec} raised {type(exc).__name__}: {exc}") from exc
    return True


def check_first_batch(dataset: Any, extra: dict[str, Any], settings: Settings) -> None:
    """A small first batch through the DataLoader's own path (the factory's sampler and collate_fn, 0 workers): a
    dataset every trial would fail on (PIL images without ToTensor, samples of different shapes) stops here, with
    the fix, rather than after a failed trial per configuration."""
    from torch.utils.data import DataLoader

    from loadertop.core.trial.crashes import describe, note_indices

    kwargs = {k: v for k, v in extra.items() if k not in ("timeout",)}
    if "batch_sampler" not in kwargs:
        kwargs["batch_size"] = min(FIRST_BATCH, settings.batch_sizes[0])
    try:
        next(iter(DataLoader(note_indices(dataset, pickled=False), num_workers=0, **kwargs)))
    except StopIteration:
        return  # drop_last on a dataset smaller than the batch: the trials say what they find
    except Exception as exc:
        raise SpecError(bad_data(describe(exc), FIRST_BATCH_FAILS)) from exc


def check_threads(settings: Settings, extra: dict[str, Any], iterable: bool) -> None:
    """--worker-method thread: map-style datasets only, and no factory argument the thread chain cannot honour."""
    from loadertop.core.trial.nodes_loader import HONOURED

    if "thread" not in settings.worker_methods:
        return
    if iterable:
        raise SpecError("--worker-method thread takes map-style datasets only; this one is an IterableDataset")
    unknown = sorted(set(extra) - set(HONOURED) - {"shuffle", "generator"})
    if unknown:
        raise SpecError(f"--worker-method thread: the dataset factory's {unknown[0]} has no torchdata.nodes equivalent")


def check_settings(settings: Settings, extra: dict[str, Any]) -> None:
    """Knobs the installed torch or the factory's own arguments cannot honour."""
    import torch

    from loadertop.core.datasets.spec import load_callable
    from loadertop.core.trial.loader import supports_in_order

    if settings.consumer:
        try:
            load_callable(settings.consumer, "consumer")
        except SpecError as exc:
            raise SpecError(f"--consumer: {exc}") from exc
    if False in settings.in_order and not supports_in_order():
        raise SpecError(f"--in-order off needs DataLoader(in_order=...): torch 2.6 or newer, not {torch.__version__}")
    if "batch_sampler" in extra and len(settings.batch_sizes) > 1:
        raise SpecError("the dataset factory fixes batch_sampler, so --batch-size cannot be swept")
    if settings.ranks > 1:
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_gloo_available():
            raise SpecError(f"--ranks {settings.ranks} needs torch.distributed with gloo, which this torch lacks")


def _len(dataset: Any) -> int | None:
    try:
        return len(dataset)
    except TypeError:
        return None
