"""The check before the sweep, in a process the runner forks: the dataset loads (or the runner's shared build is
there), workers of every planned start method can receive it, its first batch goes through the data path, and the
consumer and knobs can be honoured. Any failure is one line (a SpecError) and exit code 2.

Imports torch and the user's code.
"""

from __future__ import annotations

import dataclasses
import time
import traceback
from typing import Any

from loadertop.core.datasets.errors import SpecError
from loadertop.core.datasets.fixes import FIRST_BATCH_FAILS, bad_data
from loadertop.core.model.arg_text import loader_arg_texts
from loadertop.core.model.config import Settings
from loadertop.core.model.protocol import Checked, CheckRequest, Emit
from loadertop.core.trial.graph import is_graph
from loadertop.core.trial.preflight import Pickled, measure_pickle, measure_start, tensor_bytes, unpicklable_path
from loadertop.core.trial.shared import loaded_for, shared

FIRST_BATCH = 2  # samples: enough for the collate to meet what the dataset returns, cheap for any dataset


def check_child(request: CheckRequest, emit: Emit) -> int:
    """Check, and say so in one Checked message; returns the process exit code (0, or 2 for bad input)."""
    settings = request.settings
    try:
        start = time.perf_counter()
        loaded = loaded_for(settings)
        dataset, extra = loaded.dataset, loaded.extra
        build = shared()
        built_s = build.seconds if build is not None and not build.unsafe else time.perf_counter() - start
        if is_graph(dataset):
            emit(check_graph(dataset, settings, built_s))
            return 0
        methods = set(request.start_methods)
        pickled, started = None, None
        if methods & {"spawn", "forkserver"}:
            pickled = check_picklable(dataset, extra, sorted(methods & {"spawn", "forkserver"}))
            method = "spawn" if "spawn" in methods else "forkserver"
            started = method, measure_start(dataset, method)
        iterable = check_items(dataset, settings.dataset)
        batch: tuple[int, int | None] | None = None
        if settings.ranks == 1 and settings.nodes == 1:  # a rank's data is read by its rank, never by the check
            batch = check_first_batch(dataset, extra, settings, loaded.loader_cls)
        check_settings(settings, extra)
        check_threads(settings, extra, iterable, loaded.loader_name)
        answer = checked(dataset, extra, iterable, built_s, loaded.loader_name)
        emit(dataclasses.replace(answer, **preflight_fields(batch, pickled, started)))
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


def checked(dataset: Any, extra: dict[str, Any], iterable: bool, built_s: float, loader: str = "DataLoader") -> Checked:
    """The check's answer; `built_s` is the build the check used (the runner's shared one, or its own); `loader`
    the class every trial builds (the factory's own loader's)."""
    summary = f"dataset {type(dataset).__name__}"
    length = _len(dataset)
    summary += f", {length} samples" if length is not None else " (iterable)"
    if loader != "DataLoader":
        summary += f"; each trial builds a {loader}"
    if extra:
        summary += f"; the factory sets {', '.join(sorted(extra))}"
    build = shared()
    mb = build.mb if build is not None and not build.unsafe else None
    texts = tuple(f"{name}={text}" for name, text in loader_arg_texts(extra))  # the snippet keeps them
    return Checked(
        True, None, type(dataset).__name__, length, iterable, tuple(sorted(extra)), summary, texts, built_s, mb,
        loader=loader,
    )  # fmt: skip


def check_graph(graph: Any, settings: Settings, built_s: float) -> Checked:
    """A torchdata.nodes graph: the knobs a graph fixes or has no place for are refused, and one item goes through
    the graph as built (this process is forked: the runner's graph stays unstarted)."""
    from loadertop.core.trial.crashes import describe as describe_error
    from loadertop.core.trial.graph import describe, first_item, summary

    if len(settings.batch_sizes) > 1:
        raise SpecError("the torchdata.nodes graph fixes the batch size (its Batcher), so --batch-size cannot be swept")
    axes = (("--pin-memory", settings.pin_memory), ("--persistent-workers", settings.persistent_workers))
    knobs = [flag for flag, values in axes if True in values]  # a graph has no DataLoader to pin or keep workers
    if any(n is not None for n in settings.worker_threads):  # nor a worker_init_fn to set them in
        knobs.append("--worker-threads")
    if knobs:
        raise SpecError(f"{' and '.join(knobs)} do not apply to a torchdata.nodes graph (no DataLoader): drop them")
    if settings.ranks > 1 or settings.nodes > 1:
        raise SpecError("a torchdata.nodes graph is swept on one rank: drop --ranks")
    check_settings(settings, {})  # the consumer
    try:
        first_item(graph)
    except StopIteration:
        raise SpecError(f"the torchdata.nodes graph of {settings.dataset} yields nothing") from None
    except Exception as exc:
        raise SpecError(bad_data(describe_error(exc), FIRST_BATCH_FAILS)) from exc
    build = shared()
    mb = build.mb if build is not None and not build.unsafe else None
    name = type(graph).__name__
    said = summary(graph, settings.worker_methods, settings.start_methods)
    return Checked(True, None, name, None, True, (), said, (), built_s, mb, graph=describe(graph))


def check_picklable(dataset: Any, extra: dict[str, Any], methods: list[str]) -> Pickled:
    """What spawn and forkserver workers receive must pickle: the dataset and the functions they call. Returns the
    dataset's pickle (size and times: what each worker's start-up pays for it)."""
    parts = {"dataset": dataset, **{k: extra[k] for k in ("collate_fn", "worker_init_fn") if extra.get(k)}}
    measured: Pickled | None = None
    for name, value in parts.items():
        try:
            pickled = measure_pickle(value)
        except Exception as exc:
            where, fix = unpicklable_path(value, name)
            raise SpecError(
                f"pre-flight pickle: {where} cannot be pickled for {'/'.join(methods)} workers "
                f"({type(exc).__name__}: {exc}); {fix}, or use --start-method fork"
            ) from exc
        measured = measured or pickled
    assert measured is not None  # the dataset is always the first part
    return measured


def preflight_fields(
    batch: tuple[int, int | None] | None, pickled: Pickled | None, started: tuple[str, float | None] | None
) -> dict[str, Any]:
    """The pre-flight figures for the Checked message (the engine words them: engine/verdict/preflight.py)."""
    fields: dict[str, Any] = {}
    if started is not None:
        fields.update(start_method=started[0], worker_start_s=started[1])
    if batch is not None:
        fields.update(batch_bytes=batch[0], batch_samples=batch[1])
    if pickled is not None:
        fields.update(pickle_bytes=pickled.nbytes, pickle_dumps_s=pickled.dumps_s, pickle_loads_s=pickled.loads_s)
    return fields


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


def check_first_batch(
    dataset: Any, extra: dict[str, Any], settings: Settings, cls: type | None = None
) -> tuple[int, int | None] | None:
    """A small first batch through the loader's own path (its class, the factory's sampler and collate_fn, 0 workers): a
    dataset every trial would fail on (PIL images without ToTensor, samples of different shapes) stops here, with
    the fix, rather than after a failed trial per configuration. Returns the batch's tensor bytes and its samples
    (None: the factory's batch_sampler sets the batch, so the bytes are a whole batch's)."""
    from torch.utils.data import DataLoader

    from loadertop.core.trial.crashes import describe, note_indices

    kwargs = {k: v for k, v in extra.items() if k not in ("timeout",)}
    samples = None
    if "batch_sampler" not in kwargs:
        samples = kwargs["batch_size"] = min(FIRST_BATCH, settings.batch_sizes[0])
    try:
        loader = (cls or DataLoader)(note_indices(dataset, pickled=False), num_workers=0, **kwargs)
    except Exception as exc:  # a loader subclass that takes other arguments: every trial would fail the same way
        name = (cls or DataLoader).__name__
        raise SpecError(f"building a {name} with a trial's arguments raised {type(exc).__name__}: {exc}") from exc
    try:
        batch = next(iter(loader))
    except StopIteration:
        return None  # drop_last on a dataset smaller than the batch: the trials say what they find
    except Exception as exc:
        raise SpecError(bad_data(describe(exc), FIRST_BATCH_FAILS)) from exc
    return tensor_bytes(batch), samples


def check_threads(settings: Settings, extra: dict[str, Any], iterable: bool, loader: str = "DataLoader") -> None:
    """--worker-method thread: map-style datasets only, and no factory argument the thread chain cannot honour; a
    factory's own loader class (a StatefulDataLoader) is not what the thread chain measures."""
    from loadertop.core.trial.graph_loader import HONOURED

    if "thread" not in settings.worker_methods:
        return
    if loader != "DataLoader":
        raise SpecError(f"--worker-method thread measures a torchdata.nodes chain, not the factory's {loader}: drop it")
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
