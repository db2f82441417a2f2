"""Pilot tests: every key pressed against the deterministic fake sweep, asserting on state and messages."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.table import Table
from textual import events
from textual.widget import Widget
from textual.widgets import Static
from tui_fakes import (
    GPU_MACHINE,
    SETTINGS,
    WORKERS,
    FakeSweep,
    FakeSweepFactory,
    cell,
    change_of,
    snippet,
    sync,
    wait_until,
)

from loadertop.core.engine import SweepRequest
from loadertop.core.model.config import UsageError
from loadertop.core.model.events import Event
from loadertop.faces.tui.app import LoadertopApp, make_app
from loadertop.faces.tui.widgets.gpu import GpuPane
from loadertop.faces.tui.widgets.header import HeaderPane
from loadertop.faces.tui.widgets.help import HelpScreen
from loadertop.faces.tui.widgets.memory import MemoryPane
from loadertop.faces.tui.widgets.results import ResultsTable
from loadertop.faces.tui.widgets.throughput import LivePane, ThroughputChart

SIZE = (120, 40)


def text(widget: HeaderPane | GpuPane | MemoryPane | LivePane) -> str:
    return widget.render().plain


def finished(app: LoadertopApp) -> bool:
    return app.state.phase == "finished"


def held(factory: FakeSweepFactory, app: LoadertopApp, index: int) -> object:
    """The fake is holding at `index` and the app has taken in everything before the hold."""
    return lambda: bool(factory.sweeps) and factory.sweeps[0].held.is_set() and app.state.current == index


@pytest.fixture
def factory(tmp_path: Path) -> FakeSweepFactory:
    return FakeSweepFactory(tmp_path / "runs")


@pytest.mark.tui
@sync
async def test_a_whole_sweep_without_gpu(factory: FakeSweepFactory) -> None:
    app = make_app(SweepRequest(SETTINGS), sweep_factory=factory)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: finished(app))
        app.flush(everything=True)
        header = text(app.query_one(HeaderPane))
        assert "2 usable CPUs" in header and "no GPU" in header
        assert "done: 7 trials (1 not ok)" in header
        assert snippet(app.state.recommendation.config) in header  # type: ignore[union-attr]
        assert "CPU-bound" in header
        gpu = text(app.query_one(GpuPane))
        assert "no NVIDIA GPU: NVML library not found" in gpu
        assert "busy" in gpu and "avg" in gpu and "max" in gpu
        memory = text(app.query_one(MemoryPane))
        assert "PSS" in memory and "RSS" in memory and "incl. shared" in memory
        assert "MB/min" in memory and "keeps climbing" in memory
        table = app.query_one(ResultsTable)
        assert table.row_count == len(WORKERS)
        marks = [cell(table, i, "mark") for i in range(table.row_count)]
        assert marks == ["", "", "", "", "★◆", "", ""]
        assert cell(table, 6, "samples/s") == "failed"
        assert cell(table, 6, "status") == "failed: RuntimeError…"  # cut at a word to fit 120 columns
        assert table.cursor_row == 4  # the recommended row
        chart = app.query_one(ThroughputChart)
        assert "knee 4" in str(chart.border_title)
        assert ("warning", "/dev/shm has 3.9 GB free: 8 workers may not fit") in app.messages
        table.move_cursor(row=6)  # the highlighted failure says all of it in the live pane
        await pilot.pause()
        app.flush(everything=True)
        assert "/dev/shm too small" in text(app.query_one(LivePane))
        # Nothing keeps redrawing once the sweep is over: the idle app costs no CPU.
        assert not app._ticker._active.is_set()


@pytest.mark.tui
@sync
async def test_two_gpus_show_a_sparkline_each_with_numbers(tmp_path: Path) -> None:
    factory = FakeSweepFactory(tmp_path, machine=GPU_MACHINE, hold_at=3)
    app = make_app(SweepRequest(SETTINGS), sweep_factory=factory)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, held(factory, app, 3))
        app.flush(everything=True)
        lines = text(app.query_one(GpuPane)).splitlines()
        assert lines[0].startswith("0 ") and lines[1].startswith("1 ")
        assert "avg" in lines[0] and "max" in lines[1]
        assert app.query_one(GpuPane).border_title == "GPU utilization"
        live = text(app.query_one(LivePane))
        assert "batches/s" in live and "samples/s" in live
        assert "trial 4/7" in text(app.query_one(HeaderPane))
        factory.sweeps[0].release()
        await wait_until(pilot, lambda: finished(app))
        table = app.query_one(ResultsTable)
        assert cell(table, 4, "gpu").endswith("%")


@pytest.mark.tui
@sync
async def test_p_pauses_and_resumes(tmp_path: Path) -> None:
    factory = FakeSweepFactory(tmp_path, hold_at=2)
    app = make_app(SweepRequest(SETTINGS), sweep_factory=factory)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, held(factory, app, 2))
        await pilot.press("p")
        assert factory.sweeps[0].paused and app.state.paused
        assert "PAUSED" in text(app.query_one(HeaderPane))
        await pilot.press("p")
        assert not factory.sweeps[0].paused and not app.state.paused
        assert factory.sweeps[0].calls == ["pause", "resume"]
        assert [m for _, m in app.messages][-2:] == ["paused: the block being measured will be discarded", "resumed"]
        factory.sweeps[0].release()
        await wait_until(pilot, lambda: finished(app))
        await pilot.press("p")
        assert app.messages[-1] == ("warning", "no sweep is running")


@pytest.mark.tui
@sync
async def test_s_stops_after_the_current_trial(tmp_path: Path) -> None:
    factory = FakeSweepFactory(tmp_path, hold_at=2)
    app = make_app(SweepRequest(SETTINGS), sweep_factory=factory)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, held(factory, app, 2))
        await pilot.press("s")
        assert "stopping after this trial" in text(app.query_one(HeaderPane))
        factory.sweeps[0].release()  # the running trial finishes...
        await wait_until(pilot, lambda: finished(app))  # ...and nothing after it starts
        assert factory.sweeps[0].calls == ["stop"]
        assert [row.status for row in app.state.rows] == ["ok"] * 3 + ["not run"] * 4
        assert app.state.result is not None and app.state.result.interrupted
        assert "stopped early" in text(app.query_one(HeaderPane))
        await pilot.press("y")
        assert app.messages[-1][0] == "warning" and "no recommendation" in app.messages[-1][1]
        await pilot.press("s")
        assert app.messages[-1] == ("warning", "no sweep is running")


@sync
async def test_q_mid_sweep_cancels_and_returns_130_promptly(tmp_path: Path) -> None:
    factory = FakeSweepFactory(tmp_path, hold_at=2)
    app = make_app(SweepRequest(SETTINGS), sweep_factory=factory)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, held(factory, app, 2))
        started = time.monotonic()
        await pilot.press("q")
        await pilot.pause()
    assert time.monotonic() - started < 2.0
    assert factory.sweeps[0].calls == ["cancel"]
    assert app.return_code == 130
    # The thread drained the stream to its end, so the engine got to write its final result.
    assert factory.sweeps[0].result is not None and factory.sweeps[0].result.interrupted


@pytest.mark.tui
@sync
async def test_q_while_paused_still_cancels(tmp_path: Path) -> None:
    factory = FakeSweepFactory(tmp_path, hold_at=2)
    app = make_app(SweepRequest(SETTINGS), sweep_factory=factory)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, held(factory, app, 2))
        await pilot.press("p", "q")
    assert factory.sweeps[0].calls == ["pause", "cancel"]
    assert app.return_code == 130


@pytest.mark.tui
@sync
async def test_q_after_the_sweep_returns_0(factory: FakeSweepFactory) -> None:
    app = make_app(SweepRequest(SETTINGS), sweep_factory=factory)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: finished(app))
        await pilot.press("q")
    assert app.return_code == 0
    assert factory.sweeps[0].calls == []


@pytest.mark.tui
@sync
async def test_r_reruns_and_the_table_shows_the_change(factory: FakeSweepFactory) -> None:
    app = make_app(SweepRequest(SETTINGS), sweep_factory=factory)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: finished(app))
        first = app.state.result
        await pilot.press("r")
        await wait_until(pilot, lambda: len(factory.sweeps) == 2 and finished(app))
        settings, previous, only = factory.calls[1]
        assert previous is first and only is None and settings == SETTINGS
        table = app.query_one(ResultsTable)
        # the failed row: not measured ("–", as headless prints it)
        assert [cell(table, i, "change") for i in range(table.row_count)] == ["+8%"] * 6 + ["–"]
        assert app.state.previous is first
        assert "previous" not in str(app.query_one(ThroughputChart).border_title)  # tall: in the legend instead


@pytest.mark.tui
@sync
async def test_r_during_a_sweep_cancels_it_then_starts_over(tmp_path: Path) -> None:
    factory = FakeSweepFactory(tmp_path, hold_at=2)
    app = make_app(SweepRequest(SETTINGS), sweep_factory=factory)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, held(factory, app, 2))
        await pilot.press("r")
        await wait_until(pilot, lambda: len(factory.sweeps) == 2 and finished(app))
        assert factory.sweeps[0].calls == ["cancel"]
        # The cancelled sweep's two finished trials are the baseline of the new one.
        assert factory.calls[1][1] is not None and len(factory.calls[1][1].trials) == 2
        assert change_of(app.state, 0) == pytest.approx(0.08)
        assert change_of(app.state, 3) is None


@pytest.mark.tui
@sync
async def test_enter_reruns_the_highlighted_row_with_a_tighter_spread(factory: FakeSweepFactory) -> None:
    app = make_app(SweepRequest(SETTINGS), sweep_factory=factory)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: finished(app))
        rec = app.state.recommendation
        await pilot.press("up", "up")  # from the recommended row (w=4) to w=2
        await pilot.press("enter")
        await wait_until(pilot, lambda: len(factory.sweeps) == 2 and finished(app))
        settings, previous, only = factory.calls[1]
        assert only is not None and [c.num_workers for c in only] == [2]
        assert settings.target_spread == 0.02 and settings.trial_seconds == SETTINGS.trial_seconds * 2
        assert previous is not None and len(previous.trials) == len(WORKERS)
        table = app.query_one(ResultsTable)
        assert table.row_count == len(WORKERS)
        assert cell(table, 2, "change") == "+8%"
        assert app.state.recommendation is not None and rec is not None
        assert app.state.recommendation.config == rec.config
        assert "rerunning w=2 bs=32 pf=2 fork with more repeats" in app.messages[-1][1]


@pytest.mark.tui
@sync
async def test_enter_during_a_sweep_only_warns(tmp_path: Path) -> None:
    factory = FakeSweepFactory(tmp_path, hold_at=2)
    app = make_app(SweepRequest(SETTINGS), sweep_factory=factory)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, held(factory, app, 2))
        await pilot.press("enter")
        assert app.messages[-1][0] == "warning" and "a sweep is running" in app.messages[-1][1]
        assert len(factory.sweeps) == 1
        factory.sweeps[0].release()


@pytest.mark.tui
@sync
async def test_plus_and_minus_change_the_worker_range_and_rerun(factory: FakeSweepFactory) -> None:
    app = make_app(SweepRequest(SETTINGS), sweep_factory=factory)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: finished(app))
        await pilot.press("+")
        await wait_until(pilot, lambda: len(factory.sweeps) == 2 and finished(app))
        assert factory.calls[1][0].workers == (*WORKERS, 12, 16)
        assert app.query_one(ResultsTable).row_count == len(WORKERS) + 2
        assert ("information", "workers 0,1,2,3,4,6,8 → 0,1,2,3,4,6,8,12,16: rerunning") in app.messages
        await pilot.press("minus")
        await wait_until(pilot, lambda: len(factory.sweeps) == 3 and finished(app))
        assert factory.calls[2][0].workers == WORKERS
        await pilot.press("-")
        await wait_until(pilot, lambda: len(factory.sweeps) == 4 and finished(app))
        assert factory.calls[3][0].workers == (0, 1, 2, 3, 4)
        assert app.query_one(ResultsTable).row_count == 5


@pytest.mark.tui
@sync
async def test_e_exports_into_the_run_folder_with_the_engine_writers(
    factory: FakeSweepFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    written: list[str] = []
    for kind in ("json", "csv", "markdown"):

        def writer(result: object, path: Path, kind: str = kind) -> None:
            written.append(kind)
            Path(path).write_text(kind)

        monkeypatch.setattr(f"loadertop.core.engine.write_{kind}", writer)
    app = make_app(SweepRequest(SETTINGS), sweep_factory=factory)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: finished(app))
        await pilot.press("e")
        run_dir = factory.sweeps[0].run_dir
        assert written == ["json", "csv", "markdown"]
        assert [p.name for p in app.exports] == ["result.json", "results.csv", "results.md"]
        assert all(p.parent == run_dir and p.exists() for p in app.exports)
        assert str(run_dir) in text(app.query_one(HeaderPane))  # the paths are shown
        assert str(run_dir) in app.messages[-1][1]


@pytest.mark.tui
@sync
async def test_e_works_mid_sweep(tmp_path: Path) -> None:
    factory = FakeSweepFactory(tmp_path, hold_at=3)
    app = make_app(SweepRequest(SETTINGS), sweep_factory=factory)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, held(factory, app, 3))
        await pilot.press("e")
        data = json.loads((factory.sweeps[0].run_dir / "result.json").read_text())
        assert len(data["trials"]) == 3 and data["interrupted"] is True
        assert (factory.sweeps[0].run_dir / "results.csv").read_text().count("\n") == 4
        factory.sweeps[0].release()


@pytest.mark.tui
@sync
async def test_e_before_any_trial_warns(tmp_path: Path) -> None:
    factory = FakeSweepFactory(tmp_path, hold_at=0)
    app = make_app(SweepRequest(SETTINGS), sweep_factory=factory)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, held(factory, app, 0))
        await pilot.press("e", "y")
        assert [m for _, m in app.messages[-2:]] == [
            "nothing to export yet: no trial has finished",
            "no recommendation yet: it comes when the sweep ends",
        ]
        factory.sweeps[0].release()


@pytest.mark.tui
@sync
async def test_y_copies_the_snippet_and_writes_snippet_py(factory: FakeSweepFactory) -> None:
    app = make_app(SweepRequest(SETTINGS), sweep_factory=factory)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: finished(app))
        await pilot.press("y")
        rec = app.state.recommendation
        assert rec is not None
        assert app.clipboard == rec.snippet
        path = factory.sweeps[0].run_dir / "snippet.py"
        assert app.snippet_path == path
        body = path.read_text()
        assert "loader = DataLoader(dataset, batch_size=32, num_workers=4" in body
        assert "from torch.utils.data import DataLoader" in body and "# CPU-bound" in body
        compile(body, str(path), "exec")
        assert "OSC 52" in app.messages[-1][1]


@pytest.mark.tui
@sync
async def test_question_mark_lists_every_key(factory: FakeSweepFactory) -> None:
    app = make_app(SweepRequest(SETTINGS), sweep_factory=factory)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("?")
        assert isinstance(app.screen, HelpScreen)
        keys = app.screen.query_one("#help-keys", Static).content
        assert isinstance(keys, Table)
        listed = [(str(k), str(d)) for k, d in zip(keys.columns[0].cells, keys.columns[1].cells, strict=True)]
        assert listed == [(b.key_display or b.key, b.tooltip) for b in LoadertopApp.BINDINGS]  # type: ignore[union-attr]
        await pilot.press("?")
        assert not isinstance(app.screen, HelpScreen)
        await pilot.press("?", "q")  # q closes the help, it does not quit
        assert not isinstance(app.screen, HelpScreen) and app.is_running


@pytest.mark.tui
def test_every_key_but_the_theme_is_in_the_footer_and_needs_no_modifier() -> None:
    for binding in LoadertopApp.BINDINGS:
        assert binding.description and binding.id and binding.tooltip  # type: ignore[union-attr]
        assert binding.show or binding.id == "theme"  # type: ignore[union-attr]  (the help lists every key)
        for key in binding.key.split(","):  # type: ignore[union-attr]
            assert not key.startswith(("ctrl+", "alt+", "escape"))


@pytest.mark.tui
@sync
async def test_footer_fits_80_columns(factory: FakeSweepFactory) -> None:
    app = make_app(SweepRequest(SETTINGS), sweep_factory=factory)
    shown = sum(1 for b in LoadertopApp.BINDINGS if b.show)  # type: ignore[union-attr]
    async with app.run_test(size=(80, 24)) as pilot:
        # The footer composes its keys when the app next handles its bindings: beside busy processes, after the
        # fake sweep has finished
        def footer_keys() -> list[Widget]:
            return list(app.screen.query_one("Footer").query("FooterKey"))

        await wait_until(pilot, lambda: finished(app) and len(footer_keys()) == shown)
        keys = footer_keys()
        assert len(keys) == shown and max(k.region.right for k in keys) <= 80


@pytest.mark.tui
@sync
async def test_t_switches_to_the_light_theme_and_back(factory: FakeSweepFactory) -> None:
    app = make_app(SweepRequest(SETTINGS), sweep_factory=factory)
    async with app.run_test(size=SIZE) as pilot:
        assert app.theme == "textual-dark"
        await pilot.press("t")
        assert app.theme == "textual-light"
        await pilot.press("t")
        assert app.theme == "textual-dark"
    assert make_app(SweepRequest(SETTINGS), sweep_factory=factory, theme="light").theme == "textual-light"


@pytest.mark.tui
@sync
async def test_light_theme_from_the_environment(factory: FakeSweepFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOADERTOP_THEME", "light")
    assert make_app(SweepRequest(SETTINGS), sweep_factory=factory).theme == "textual-light"


@pytest.mark.tui
@sync
async def test_no_color_is_honoured_and_marks_survive(
    factory: FakeSweepFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    app = make_app(SweepRequest(SETTINGS), sweep_factory=factory)
    assert app.no_color
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: finished(app))
        table = app.query_one(ResultsTable)
        assert cell(table, 4, "mark") == "★◆"  # symbols, not only colour


@pytest.mark.tui
@sync
async def test_too_small_terminal_shows_a_notice(factory: FakeSweepFactory) -> None:
    app = make_app(SweepRequest(SETTINGS), sweep_factory=factory)
    async with app.run_test(size=(70, 20)) as pilot:
        await pilot.pause()
        notice = app.query_one("#too-small")
        assert notice.display and "terminal too small: 70×20" in str(notice.render())
        assert not app.query_one("#panes").display
        await wait_until(pilot, lambda: finished(app))  # the sweep keeps running behind it
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        assert not app.query_one("#too-small").display and app.query_one("#panes").display


class CrashingSweep(FakeSweep):
    def events(self) -> Iterator[Event]:
        stream = super().events()
        yield next(stream)
        yield next(stream)
        raise RuntimeError("runner exploded")


@pytest.mark.tui
@sync
async def test_an_engine_error_is_shown_and_the_app_stays_up(tmp_path: Path) -> None:
    def factory(settings, previous, only):  # type: ignore[no-untyped-def]
        return CrashingSweep(settings, previous, only, machine=GPU_MACHINE, run_dir=tmp_path)

    app = make_app(SweepRequest(SETTINGS), sweep_factory=factory)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.phase == "crashed")
        assert "sweep failed: RuntimeError: runner exploded" in text(app.query_one(HeaderPane))
        assert app.messages[-1][0] == "error"
        await pilot.press("q")
    assert app.return_code == 1


@pytest.mark.tui
@sync
async def test_bad_input_from_the_factory_exits_2(tmp_path: Path) -> None:
    def factory(settings, previous, only):  # type: ignore[no-untyped-def]
        raise UsageError("--dataset nope.py:build: no such file")

    app = make_app(SweepRequest(SETTINGS), sweep_factory=factory)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.phase == "crashed")
        assert "no such file" in text(app.query_one(HeaderPane))
        await pilot.press("q")
    assert app.return_code == 2


@pytest.mark.tui
@sync
async def test_samples_do_not_redraw_the_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"table": 0}
    original = ResultsTable.update_view

    def counting(self: ResultsTable) -> None:
        calls["table"] += 1
        original(self)

    monkeypatch.setattr(ResultsTable, "update_view", counting)
    factory = FakeSweepFactory(tmp_path)
    app = make_app(SweepRequest(SETTINGS), sweep_factory=factory)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: finished(app))
    # mount + start + SweepStarted + (started, finished) per trial + one notice + SweepFinished: not per sample.
    assert calls["table"] <= 3 + 2 * len(WORKERS) + 2


@pytest.mark.tui
@sync
async def test_after_the_sweep_the_highlighted_row_fills_the_panes(factory: FakeSweepFactory) -> None:
    app = make_app(SweepRequest(SETTINGS), sweep_factory=factory)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: finished(app))
        assert "trial 5 w=4" in str(app.query_one(MemoryPane).border_title)
        await pilot.press("down", "down")  # w=8: failed
        assert "failed:" in text(app.query_one(LivePane))
        await pilot.press("up")
        assert "trial 6 w=6" in str(app.query_one(MemoryPane).border_title)


@pytest.mark.tui
def test_run_tui_returns_the_app_exit_code(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import loadertop.faces.tui as tui

    seen: dict[str, object] = {}

    def fake_run(self: LoadertopApp) -> None:
        seen["factory"] = self.sweep_factory
        self._return_code = 130

    monkeypatch.setattr(LoadertopApp, "run", fake_run)
    assert tui.run_tui(SweepRequest(SETTINGS, out_dir=tmp_path)) == 130
    assert callable(seen["factory"])


@pytest.mark.tui
@sync
async def test_enter_right_after_arrow_keys_reruns_the_row_they_moved_to(factory: FakeSweepFactory) -> None:
    # Over SSH the keys arrive together: enter must see the cursor where the arrows left it.
    app = make_app(SweepRequest(SETTINGS), sweep_factory=factory)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: finished(app))
        for key in ("down", "down", "enter"):
            app.post_message(events.Key(key, None))
        await wait_until(pilot, lambda: len(factory.sweeps) == 2)
        assert [c.num_workers for c in factory.calls[1][2] or []] == [8]


@pytest.mark.tui
@sync
async def test_a_previous_result_from_disk_is_the_baseline(tmp_path: Path) -> None:
    first = FakeSweepFactory(tmp_path / "a")
    sweep = first(SETTINGS, None, None)
    for _ in sweep.events():
        pass
    factory = FakeSweepFactory(tmp_path / "b")
    factory.sweeps.append(sweep)  # so the next one is "8% faster"
    app = make_app(SweepRequest(SETTINGS, previous=sweep.result), sweep_factory=factory)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: len(factory.sweeps) == 2 and finished(app))
        assert factory.calls[0][1] is sweep.result
        assert [change_of(app.state, i) for i in range(6)] == pytest.approx([0.08] * 6)
