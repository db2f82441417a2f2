"""A result file of another RESULT_VERSION is refused in one line (exit 2 from the CLI, UsageError from the API)
wherever a result file is read: SweepResult.from_dict, read_result/read_run (--compare) and read_settings
(--resume). A result without a version field is read as the current one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loadertop.core.engine import read_run, read_settings
from loadertop.core.engine.report.runfolder import read_result
from loadertop.core.model.config import UsageError
from loadertop.core.model.results import RESULT_VERSION, SweepResult

DATA = Path(__file__).parent / "data"
RECORDED = json.loads((DATA / "recorded_result.json").read_text())


def _write(path: Path, version: object) -> Path:
    data = dict(RECORDED, version=version)
    path.write_text(json.dumps(data))
    return path


@pytest.mark.unit
def test_from_dict_refuses_another_version() -> None:
    assert SweepResult.from_dict(dict(RECORDED, version=RESULT_VERSION)).version == RESULT_VERSION
    with pytest.raises(UsageError) as caught:
        SweepResult.from_dict(dict(RECORDED, version=99))
    assert str(caught.value) == (
        f"result version 99, this loadertop reads result version {RESULT_VERSION} "
        f"(read it with the loadertop that wrote it)"
    )


@pytest.mark.unit
def test_no_version_reads_as_current() -> None:
    data = {k: v for k, v in RECORDED.items() if k != "version"}
    assert SweepResult.from_dict(data).version == RESULT_VERSION


@pytest.mark.unit
@pytest.mark.parametrize("reader", [read_result, read_run])
def test_readers_name_the_file(tmp_path: Path, reader: object) -> None:
    path = _write(tmp_path / "old.json", 99)
    with pytest.raises(UsageError) as caught:
        reader(path)  # type: ignore[operator]  # the two readers share this signature
    line = str(caught.value)
    assert line.startswith(f"{path}: result version 99, ") and "\n" not in line
    # a run folder holding it: the same refusal, naming its result.json
    run = tmp_path / "run"
    run.mkdir()
    _write(run / "result.json", 99)
    with pytest.raises(UsageError, match=r"run/result\.json: result version 99"):
        reader(run)  # type: ignore[operator]


@pytest.mark.unit
def test_resume_folder_of_another_version(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "settings.json").write_text(json.dumps(RECORDED["settings"]))
    assert read_settings(run).dataset == RECORDED["settings"]["dataset"]  # no result.json yet: resumable
    _write(run / "result.json", 99)
    with pytest.raises(UsageError, match=r"result\.json: result version 99, this loadertop reads"):
        read_settings(run)


@pytest.mark.parametrize("flag", ["--compare", "--resume"])
def test_cli_refuses_in_one_line(tmp_path: Path, flag: str) -> None:
    run = tmp_path / "old"
    run.mkdir()
    (run / "settings.json").write_text(json.dumps(RECORDED["settings"]))
    _write(run / "result.json", 99)
    target = run / "result.json" if flag == "--compare" else run
    out = subprocess.run(
        [sys.executable, "-m", "loadertop", "--headless", "--dataset", "synthetic", "--workers", "0",
         flag, str(target)],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert f"{flag} {run / 'result.json'}: result version 99, this loadertop reads result version 1" in lines[0]
