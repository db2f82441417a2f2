"""The attach view (Pilot) against fake sessions: what the panes show, the picker, the keys, the job's end.

Fakes only for the session and the job list (the engine's attach side is tested on real jobs in its own tests).
SVG snapshots: `pytest tests/test_tui_attach.py --snapshot-update`, then look at the SVGs before committing them.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import OptionList
from tui_fakes import sync, wait_until

import loadertop.core.engine as engine
from loadertop.core.engine.live import fold_ranks
from loadertop.core.model.config import UsageError
from loadertop.core.model.jobs import JobInfo
from loadertop.core.model.live import LiveSnapshot
from loadertop.core.model.live_protocol import LIVE_PROTOCOL_VERSION, JobHello
from loadertop.faces.tui import run_attach
from loadertop.faces.tui.attach.app import PANES_HELP, AttachApp
from loadertop.faces.tui.attach.chart import LiveThroughputChart
from loadertop.faces.tui.attach.demo import DEMO_PID, LEAK, FakeSession, demo_snapshot, demo_stream
from loadertop.faces.tui.attach.picker import PickerScreen
from loadertop.faces.tui.attach.state import LiveState
from loadertop.faces.tui.attach.widgets import AttachHeader, GpuLivePane, MessagesPane, RanksPane, WorkersPane
from loadertop.faces.tui.widgets.help import HelpScreen

pytestmark = pytest.mark.tui

SIZE = (120, 40)
SnapCompare = Callable[..., bool]


def text(app: AttachApp, pane: type[AttachHeader | WorkersPane | GpuLivePane | MessagesPane]) -> str:
    return app.query_one(pane).render().plain


def chart_text(chart: LiveThroughputChart) -> str:
    rendered = chart.render()
    return rendered.plain if hasattr(rendered, "plain") else str(rendered)


def job(pid: int, argv: tuple[str, ...], started: float) -> JobInfo:
    hello = JobHello(LIVE_PROTOCOL_VERSION, pid, argv, started, "box", "0.1")
    return JobInfo(pid=pid, folder=Path(f"/tmp/lt/{pid}"), hello=hello)


def app_with(session: FakeSession, **kwargs: Any) -> AttachApp:
    return AttachApp(opener=lambda target: session, jobs=list, interval=2.0, session=session, **kwargs)


class Opener:
    """open_session's stand-in: a FakeSession per pid it knows, an AttachError-like UsageError otherwise."""

    def __init__(self, sessions: dict[int, FakeSession]) -> None:
        self.sessions = sessions
        self.asked: list[int | str] = []

    def __call__(self, target: int | str) -> FakeSession:
        self.asked.append(target)
        if target not in self.sessions:
            raise UsageError(f"pid {target}: no such process")
        return self.sessions[int(target)]


@sync
async def test_the_panes_show_the_numbers_of_the_snapshots() -> None:
    snaps = demo_stream(12)
    session = FakeSession(snaps)
    app = app_with(session)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.count == 12)
        last = snaps[-1]
        header = text(app, AttachHeader)
        assert f"pid {DEMO_PID}" in header and "watched" in header and "every 2 s" in header
        assert session.command in header and f"{engine.clock(last.t)} elapsed" in header
        assert f"{engine.rate(last.samples_per_s)} samples/s" in header and f"epoch {last.epoch}" in header
        workers = text(app, WorkersPane)
        for worker in last.workers:
            assert engine.mb(worker.uss_mb) in workers
            assert f"{worker.uss_slope_mb_per_min:+.1f}" in workers
        assert f"total PSS {engine.mb(last.total_pss_mb)}" in workers
        assert f"{last.gpu_util:.0f}%" in text(app, GpuLivePane)
        chart = app.query_one(LiveThroughputChart)
        assert engine.rate(last.samples_per_s) in str(chart.border_title)
        await pilot.press("q")
    assert session.close_calls >= 1 and session.closed.is_set()


def test_the_state_keeps_a_bounded_history_and_the_epoch_boundaries() -> None:
    state = LiveState()
    for i in range(700):
        state.apply(demo_snapshot(i))
    assert len(state.t) == 600 and state.t[-1] == 1400.0
    # One boundary every 20 s; those older than the history drop off with it.
    assert list(state.epoch_ends)[-3:] == [1360.0, 1380.0, 1400.0]
    assert [w.label for w in state.current_workers()] == ["w0", "w1", "w2", "w3"]


@sync
async def test_epoch_boundaries_are_marked_on_the_chart() -> None:
    session = FakeSession(demo_stream(25))  # boundaries at 20 s and 40 s
    app = app_with(session)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.count == 25)
        assert list(app.state.epoch_ends) == [20.0, 40.0]
        chart = app.query_one(LiveThroughputChart)
        assert "| epoch end" in str(chart.border_title)
        assert chart.marks == [20.0, 40.0]
        # The frame draws one │ each side; each boundary one more, down the plot area (where no curve covers it).
        rows = [line for line in chart_text(chart).splitlines() if "┤" not in line and "├" not in line]
        assert sum(line.count("│") >= 3 for line in rows) >= 10 and any(line.count("│") == 4 for line in rows)
        assert "epoch 1: 400 batches" in text(app, MessagesPane)
        await pilot.press("q")


@sync
async def test_a_leak_warning_shows_first_and_flags_its_worker() -> None:
    snaps = demo_stream(12)  # the leak warning starts at interval 10
    session = FakeSession(snaps)
    app = app_with(session)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.count == 12)
        messages = text(app, MessagesPane)
        assert messages.startswith(f"⚠ {LEAK}")  # whole (the pane wraps it), and first
        assert "leak" in str(app.query_one(MessagesPane).border_title)
        flagged = [line for line in text(app, WorkersPane).splitlines() if "⚠" in line]
        assert len(flagged) == 1 and flagged[0].lstrip().startswith("w2")
        await pilot.press("q")


@sync
async def test_no_warning_before_the_engine_gives_one() -> None:
    session = FakeSession(demo_stream(6))
    app = app_with(session)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.count == 6)
        assert "⚠" not in text(app, MessagesPane) + text(app, WorkersPane)
        await pilot.press("q")


@sync
async def test_the_warnings_pane_says_a_live_jobs_stages_are_not_measured_and_how_to_get_them() -> None:
    app = app_with(FakeSession(demo_stream(3)))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.count == 3)
        said = " ".join(text(app, MessagesPane).split())
        assert "stages: not measured on a live job" in said and "loadertop stages --dataset SPEC" in said, said
        await pilot.press("q")


@sync
async def test_the_job_ending_is_shown_and_the_app_stays_up() -> None:
    snaps = demo_stream(8, ended="the job exited (exit code 0)")
    session = FakeSession(snaps, hold=False)  # the stream returns after the last snapshot, as the engine's does
    app = app_with(session)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: "the job ended: the job exited (exit code 0)" in text(app, AttachHeader))
        header = text(app, AttachHeader)
        assert f"{engine.rate(snaps[-1].samples_per_s)} samples/s" in header  # the last view is kept
        assert ("warning", "the job ended: the job exited (exit code 0)") in app.messages
        assert app.is_running
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        assert app.screen.panes == list(PANES_HELP)  # attach's panes, not the sweep's
        await pilot.press("question_mark")
        await pilot.press("q")
    assert app.return_code == 0


@sync
async def test_a_stream_that_raises_is_said_and_the_app_stays_up() -> None:
    class Broken(FakeSession):
        def snapshots(self):  # type: ignore[override]
            yield demo_snapshot(0)
            raise ConnectionResetError("the job's socket closed")

    session = Broken([])
    app = app_with(session)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: "the view stopped: the job's socket closed" in text(app, AttachHeader))
        assert app.is_running
        await pilot.press("q")
    assert app.return_code == 1 and session.close_calls >= 1


@sync
async def test_json_lines_are_appended_per_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "live.jsonl"
    path.write_text('{"earlier": true}\n')
    snaps = demo_stream(5)
    app = app_with(FakeSession(snaps), json_path=path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.count == 5)
        await pilot.press("q")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0] == {"earlier": True}
    assert lines[1:] == [json.loads(json.dumps(s.to_dict())) for s in snaps]


@sync
async def test_the_picker_lists_the_jobs_and_enter_attaches_to_the_chosen_one() -> None:
    now = time.time()
    jobs = [job(301, ("python", "train.py"), now - 30), job(302, ("python", "eval.py", "--fast"), now - 300)]
    chosen = FakeSession(demo_stream(3), pid=302, command="python eval.py --fast")
    opener = Opener({301: FakeSession([], pid=301, command="python train.py"), 302: chosen})
    app = AttachApp(opener=opener, jobs=lambda: jobs, interval=5.0)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, PickerScreen))
        options = app.screen.query_one(OptionList)
        rows = [options.get_option_at_index(i).prompt for i in range(options.option_count)]
        assert "301" in str(rows[0]) and "python train.py" in str(rows[0])
        # started 30 s before `now`: the row says how long ago when it was drawn, a moment (on a busy CI, seconds) later
        ago = re.search(r"\((\d+):(\d\d) ago\)", str(rows[0]))
        assert ago is not None, rows[0]
        assert 30 <= int(ago[1]) * 60 + int(ago[2]) <= 30 + round(time.time() - now) + 1, rows[0]
        assert "302" in str(rows[1]) and "python eval.py --fast" in str(rows[1])
        await pilot.press("down", "enter")
        await wait_until(pilot, lambda: app.state.count == 3)
        assert opener.asked == [302]
        header = text(app, AttachHeader)
        assert "pid 302" in header and "every 5 s" in header and "python eval.py --fast" in header
        # p detaches (the session is closed) and shows the list again; q there quits
        await pilot.press("p")
        await wait_until(pilot, lambda: isinstance(app.screen, PickerScreen))
        assert chosen.closed.is_set()
        # another job: the view starts over for it
        await pilot.press("enter")
        await wait_until(pilot, lambda: opener.asked == [302, 301] and "pid 301" in text(app, AttachHeader))
        assert app.state.count == 0 and "waiting for the first interval" in text(app, AttachHeader)
        await pilot.press("q")
    assert not app.is_running and opener.sessions[301].closed.is_set()


@sync
async def test_a_job_that_cannot_be_attached_to_is_said_on_the_picker() -> None:
    jobs = [job(303, ("python", "gone.py"), time.time())]
    app = AttachApp(opener=Opener({}), jobs=lambda: jobs, interval=2.0)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, PickerScreen))
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, PickerScreen) and app.screen.error is not None)
        assert app.screen.error == "pid 303: no such process"
        await pilot.press("q")


@sync
async def test_an_empty_picker_says_how_to_make_a_job_watchable() -> None:
    app = AttachApp(opener=Opener({}), jobs=list, interval=2.0)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, PickerScreen))
        screen = app.screen
        assert screen.has_class("-empty")
        shown = str(screen.query_one("#picker-empty").render())
        assert "No watchable job" in shown and "for batch in loadertop.watch(loader):" in shown
        await pilot.press("q")
    assert not app.is_running


def test_run_attach_says_an_attach_error_in_one_line_and_returns_2(monkeypatch: pytest.MonkeyPatch) -> None:
    class AttachError(UsageError):
        pass

    def refuse(target: int | str, *, interval: float = 2.0) -> FakeSession:
        raise AttachError(f"pid {target}: not a Python process with DataLoader workers")

    # raising=False: the engine's attach side is written in parallel; after the merge these names exist.
    monkeypatch.setattr(engine, "AttachError", AttachError, raising=False)
    monkeypatch.setattr(engine, "open_session", refuse, raising=False)
    monkeypatch.setattr(engine, "find_jobs", list, raising=False)
    err: list[str] = []

    class Err:
        def write(self, s: str) -> None:
            err.append(s)

    assert run_attach(1, interval=2.0, json_path=None, err=Err()) == 2  # type: ignore[arg-type]
    assert "".join(err) == "loadertop: error: pid 1: not a Python process with DataLoader workers\n"


def settled(count: int) -> Callable[[Pilot[Any]], Any]:
    async def run_before(pilot: Pilot[Any]) -> None:
        app = pilot.app
        assert isinstance(app, AttachApp)
        await wait_until(pilot, lambda: app.state.count == count)
        app.clear_notifications()
        app.flush(everything=True)
        await pilot.pause()

    return run_before


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_snapshot_watched_job_with_a_leak(snap_compare: SnapCompare, size: tuple[int, int]) -> None:
    assert snap_compare(app_with(FakeSession(demo_stream(40))), terminal_size=size, run_before=settled(40))


def test_snapshot_unwatched_job_that_ended(snap_compare: SnapCompare) -> None:
    snaps = [
        LiveSnapshot(
            **{
                **demo_snapshot(i).__dict__,
                "watched": False,
                "samples_per_s": None,
                "batches_per_s": None,
                "stall_fraction": None,
                "wait_ms_p95": None,
                "step_ms": None,
                "epoch": None,
                "epoch_ends": (),
                "notes": (),
                "warnings": (),
                "gpu_util": None,
                "gpu_unavailable": "unavailable: NVML library not found",
                "missing": ("rates, stalls and epochs: the job does not run loadertop.watch()",),
                "ended": "the job exited" if i == 9 else None,
            }
        )
        for i in range(10)
    ]
    session = FakeSession(snaps, watched=False, hold=False)
    assert snap_compare(app_with(session), terminal_size=SIZE, run_before=settled(10))


@sync
async def test_ctrl_c_under_run_goes_to_the_job_and_the_snapshots_to_the_sink() -> None:
    """`loadertop run`'s view: Ctrl-C is the job's (the terminal's keys are the app's), and each snapshot is also
    handed to the --openmetrics sink."""
    sent: list[str] = []
    sunk: list[float] = []
    session = FakeSession(demo_stream(3))
    app = app_with(session, interrupt=lambda: sent.append("SIGINT"), sink=lambda snap: sunk.append(snap.t))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.count == 3)
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert sent == ["SIGINT"] and app.is_running
        await pilot.press("q")
    assert sunk == [s.t for s in demo_stream(3)]


@sync
async def test_a_launchers_ranks_show_in_their_pane_with_the_slowest_named() -> None:
    snaps = demo_stream(3)
    rank0 = replace(snaps[-1], rank="0", wait_ms_p95=2.0, wait_ms_mean=1.0)
    rank1 = replace(snaps[-1], rank="1", pid=7, wait_ms_p95=40.0, wait_ms_mean=20.0)
    view = fold_ranks(DEMO_PID, [rank0, rank1], {})
    session = FakeSession([*snaps[:-1], replace(rank0, ranks=view)])
    app = app_with(session)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.count == 3)
        pane = app.query_one(RanksPane)
        assert pane.display and "slowest: rank 1" in str(pane.border_title)
        rows = pane.render().plain.splitlines()
        assert "←" in next(r for r in rows if r.lstrip().startswith("1 "))
        assert view.pacing[:30] in pane.render().plain
        assert "←" not in next(r for r in rows if r.lstrip().startswith("0 "))
        await pilot.press("q")


@sync
async def test_one_job_has_no_ranks_pane() -> None:
    session = FakeSession(demo_stream(2))
    app = app_with(session)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.state.count == 2)
        assert not app.query_one(RanksPane).display
        await pilot.press("q")
