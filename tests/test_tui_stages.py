"""The TUI's stages screen (`w`): where a sample's time goes, shown as `loadertop stages` prints it, measured only
while no trial runs. The sweep and the measurement are fakes here (tests/test_stages.py measures real pipelines)."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import pytest
from rich.console import Console
from test_stages import measurement
from textual.widgets import Static
from tui_fakes import SETTINGS, FakeSweepFactory, sync, wait_until

from loadertop.core.engine import SweepRequest
from loadertop.core.engine.verdict.stage_verdict import judge_stages
from loadertop.core.model.config import DataError, Settings
from loadertop.core.model.stages import StagesReport
from loadertop.faces.tui.app import LoadertopApp, make_app
from loadertop.faces.tui.widgets.stages import StagesScreen

pytestmark = pytest.mark.tui


def report() -> StagesReport:
    """test_stages.py's image pipeline on 2 CPUs: decode 2 ms of the 4.2 ms a sample takes, float32 batches crossing
    to the main process, no GPU."""
    return judge_stages(measurement(), cpus=2, mem_available_mb=16000.0)


def body(app: LoadertopApp) -> str:
    """The screen's text as the terminal shows it."""
    console = Console(width=app.size.width)
    with console.capture() as captured:
        console.print(app.screen.query_one("#stages-body", Static).content)
    return captured.get()


def finished(app: LoadertopApp) -> bool:
    return app.state.phase == "finished"


@sync
async def test_w_after_the_sweep_shows_each_stage_its_share_the_ceilings_and_the_advice(tmp_path: Path) -> None:
    asked: list[Settings] = []
    release = threading.Event()

    def measure(settings: Settings) -> StagesReport:
        asked.append(settings)
        release.wait(10)
        return report()

    app = make_app(SweepRequest(SETTINGS), sweep_factory=FakeSweepFactory(tmp_path), stages=measure)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: finished(app))
        await pilot.press("w")
        assert isinstance(app.screen, StagesScreen)
        await wait_until(pilot, lambda: bool(asked))
        assert "measuring" in body(app) and asked == [SETTINGS]  # the sweep's own dataset, said while it runs
        release.set()
        await wait_until(pilot, lambda: app.screen.report is not None)  # type: ignore[attr-defined]
        shown = body(app)
        for stage in ("read+decode (PIL.Image.open/convert)", "RandomResizedCrop", "Normalize", "collate"):
            assert stage in shown
        assert "█" in shown and "ceilings on this machine" in shown and "advice" in shown
        assert "48%" in shown  # decode: 2 of the 4.2 ms
        await pilot.press("escape")
        assert not isinstance(app.screen, StagesScreen) and app.is_running


@sync
async def test_w_shows_the_stages_the_sweep_measured_without_measuring_again(tmp_path: Path) -> None:
    asked: list[Settings] = []
    app = make_app(SweepRequest(SETTINGS), sweep_factory=FakeSweepFactory(tmp_path), stages=asked.append)  # type: ignore[arg-type]
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: finished(app))
        assert app.state.result is not None
        app.state.result = dataclasses.replace(app.state.result, stages=report())  # as a sweep's stages step keeps
        await pilot.press("w")
        await wait_until(pilot, lambda: app.screen.report is not None)  # type: ignore[attr-defined]
        assert "read+decode (PIL.Image.open/convert)" in body(app) and asked == []


@sync
async def test_w_mid_trial_is_refused_so_the_sweep_keeps_its_cpus(tmp_path: Path) -> None:
    factory = FakeSweepFactory(tmp_path, hold_at=1)
    measured: list[Settings] = []
    app = make_app(SweepRequest(SETTINGS), sweep_factory=factory, stages=lambda s: measured.append(s) or report())
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: bool(factory.sweeps) and factory.sweeps[0].held.is_set())
        await pilot.press("w")
        assert not isinstance(app.screen, StagesScreen) and measured == []
        assert app.messages[-1][0] == "warning" and "press w after it, or pause (p) first" in app.messages[-1][1]
        await pilot.press("p", "w")  # paused: the trial's processes are stopped, the CPUs free
        assert isinstance(app.screen, StagesScreen)
        await wait_until(pilot, lambda: measured != [])
        factory.sweeps[0].release()


@sync
async def test_a_dataset_that_fails_is_one_line_on_the_screen_at_80x24(tmp_path: Path) -> None:
    def measure(settings: Settings) -> StagesReport:
        raise DataError("sample 17 (clips/bad.wav): LibsndfileError: Format not recognised")

    app = make_app(SweepRequest(SETTINGS), sweep_factory=FakeSweepFactory(tmp_path), stages=measure)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: finished(app))
        await pilot.press("w")
        await wait_until(pilot, lambda: app.screen.error is not None)  # type: ignore[attr-defined]
        assert "stages not measured: sample 17 (clips/bad.wav)" in body(app)
        await pilot.press("w")
        assert not isinstance(app.screen, StagesScreen)
