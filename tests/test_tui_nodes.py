"""The TUI's nodes pane in a real app (Pilot): shown only when the result has nodes, every cell the engine's report's,
following the highlighted row. A replayed sweep feeds it: the two-node result of test_nodes_report (the recorded
one-node run, node 1 18% slower, merged and concluded by the engine), trial by trial, then the result."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from test_nodes_report import ONE_NODE, two_nodes
from tui_fakes import sync, wait_until

from loadertop.core.engine import SweepRequest, build_report
from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.events import Event, SweepFinished, SweepStarted, TrialFinished
from loadertop.core.model.results import SweepResult
from loadertop.faces.tui.app import LoadertopApp, make_app
from loadertop.faces.tui.widgets.nodes import NodesPane

pytestmark = pytest.mark.tui

SIZE = (120, 40)


class ReplaySweep:
    """The events of a finished result: its trials, then (once `finish` is set) the result itself."""

    def __init__(self, result: SweepResult) -> None:
        self.result_to_send = result
        self.run_dir = Path(result.run_dir or "/tmp/lt-nodes")
        self.result: SweepResult | None = None
        self.finish = threading.Event()
        self.cancelled = threading.Event()
        self.paused = False

    def events(self) -> Iterator[Event]:
        r = self.result_to_send
        planned = tuple(dict.fromkeys(t.config for t in r.trials))
        yield SweepStarted(str(self.run_dir), r.machine, r.settings, planned)
        for trial in r.trials:
            yield TrialFinished(trial)
        while not (self.finish.wait(0.02) or self.cancelled.is_set()):
            pass
        self.result = r
        yield SweepFinished(r)

    def cancel(self) -> None:
        self.cancelled.set()

    def stop_after_current(self) -> None:
        self.cancel()

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False


def app_for(result: SweepResult) -> tuple[LoadertopApp, list[ReplaySweep]]:
    sweeps: list[ReplaySweep] = []

    def factory(_s: Settings, _p: SweepResult | None, _o: Sequence[TrialConfig] | None) -> ReplaySweep:
        sweeps.append(ReplaySweep(result))
        return sweeps[-1]

    return make_app(SweepRequest(result.settings), sweep_factory=factory), sweeps


def pane_lines(app: LoadertopApp) -> list[str]:
    return app.query_one(NodesPane).view().plain.splitlines()


@sync
async def test_the_pane_shows_the_recommended_configuration_node_by_node() -> None:
    result = two_nodes()
    report = build_report(result)
    rec = report.recommended
    assert rec is not None
    app, sweeps = app_for(result)
    async with app.run_test(size=SIZE) as pilot:
        pane = app.query_one(NodesPane)
        await wait_until(pilot, lambda: bool(sweeps) and len(app.state.rows) > 0)
        sweeps[0].finish.set()
        await wait_until(pilot, lambda: app.state.phase == "finished")
        app.flush(everything=True)
        await pilot.pause()
        assert pane.has_class("-shown") and pane.display and pane.region.height > 0
        assert pane.border_title == f"Nodes · {rec.config.label()} ★"
        lines = pane_lines(app)
        for node, line in zip(rec.nodes, lines[1:3], strict=True):
            words = line.split()
            cells = report.node_cells(node)
            assert cells["host"] in words and cells["samples/s"] in words and cells["behind"] in words
        assert "◀" in lines[2] and "host-b" in lines[2] and "◀" not in lines[1]
        assert "; ".join(lines[3:]) == rec.pacing  # a clause a line


@sync
async def test_the_pane_follows_the_highlighted_row() -> None:
    result = two_nodes()
    report = build_report(result)
    app, sweeps = app_for(result)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: bool(sweeps))
        sweeps[0].finish.set()
        await wait_until(pilot, lambda: app.state.phase == "finished")
        others = {row.config: row for row in report.rows if not row.recommended and row.status == "ok"}
        app.table.focus()
        for key in ["up"] * len(report.rows) + ["down"] * len(report.rows):
            if app.table.selected_config() in others:
                break
            await pilot.press(key)
        other = others[app.table.selected_config()]  # type: ignore[index]
        await pilot.pause()
        assert app.query_one(NodesPane).border_title == f"Nodes · {other.config.label()}"
        first = pane_lines(app)[1].split()
        assert report.node_cells(other.nodes[0])["samples/s"] in first


@sync
async def test_mid_sweep_the_pane_shows_the_latest_trial() -> None:
    result = two_nodes()
    app, sweeps = app_for(result)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: sum(1 for row in app.state.rows if row.result is not None) > 0)
        await wait_until(pilot, lambda: app.query_one(NodesPane).has_class("-shown"))
        assert app.query_one(NodesPane).border_title.startswith("Nodes · ")
        sweeps[0].finish.set()


@sync
async def test_one_node_shows_no_nodes_pane() -> None:
    app, sweeps = app_for(ONE_NODE)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: bool(sweeps))
        sweeps[0].finish.set()
        await wait_until(pilot, lambda: app.state.phase == "finished")
        app.flush(everything=True)
        await pilot.pause()
        pane = app.query_one(NodesPane)
        assert not pane.has_class("-shown") and pane.region.height == 0


@sync
async def test_at_80x24_the_table_keeps_its_rows_on_screen() -> None:
    """The nodes pane takes room from the results table on a short terminal, never pushes it under the footer."""
    app, sweeps = app_for(two_nodes())
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: bool(sweeps))
        sweeps[0].finish.set()
        await wait_until(pilot, lambda: app.state.phase == "finished")
        app.flush(everything=True)
        await pilot.pause()
        pane, table = app.query_one(NodesPane), app.table
        assert pane.region.height >= 3  # its header and both nodes
        assert table.region.height >= 3
        assert table.region.bottom <= 24 - 1  # the footer's line stays the footer's
        assert pane.region.bottom <= table.region.y
