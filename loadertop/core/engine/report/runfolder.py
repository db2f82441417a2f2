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

from loadertop.core.model.config import Settings, UsageError
from loadertop.core.model.results import MachineInfo, SweepResult, TrialResult, check_version

DEFAULT_ROOT = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "loadertop" / "runs"

SETTINGS = "settings.json"
TRIALS = "trials.jsonl"
RESULT = "result.json"
MACHINE = "machine.json"
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
            # mkstemp makes 0600 files; an export should read like any other file (or keep its old mode).
            os.fchmod(handle.fileno(), path.stat().st_mode & 0o777 if path.exists() else 0o644)
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)  # the rename itself must survive a power cut, not only the bytes


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot sync a folder; the data itself is synced
    finally:
        os.close(fd)


def write_json(path: Path, data: Any) -> None:
    write_atomic(path, json.dumps(data, indent=2) + "\n")


def append_trial(run_dir: Path, trial: TrialResult) -> None:
    """One line, one write, one fsync: a kill at any moment leaves whole lines and at most a torn last one."""
    path = Path(run_dir) / TRIALS
    new = not path.exists()
    with open(path, "a") as handle:
        handle.write(json.dumps(trial.to_dict()) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    if new:
        _fsync_dir(path.parent)


def read_trials(run_dir: Path) -> list[TrialResult]:
    """Every complete line of the trial log; a torn last line (killed mid-write) is ignored."""
    trials: list[TrialResult] = []
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
    except UsageError as exc:  # another result version: one line naming the file
        raise UsageError(f"{path}: {exc}") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{path}: not a loadertop result ({type(exc).__name__}: {exc})") from None


def read_trials_strict(run_dir: Path) -> list[TrialResult]:
    """The trial log of a run to resume: every line must be a trial, except a torn last line (the run was
    killed mid-write), which is dropped. ValueError with one line naming the file and line otherwise."""
    path = Path(run_dir) / TRIALS
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []  # killed before its first trial finished: nothing to keep
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: unreadable ({type(exc).__name__}: {exc})") from None
    lines = text.split("\n")
    trials = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            trials.append(TrialResult.from_dict(json.loads(line)))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            if number == len(lines):  # no newline after it: the write that was cut short
                continue
            raise ValueError(f"{path} line {number}: not a trial record ({type(exc).__name__}: {exc})") from None
    return trials


def read_settings(run_dir: Path) -> Settings:
    path = Path(run_dir) / SETTINGS
    if not Path(run_dir).is_dir():
        raise ValueError(f"{run_dir}: not a folder (give a run folder)")
    _check_result_version(Path(run_dir) / RESULT)
    try:
        return Settings.from_dict(json.loads(path.read_text()))
    except FileNotFoundError:
        raise ValueError(f"{run_dir}: not a loadertop run folder (no {SETTINGS})") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{path}: corrupt ({type(exc).__name__}: {exc})") from None


def _check_result_version(path: Path) -> None:
    """A run folder whose result.json is of another version is refused (--resume, and read_run's rebuild)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return  # no result.json (killed mid-sweep) or a torn one: the trial log is what is read
    try:
        check_version(data if isinstance(data, dict) else {})
    except UsageError as exc:
        raise UsageError(f"{path}: {exc}") from None


def read_run(path: Path) -> SweepResult:
    """A previous run to compare with: a result.json, or a run folder; a folder whose sweep was killed
    before it wrote result.json is rebuilt from its settings, machine and trial log."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"{path}: no such run folder or result file")
    if not path.is_dir() or (path / RESULT).exists():
        return read_result(path)
    settings = read_settings(path)
    try:
        machine = MachineInfo.from_dict(json.loads((path / MACHINE).read_text()))
    except FileNotFoundError:
        raise ValueError(f"{path}: not a finished loadertop run (no {RESULT} or {MACHINE})") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{path / MACHINE}: corrupt ({type(exc).__name__}: {exc})") from None
    trials = tuple(read_trials_strict(path))
    return SweepResult(machine, settings, trials, None, None, run_dir=str(path), interrupted=True)
