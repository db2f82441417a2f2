"""Crash reports a user can act on: the dataset's own exception text and the sample index.

A DataLoader worker's exception reaches the training loop wrapped ("Caught ValueError in DataLoader worker
process 0. Original Traceback ..."); `describe` digs out the dataset's own last line. The index is not in
any traceback, so `note_indices` gives the dataset's class a thin subclass whose `__getitem__` adds a note
("loadertop: sample index 17") to what it raises; notes travel inside the worker's formatted traceback.
"""

from __future__ import annotations

import re
import signal
from typing import Any

NOTE = "loadertop: sample index "
_WORKER = re.compile(r"^Caught (\w+) in DataLoader worker process (\d+)\.")
_SUBCLASSES: dict[type[Any], type[Any]] = {}
# A traceback's last line names a class by its module ("soundfile.LibsndfileError: ..."), builtins excepted.
_QUALIFIED = re.compile(r"^(?:\w+\.)+(?=\w+(?::\s|$))")
_EXITED = re.compile(r"DataLoader worker \(pid\(s\) ([\d, ]+)\) exited unexpectedly")


def _add_note(exc: BaseException, where: str) -> None:
    add = getattr(exc, "add_note", None)  # Python 3.11+
    notes = getattr(exc, "__notes__", ())
    if add is not None and not any(str(n).startswith(NOTE) for n in notes):
        add(NOTE + where)


def _noting_subclass(cls: type[Any]) -> type[Any]:
    """`cls` is a dataset class: any class with __getitem__."""
    if cls in _SUBCLASSES:
        return _SUBCLASSES[cls]
    getitem = cls.__getitem__
    namespace: dict[str, Any] = {"__slots__": (), "__module__": cls.__module__, "__qualname__": cls.__qualname__}

    def __getitem__(self: Any, index: Any) -> Any:
        try:
            return getitem(self, index)
        except Exception as exc:
            _add_note(exc, repr(index))
            raise

    namespace["__getitem__"] = __getitem__
    getitems = getattr(cls, "__getitems__", None)
    if getitems is not None:  # torch fetches whole batches through it when a dataset has one

        def __getitems__(self: Any, indices: Any) -> Any:
            try:
                return getitems(self, indices)
            except Exception as exc:
                shown = list(indices)
                _add_note(exc, f"one of {shown[:8]}{' …' if len(shown) > 8 else ''}")
                raise

        namespace["__getitems__"] = __getitems__
    meta: type[type] = type(cls)  # the dataset's metaclass (usually `type`): the subclass is made by the same one
    sub = meta(cls.__name__, (cls,), namespace)
    _SUBCLASSES[cls] = sub
    return sub


def note_indices(dataset: Any, pickled: bool) -> Any:
    """Make `dataset` (in place) note the failing index on exceptions. Same object, still an instance of its
    class. Skipped for spawn/forkserver workers (`pickled`): the subclass cannot be pickled by reference."""
    if pickled or not hasattr(type(dataset), "__getitem__"):
        return dataset
    try:
        from torch.utils.data import IterableDataset

        if isinstance(dataset, IterableDataset):
            return dataset
        dataset.__class__ = _noting_subclass(type(dataset))
    except (TypeError, AttributeError):  # builtins, odd layouts: no index, no harm
        pass
    return dataset


def describe(exc: BaseException) -> str:
    """One line: the dataset's own `Type: message`, then where (worker, index) when known. Never raises: the trial's
    Failed message is built from it."""
    try:
        return _describe(exc)
    except Exception:  # an exception that cannot even be read: its type still says something
        return f"{type(exc).__name__} (its message cannot be read; the traceback is in runner.log)"


def _text(exc: BaseException) -> str:
    """str(exc), or its string arguments where str() fails: torch re-raises a worker's exception as
    `type(message)`, which an exception whose first argument is not a message (soundfile's LibsndfileError takes an
    error code) cannot print."""
    try:
        return str(exc)
    except Exception:
        return " ".join(arg for arg in exc.args if isinstance(arg, str))


def _describe(exc: BaseException) -> str:
    text = _text(exc)
    cause = exc.__cause__ or exc.__context__
    if cause is not None and "exited unexpectedly" in text and "killed by signal" in str(cause):
        return describe(cause)  # torch's SIGCHLD handler said how the worker died ("killed by signal: ...")
    # Otherwise the cause is the queue.Empty of torch's poll that found the worker dead before the handler ran (a
    # busy machine): torch's own "exited unexpectedly" is the truth then, not "Empty", and the worker's exit code
    # says how, in the handler's words, so that the same death reads the same whichever noticed it first.
    if (dead := _EXITED.search(text)) is not None and (how := _how_workers_died(exc, dead.group(1))) is not None:
        return how
    notes = [str(n) for n in getattr(exc, "__notes__", ())]
    worker = _WORKER.match(text)
    if worker and "Original Traceback" in text:
        own, inner_notes = _last_exception(text.split("Original Traceback", 1)[1])
        own = _QUALIFIED.sub("", own)  # the worker's traceback names soundfile.LibsndfileError, 0 workers its type
        where = [f"in DataLoader worker {worker.group(2)}"]
        where += [n.removeprefix("loadertop: ") for n in inner_notes if n.startswith(NOTE)]
        return f"{own or worker.group(1)} ({', '.join(where)})"
    head = f"{type(exc).__name__}: {text}".strip().rstrip(":") if text else type(exc).__name__
    head = " ".join(head.split())
    index = [n.removeprefix("loadertop: ") for n in notes if n.startswith(NOTE)]
    return f"{head} ({index[0]})" if index else head


def _how_workers_died(exc: BaseException, pids_text: str) -> str | None:
    """torch's SIGCHLD handler's words ("DataLoader worker (pid 7) is killed by signal: Bus error.") for workers
    that torch's poll found dead, from their exit codes: the DataLoader's iterator is `self` in the frame that
    raised. None when the iterator or a worker's exit code cannot be found."""
    pids = {int(p) for p in pids_text.replace(",", " ").split()}
    tb, processes = exc.__traceback__, None
    while tb is not None and processes is None:
        found = getattr(tb.tb_frame.f_locals.get("self"), "_workers", None)
        processes = found if isinstance(found, list) else None
        tb = tb.tb_next
    codes = {w.pid: w.exitcode for w in processes or () if getattr(w, "pid", None) in pids}
    if set(codes) != pids or any(code is None for code in codes.values()):
        return None
    told = []
    for pid, code in sorted(codes.items()):
        if code < 0:
            told.append(f"DataLoader worker (pid {pid}) is killed by signal: {signal.strsignal(-code) or -code}.")
        else:
            told.append(f"DataLoader worker (pid {pid}) exited with code {code}.")
    return f"{type(exc).__name__}: {' '.join(told)}"


def _last_exception(traceback_text: str) -> tuple[str, list[str]]:
    """From a formatted traceback: the final exception's lines (after the last indented frame line), split
    into its `Type: message` (joined to one line) and the notes that follow it."""
    lines = traceback_text.rstrip().splitlines()
    last_indented = max((i for i, line in enumerate(lines) if line.startswith(" ")), default=-1)
    tail = [line for line in lines[last_indented + 1 :] if line.strip()]
    notes = [line for line in tail if line.startswith("loadertop: ")]
    message = " ".join(line.strip() for line in tail if not line.startswith("loadertop: "))
    return message, notes
