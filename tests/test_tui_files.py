"""--json, --csv and --resume in the TUI, as the headless face honours them: written when the sweep ends and on
quit mid-sweep (the finished trials, marked interrupted), one line per file after exit, a failed write exits 1."""

from __future__ import annotations

import asyncio
import csv
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from tui_fakes import SETTINGS, WORKERS, FakeSweepFactory, wait_until

import loadertop.faces.tui as tui
from loadertop.core.engine import SweepRequest
from loadertop.core.model.results import TrialResult
from loadertop.faces.tui.app import LoadertopApp
from loadertop.faces.tui.sweep_api import engine_factory

pytestmark = pytest.mark.tui

SIZE = (120, 40)


def drive(monkeypatch: pytest.MonkeyPatch, factory: FakeSweepFactory, until: Callable[[LoadertopApp], bool]) -> None:
    """run_tui with the fake engine; the 'terminal' presses q once `until` holds."""
    monkeypatch.setattr("loadertop.faces.tui.app.engine_factory", lambda request: factory)

    async def press_q(app: LoadertopApp) -> None:
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: until(app))
            await pilot.press("q")

    monkeypatch.setattr(LoadertopApp, "run", lambda app: asyncio.run(press_q(app)))


def test_json_and_csv_are_written_when_the_sweep_ends(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    drive(monkeypatch, FakeSweepFactory(tmp_path / "runs"), lambda app: app.state.phase == "finished")
    out, table = tmp_path / "out.json", tmp_path / "out.csv"
    assert tui.run_tui(SweepRequest(SETTINGS, out_dir=tmp_path, json_path=out, csv_path=table)) == 0
    result = json.loads(out.read_text())
    assert len(result["trials"]) == len(WORKERS) and not result["interrupted"]
    assert result["recommendation"]["config"]["num_workers"] == 4
    assert len(list(csv.DictReader(table.open()))) == len(WORKERS)
    assert capsys.readouterr().err.splitlines() == [f"loadertop: wrote {out}", f"loadertop: wrote {table}"]


def test_quit_mid_sweep_writes_the_finished_trials_marked_interrupted(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    factory = FakeSweepFactory(tmp_path / "runs", hold_at=2)
    drive(monkeypatch, factory, lambda app: factory.sweeps[0].held.is_set() and app.state.current == 2)
    out = tmp_path / "out.json"
    assert tui.run_tui(SweepRequest(SETTINGS, out_dir=tmp_path, json_path=out)) == 130
    result = json.loads(out.read_text())
    assert result["interrupted"] and [t["config"]["num_workers"] for t in result["trials"]] == [0, 1]
    assert capsys.readouterr().err.splitlines() == [f"loadertop: wrote {out}"]


def test_a_failed_write_is_named_and_exits_1(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    drive(monkeypatch, FakeSweepFactory(tmp_path / "runs"), lambda app: app.state.phase == "finished")
    (tmp_path / "a-file").write_text("")
    out, table = tmp_path / "a-file" / "out.json", tmp_path / "out.csv"
    assert tui.run_tui(SweepRequest(SETTINGS, out_dir=tmp_path, json_path=out, csv_path=table)) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [f"loadertop: error: cannot write {out}: Not a directory", f"loadertop: wrote {table}"]
    assert table.exists()


def test_resume_goes_to_the_first_sweep_only(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[TrialResult, ...]] = []

    class Recorder:
        def __init__(self, settings: object, **kwargs: object) -> None:
            seen.append(kwargs["resume"])  # type: ignore[arg-type]

    monkeypatch.setattr("loadertop.core.engine.Sweep", Recorder)
    kept = TrialResult(0, SETTINGS.trial_configs()[0], "ok", samples_per_s=800.0)
    make = engine_factory(SweepRequest(SETTINGS, resume=(kept,)))
    make(SETTINGS, None, None)  # the resumed run
    make(SETTINGS, None, None)  # `r` later: measured afresh
    assert seen == [(kept,), ()]
