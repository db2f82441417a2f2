"""SVG snapshots at 80×24 and 120×40, mid-sweep and after, from the deterministic fake.

Update with `pytest tests/test_tui_snapshots.py --snapshot-update`, then look at the SVGs in
tests/__snapshots__/ before committing them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from tui_fakes import GPU_MACHINE, NO_GPU_MACHINE, SETTINGS, FakeSweepFactory, wait_until

from loadertop.core.engine import SweepRequest
from loadertop.core.model.results import MachineInfo
from loadertop.faces.tui.app import LoadertopApp, make_app

pytestmark = pytest.mark.tui

SnapCompare = Callable[..., bool]
RUNS = Path("/tmp/loadertop-snapshots")  # a fixed path: nothing on screen shows it, but keep it stable anyway


def app_and_waiter(
    machine: MachineInfo, hold_at: int | None, *, reruns: int = 0, theme: str | None = None
) -> tuple[LoadertopApp, Callable[[Pilot[Any]], Awaitable[None]]]:
    factory = FakeSweepFactory(RUNS, machine=machine, hold_at=hold_at)
    app = make_app(SweepRequest(SETTINGS), sweep_factory=factory, theme=theme)

    async def settle(pilot: Pilot[Any]) -> None:
        if hold_at is None:
            for n in range(reruns + 1):
                await wait_until(pilot, lambda n=n: len(factory.sweeps) == n + 1 and app.state.phase == "finished")
                if n < reruns:
                    await pilot.press("r")
        else:
            sweep = lambda: factory.sweeps[0]  # noqa: E731
            await wait_until(pilot, lambda: bool(factory.sweeps) and sweep().held.is_set())
            await wait_until(pilot, lambda: app.state.live is not None and app.state.live.index == hold_at)
        app.clear_notifications()
        app.flush(everything=True)
        await pilot.pause()

    return app, settle


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_mid_sweep_without_gpu(snap_compare: SnapCompare, size: tuple[int, int]) -> None:
    app, settle = app_and_waiter(NO_GPU_MACHINE, hold_at=4)
    assert snap_compare(app, terminal_size=size, run_before=settle)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_finished_without_gpu(snap_compare: SnapCompare, size: tuple[int, int]) -> None:
    app, settle = app_and_waiter(NO_GPU_MACHINE, hold_at=None)
    assert snap_compare(app, terminal_size=size, run_before=settle)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_mid_sweep_with_two_gpus(snap_compare: SnapCompare, size: tuple[int, int]) -> None:
    app, settle = app_and_waiter(GPU_MACHINE, hold_at=5)
    assert snap_compare(app, terminal_size=size, run_before=settle)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_finished_with_two_gpus(snap_compare: SnapCompare, size: tuple[int, int]) -> None:
    app, settle = app_and_waiter(GPU_MACHINE, hold_at=None)
    assert snap_compare(app, terminal_size=size, run_before=settle)


def test_after_a_rerun_the_table_shows_the_change(snap_compare: SnapCompare) -> None:
    app, settle = app_and_waiter(NO_GPU_MACHINE, hold_at=None, reruns=1)
    assert snap_compare(app, terminal_size=(120, 40), run_before=settle)


def test_light_theme(snap_compare: SnapCompare) -> None:
    app, settle = app_and_waiter(GPU_MACHINE, hold_at=None, theme="light")
    assert snap_compare(app, terminal_size=(120, 40), run_before=settle)


def test_help_screen(snap_compare: SnapCompare) -> None:
    app, settle = app_and_waiter(NO_GPU_MACHINE, hold_at=None)
    assert snap_compare(app, terminal_size=(80, 24), run_before=settle, press=["question_mark"])


def test_terminal_too_small(snap_compare: SnapCompare) -> None:
    app, settle = app_and_waiter(NO_GPU_MACHINE, hold_at=None)
    assert snap_compare(app, terminal_size=(70, 20), run_before=settle)
