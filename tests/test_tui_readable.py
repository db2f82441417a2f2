"""What the screen says is true and readable without colour, at 80×24 too.

- a row rerun's "done" line counts what the rerun measured, not the merged table;
- a total the adaptive search grows says by how much and why (the TUI's header, the headless counter);
- the highlighted row carries a symbol (a capture without colour shows it);
- the help screen fits 80×24;
- the engine's info notices do not cover the table (a notice line in the header; toasts at the top).
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rich.text import Text
from textual.containers import VerticalScroll
from textual.coordinate import Coordinate
from textual.widgets._toast import Toast
from tui_fakes import SETTINGS, WORKERS, FakeSweep, FakeSweepFactory, cell, sync, wait_until

from loadertop.core.engine import SweepRequest, TrialCount
from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.events import (
    Event,
    Notice,
    ProbeSample,
    SweepStarted,
    TrialFinished,
    TrialLaunched,
    TrialStarted,
)
from loadertop.core.model.results import SweepResult
from loadertop.faces.headless import Reporter
from loadertop.faces.tui.app import LoadertopApp, make_app
from loadertop.faces.tui.widgets.header import HeaderPane
from loadertop.faces.tui.widgets.help import HelpScreen
from loadertop.faces.tui.widgets.results import POINTER, ResultsTable

FIRST = len(WORKERS)  # the first plan: one trial per worker count; the repeats come on top
OPENING = (  # what the engine says before the first trial (driver.py: ceilings, the dataset, the search's plan)
    Notice("info", "consumer ceiling (batch 32): 5200 samples/s; transport (batch 32): 0w 983 batches/s"),
    Notice("info", "dataset SyntheticDataset, 100000 samples"),
    Notice("info", "search (plan): climb num_workers 0, 1, 2, 4, ... up to 8", None, "plan"),
)


class Growing:
    """The fake as the adaptive search streams it: SweepStarted plans one trial per worker count, the engine's
    opening notices follow, and each repeat is announced by its search Notice (with the trial's index and phase)
    and grows TrialLaunched.total, the plan so far (driver.py: max(len(planned()), index + 1))."""

    def __init__(self, sweep: FakeSweep) -> None:
        self.inner = sweep

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def events(self) -> Iterator[Event]:
        first = len(self.inner.only) if self.inner.only else FIRST
        for event in self.inner.events():
            if isinstance(event, SweepStarted):
                yield replace(event, planned=event.planned[:first])
                yield from OPENING
                continue
            if isinstance(event, TrialLaunched) and event.index >= first:
                said = f"search (repeat): {event.config.label()} again, a finalist"
                yield Notice("info", said, event.index, "repeat")
            if isinstance(event, TrialLaunched | TrialStarted):
                event = replace(event, total=max(first, event.index + 1))
            yield event


class GrowingFactory(FakeSweepFactory):
    def __call__(self, settings: Settings, previous: SweepResult | None, only: Sequence[TrialConfig] | None) -> Any:
        return Growing(super().__call__(settings, previous, only))


def screen_text(app: LoadertopApp) -> str:
    """The screen as `tmux capture-pane -p` shows it: characters only, no colour."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


def header(app: LoadertopApp) -> str:
    return app.query_one(HeaderPane).render().plain


# ---- the total the search grows --------------------------------------------------------------------------------


@pytest.mark.unit
def test_the_count_says_how_much_the_search_added_and_why() -> None:
    count = TrialCount()
    machine = FakeSweepFactory(Path(".")).machine
    sweep = FakeSweep(SETTINGS, None, None, machine=machine, run_dir=Path("."), repeat=(4, 2))
    counters = []
    for event in Growing(sweep).events():
        count.apply(event)
        if isinstance(event, TrialFinished):
            counters.append(count.counter(event.result.index))
    assert counters[:FIRST] == [f"{k}/{FIRST}" for k in range(1, FIRST + 1)]
    assert counters[FIRST:] == ["8/8 (7 planned +1 repeat)", "9/9 (7 planned +2 repeat)"]
    assert count.ran(9) == "7 planned +2 repeat"


@pytest.mark.unit
def test_the_finished_count_adds_up_when_planned_rungs_were_not_needed() -> None:
    # The ladder 0, 1, 2, 4, 8, 16, 32, 64 planned; the search ran 5 of it, refined 3 and repeated 7 (a recorded run
    # ended "done: 15 trials (8 planned +10 repeat)": 8 + 10 is not 15)
    count = TrialCount(planned=8, total=18, added={"refine": 3, "repeat": 7})
    assert count.ran(15) == "5 planned +3 refine +7 repeat; 3 planned not needed"
    assert TrialCount(planned=8, total=8).ran(6) == ""  # nothing added: the plain count says it


def tick(t: float) -> ProbeSample:
    return ProbeSample(None, t, (), None, None, None, None, 0.0, 10_000.0, None, None)


@pytest.mark.unit
def test_a_row_rerun_s_time_left_counts_from_its_trial_s_launch_and_never_reads_zero_while_it_runs() -> None:
    # A row rerun as recorded (one trial, --trial-seconds 3): 2 s of setup before the launch, then 4.6 s of trial.
    # Counted from the sweep's start, its 5 s estimate ran out at t=5 while the trial still ran ("~0:00 left").
    settings = replace(SETTINGS, trial_seconds=3.0)
    config = TrialConfig(2, 32, 2, start_method="fork")
    count = TrialCount()
    count.apply(SweepStarted("run", FakeSweepFactory(Path(".")).machine, settings, (config,), None))
    count.apply(tick(2.0))
    assert count.left() == "~0:05 left"  # the trial's budget and its start-up, not yet begun
    count.apply(TrialLaunched(0, 1, config, 1234))
    count.apply(tick(4.0))
    assert count.left() == "~0:03 left"  # 5 s from its launch at 2 s, 2 s of them gone
    count.apply(tick(7.5))
    assert count.left() == "last trial, over its estimate"  # not "~0:00 left": it is still running


@pytest.mark.unit
def test_the_time_left_after_an_overrunning_trial_counts_the_trials_after_it() -> None:
    count = TrialCount(planned=4, total=4, finished_at=[10.0, 20.0], t=20.0)
    count.apply(TrialLaunched(2, 4, TrialConfig(4, 32, 2, start_method="fork"), 1))
    assert count.left() == "~0:20 left"
    count.apply(tick(35.0))
    assert count.left() == "~0:10 left after this trial"


@pytest.mark.tui
@sync
async def test_the_header_says_why_the_total_grew(tmp_path: Path) -> None:
    factory = GrowingFactory(tmp_path, repeat=(4,), hold_at=FIRST)
    app = make_app(SweepRequest(SETTINGS), sweep_factory=factory)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: bool(factory.sweeps) and factory.sweeps[0].held.is_set())
        await wait_until(pilot, lambda: app.state.current == FIRST)
        app.flush(everything=True)
        assert f"trial 8/8 ({FIRST} planned +1 repeat)" in header(app)
        assert "search (repeat): w=4" in header(app)  # the decision that added it, on the notice line
        factory.sweeps[0].release()
        await wait_until(pilot, lambda: app.state.phase == "finished")
        app.flush(everything=True)
        assert f"done: 8 trials ({FIRST} planned +1 repeat)" in header(app)


@pytest.mark.tui
def test_the_headless_counter_says_why_the_total_grew(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    reporter = Reporter(out, err)
    sweep = FakeSweep(SETTINGS, None, None, machine=FakeSweepFactory(tmp_path).machine, run_dir=tmp_path, repeat=(4,))
    for event in Growing(sweep).events():
        reporter.handle(event)
    lines = err.getvalue().splitlines()
    assert f"loadertop: {FIRST} trials planned for synthetic; run folder {tmp_path}" in lines
    assert any(line.startswith(f"[{FIRST}/{FIRST}] ") for line in lines)
    assert any(line.startswith(f"[8/8 ({FIRST} planned +1 repeat)] w=4") for line in lines)


# ---- a row rerun -----------------------------------------------------------------------------------------------


@pytest.mark.tui
@sync
async def test_a_row_rerun_says_what_it_measured(tmp_path: Path) -> None:
    factory = FakeSweepFactory(tmp_path)
    app = make_app(SweepRequest(SETTINGS), sweep_factory=factory)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: app.state.phase == "finished")
        assert "done: 7 trials" in header(app)
        app.query_one(ResultsTable).move_cursor(row=2)
        await pilot.press("enter")
        await wait_until(pilot, lambda: len(factory.sweeps) == 2 and app.state.phase == "finished")
        app.flush(everything=True)
        line = header(app).splitlines()[1]
        assert "row rerun done: w=2 bs=32 pf=2 fork measured again, 1 trial in" in line
        assert "7 trials" not in line  # the merged table has 7 rows; the rerun measured one


# ---- the highlighted row, without colour ---------------------------------------------------------------------


@pytest.mark.tui
@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
@sync
async def test_the_highlighted_row_has_a_symbol(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: tuple[int, int]
) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    factory = FakeSweepFactory(tmp_path)
    app = make_app(SweepRequest(SETTINGS), sweep_factory=factory)
    async with app.run_test(size=size) as pilot:
        await wait_until(pilot, lambda: app.state.phase == "finished")
        await pilot.pause()
        table = app.query_one(ResultsTable)
        pointed = [i for i in range(table.row_count) if cell(table, i, "cursor") == POINTER]
        assert pointed == [table.cursor_row] == [4]  # the recommendation, highlighted at the end
        rows = [line for line in screen_text(app).splitlines() if POINTER in line]
        assert len(rows) == 1 and "★◆" in rows[0] and " 4 " in rows[0]
        await pilot.press("down", "down")
        pointed = [i for i in range(table.row_count) if cell(table, i, "cursor") == POINTER]
        assert pointed == [6]
        rows = [line for line in screen_text(app).splitlines() if POINTER in line]
        assert len(rows) == 1 and "failed" in rows[0]


# ---- the help screen at 80×24 -----------------------------------------------------------------------------------


@pytest.mark.tui
@sync
async def test_the_help_screen_fits_80x24(tmp_path: Path) -> None:
    app = make_app(SweepRequest(SETTINGS), sweep_factory=FakeSweepFactory(tmp_path))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: app.state.phase == "finished")
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen))
        await pilot.pause()
        scroll = app.screen.query_one(VerticalScroll)
        assert scroll.max_scroll_y == 0  # nothing below the fold
        text = screen_text(app)
        for binding in app.BINDINGS:
            assert binding.tooltip and binding.tooltip in text  # type: ignore[union-attr]
        for pane in ("Header", "GPU", "Memory", "Throughput", "Table"):
            assert f"│ {pane} " in text
        assert "? or q closes." in text and "docs/tui.md" in text
        assert sum(line.startswith(("╭", "╰")) for line in text.splitlines()) == 2  # both of its borders on screen


# ---- notices at the start -----------------------------------------------------------------------------------


@pytest.mark.tui
@sync
async def test_notices_at_the_start_do_not_cover_the_table(tmp_path: Path) -> None:
    factory = GrowingFactory(tmp_path, hold_at=0)
    app = make_app(SweepRequest(SETTINGS), sweep_factory=factory)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:  # run_test shows no toasts by default
        await wait_until(pilot, lambda: bool(factory.sweeps) and factory.sweeps[0].held.is_set())
        await wait_until(pilot, lambda: app.state.current == 0)
        app.flush(everything=True)
        await pilot.pause()
        assert not app.screen.query(Toast)  # the engine's info notices are not toasts
        assert not [m for m in app.messages if m[1] in {n.message for n in OPENING}]
        assert "· search (plan): climb num_workers" in header(app)  # the notice line: the latest one
        assert len(header(app).splitlines()[-1]) <= 80 - 2  # one line, cut to the width
        app.notify("a warning", severity="warning")  # a toast that does come (warnings, what a key did) ...
        await wait_until(pilot, lambda: bool(app.screen.query(Toast)))
        table = app.query_one(ResultsTable).region
        toasts = list(app.screen.query(Toast))
        assert toasts and all(not toast.region.overlaps(table) for toast in toasts)  # ... is not over the table
        factory.sweeps[0].release()


# ---- the status column at 120 columns -------------------------------------------------------------------------


class UnneededRungs(FakeSweepFactory):
    """Sweeps whose plan lists two rungs the search then does not run: their rows end "not needed"."""

    def __call__(self, settings: Settings, previous: SweepResult | None, only: Sequence[TrialConfig] | None) -> Any:
        sweep = super().__call__(settings, previous, only)
        events = sweep.events
        extra = (TrialConfig(16, 32, 2, start_method="fork"), TrialConfig(32, 32, 2, start_method="fork"))

        def planned_more() -> Iterator[Event]:
            for event in events():
                yield replace(event, planned=(*event.planned, *extra)) if isinstance(event, SweepStarted) else event

        sweep.events = planned_more
        return sweep


@pytest.mark.tui
@sync
async def test_every_status_is_whole_at_120_columns_with_and_without_a_previous_run(tmp_path: Path) -> None:
    factory = UnneededRungs(tmp_path)
    app = make_app(SweepRequest(SETTINGS), sweep_factory=factory)
    async with app.run_test(size=(120, 40)) as pilot:
        for sweeps in (1, 2):  # the second, after r, has a "vs prev" column beside the status
            await wait_until(pilot, lambda n=sweeps: len(factory.sweeps) == n and app.state.phase == "finished")
            table = app.query_one(ResultsTable)
            statuses = [cell(table, i, "status") for i in range(table.row_count)]
            assert statuses.count("not needed") == 2 and any(s.startswith("failed: ") for s in statuses)
            # The screen is painted after the table's last update: wait for it (a loaded machine painted it later
            # than one pause); a cut status never appears, and the wait fails with what was on screen
            try:
                await wait_until(pilot, lambda s=statuses: all(status in screen_text(app) for status in s), 5)
            except AssertionError:
                cut = [s for s in statuses if s not in screen_text(app)]
                raise AssertionError(f"status cut at 120 columns: {cut}\n{screen_text(app)}") from None
            text = screen_text(app)
            assert ("vs prev" in text) == (sweeps == 2)  # the report's name for the column, shown once there is one
            if sweeps == 1:
                await pilot.press("r")


@pytest.mark.tui
@sync
async def test_the_columns_fit_their_cells_as_soon_as_the_table_is_filled(tmp_path: Path) -> None:
    # The DataTable measures its columns only when the app is next idle; a busy machine kept it from idling for
    # seconds, the columns cut at their labels' widths. The table sets them from its cells when it fills.
    factory = UnneededRungs(tmp_path)
    app = make_app(SweepRequest(SETTINGS), sweep_factory=factory)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: len(factory.sweeps) == 1 and app.state.phase == "finished")
        table = app.query_one(ResultsTable)
        table.clear(columns=True)  # as when a column comes or goes (vs prev, epoch): laid out anew
        table.update_view()  # no await: nothing idles before the check
        for column in table.ordered_columns:
            at = table.get_column_index(column.key)
            cells = [table.get_cell_at(Coordinate(i, at)) for i in range(table.row_count)]
            widest = max(c.cell_len if isinstance(c, Text) else len(str(c)) for c in cells)
            assert column.get_render_width(table) - 2 * table.cell_padding >= widest, (column.key, widest)
