"""The run folder: settings, the runner's log, an append-only trial log, the final result.

Every finished trial is appended and fsynced before the next one starts, so a sweep killed at any
moment (SIGKILL included) keeps every finished trial; files that are rewritten are replaced atomically.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any

from loadertop.core.results import SweepResult, TrialResult

DEFAULT_ROOT = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "loadertop" / "runs"

SETTINGS = "settings.json"
TRIALS = "trials.jsonl"
RESULT = "result.json"
LOG = "runner.log"


def new_run_dir(root: Path | None = None) -> Path:
    root = Path(root) if root is not None else DEFAULT_ROOT
    name = time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)
    path = root / name
    path.mkdir(parents=True, exist_ok=False)
    return path


def write_atomic(path: Path, text: str) -> None:
    """Temporary file in the same folder, fsync, rename: readers see the old file or the new, never half."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, data: Any) -> None:
    write_atomic(path, json.dumps(data, indent=2) + "\n")


def append_trial(run_dir: Path, trial: TrialResult) -> None:
    with open(run_dir / TRIALS, "a") as handle:
        handle.write(json.dumps(trial.to_dict()) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def read_trials(run_dir: Path) -> list[TrialResult]:
    """Every complete line of the trial log; a torn last line (killed mid-write) is ignored."""
    trials = []
    path = Path(run_dir) / TRIALS
    if not path.exists():
        return trials
    for line in path.read_text().splitlines():
        try:
            trials.append(TrialResult.from_dict(json.loads(line)))
        except (ValueError, KeyError, TypeError):
            continue
    return trials


def write_result(run_dir: Path, result: SweepResult) -> Path:
    path = Path(run_dir) / RESULT
    write_json(path, result.to_dict())
    return path


def read_result(path: Path) -> SweepResult:
    """A result.json, or a run folder (its result.json); ValueError with one line when unreadable."""
    path = Path(path)
    if path.is_dir():
        path = path / RESULT
    try:
        return SweepResult.from_dict(json.loads(path.read_text()))
    except FileNotFoundError:
        raise ValueError(f"{path}: no such result file") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a loadertop result ({type(exc).__name__}: {exc})") from None
