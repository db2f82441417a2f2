"""Pilot tests: the panes follow the running trial from its launch, and a finished trial reads as its table row."""

from __future__ import annotations

from pathlib import Path

import pytest
from tui_fakes import SETTINGS, WORKERS, FakeSweepFactory, cell, sync, wait_until

from loadertop.core.engine import SweepRequest, mb, num
from loadertop.faces.tui.app import make_app
from loadertop.faces.tui.widgets.header import HeaderPane
from loadertop.faces.tui.widgets.memory import MemoryPane
from loadertop.faces.tui.widgets.results import ResultsTable
from loadertop.faces.tui.widgets.throughput import LivePane

pytestmark = pytest.mark.tui

SIZE = (120, 40)
REPEAT = len(WORKERS)  # the index of the repeated w=4 trial: the eighth


@sync
async def test_a_repeated_configuration_shows_as_the_running_trial(tmp_path: Path) -> None:
    # The default sweep repeats its finalists: while the repeat ran, the panes said "trial 5 w=4 (done)".
    factory = FakeSweepFactory(tmp_path, repeat=(4,), hold_at=REPEAT)
    app = make_app(SweepRequest(SETTINGS), sweep_factory=factory)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: bool(factory.sweeps) and factory.sweeps[0].held.is_set())
        await wait_until(pilot, lambda: app.state.current == REPEAT)
        app.flush(everything=True)
        total = len(WORKERS) + 1
        live = str(app.query_one(LivePane).border_title)
        memory = str(app.query_one(MemoryPane).border_title)
        assert live.startswith(f"Throughput · trial {REPEAT + 1}/{total} w=4") and "(done)" not in live
        assert memory == f"Memory · trial {REPEAT + 1} w=4"
        assert f"trial {REPEAT + 1}/{total}" in app.query_one(HeaderPane).render().plain
        table = app.query_one(ResultsTable)
        assert cell(table, 4, "mark") == "▸" and "running" in cell(table, 4, "status")
        factory.sweeps[0].release()
        await wait_until(pilot, lambda: app.state.phase == "finished")
        await pilot.press("q")


@sync
async def test_after_a_trial_the_memory_pane_says_what_its_row_says(tmp_path: Path) -> None:
    # The fake's probes tick once more after each trial's workers exited (60 MB): the pane must not keep that.
    factory = FakeSweepFactory(tmp_path)
    app = make_app(SweepRequest(SETTINGS), sweep_factory=factory)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.phase == "finished")
        table = app.query_one(ResultsTable)
        for row in range(table.row_count - 1):  # the last (failed) trial has no memory figures
            table.move_cursor(row=row)
            await pilot.pause()
            pane = app.query_one(MemoryPane).render().plain
            result = app.state.rows[row].result
            assert result is not None and result.total_pss_mb is not None
            assert f"PSS {mb(result.total_pss_mb)}" in pane
            assert num(result.total_pss_mb) == cell(table, row, "pss")  # the report's format (MB)
            assert "60 MB" not in pane
        await pilot.press("q")
