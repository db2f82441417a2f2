"""Node 0's TUI on a many-node sweep: the real app (Pilot) as node 0 in this process, a real agent as node 1."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from nodes_procs import ARGS, Nodes, assert_nothing_left, pieces
from tui_fakes import sync, wait_until

import loadertop.core.nodes as nodes_package
from loadertop.core.engine import Launch, SweepRequest
from loadertop.core.engine.nodes import OneNode
from loadertop.core.model.config import Settings
from loadertop.core.nodes import StoreLink, join_nodes
from loadertop.faces.cli import build_parser, settings_from_args
from loadertop.faces.tui.app import make_app
from loadertop.faces.tui.sweep_api import engine_factory


@pytest.fixture
def nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Nodes]:
    # Node 0 is this test process: it must not arm "die with my parent" on pytest itself.
    monkeypatch.setattr(nodes_package, "end_with_launcher", lambda: None)
    launched = Nodes(tmp_path)
    yield launched
    launched.kill_all()


def join_as_node_0(nodes: Nodes, args: list[str]) -> tuple[Settings, StoreLink]:
    settings = settings_from_args(build_parser().parse_args(args))
    return join_nodes(settings, Launch(0, 2, "127.0.0.1", nodes.port, "torchrun"))


@sync
async def test_q_on_node_0s_tui_stops_every_node(nodes: Nodes, runs: Path) -> None:
    args = [*ARGS, "--trial-seconds", "30"]
    nodes.bare(1, args, pieces(nodes, 1))
    settings, link = join_as_node_0(nodes, args)
    assert [n.node_rank for n in link.nodes()] == [0, 1]
    app = make_app(SweepRequest(settings, out_dir=runs, nodes=link))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: app.state.live is not None and len(app.state.live.batches_per_s) >= 1, 120)
        pressed = time.monotonic()
        await pilot.press("q")
    assert app.return_code == 130
    assert nodes.wait(1, 20) == 130  # node 1 was told to stop
    assert time.monotonic() - pressed < 8
    assert "node 0 (" in nodes.err(1) and "stopped the sweep" in nodes.err(1)
    assert_nothing_left(nodes)


@sync
async def test_node_1_lost_fails_the_trial_in_node_0s_tui(nodes: Nodes, runs: Path) -> None:
    args = [*ARGS, "--trial-seconds", "30"]
    nodes.bare(1, args, pieces(nodes, 1))
    settings, link = join_as_node_0(nodes, args)
    app = make_app(SweepRequest(settings, out_dir=runs, nodes=link))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: app.state.live is not None and len(app.state.live.batches_per_s) >= 1, 120)
        killed = time.monotonic()
        nodes.procs[1].kill()  # node 1's agent (its runner and trial die with it)
        await wait_until(pilot, lambda: app.state.phase in ("finished", "crashed"), timeout=20)
        assert time.monotonic() - killed < 8
        result = app.state.result
        assert result is not None and result.interrupted
        assert [t.status for t in result.trials] == ["failed"]
        assert "node 1 (" in (result.trials[0].error or "") and "lost" in (result.trials[0].error or "")
        await pilot.press("q")
    assert link.exit_code == 1  # what the CLI exits with after the app's 0
    assert_nothing_left(nodes)


@pytest.mark.tui
def test_a_rerun_after_the_many_node_sweep_measures_this_node_whole(runs: Path) -> None:
    link = object()  # only handed on: the first sweep takes it, a later `r` runs without it
    make = engine_factory(SweepRequest(Settings(), out_dir=runs, nodes=link))  # type: ignore[arg-type]
    two = Settings(workers=(0,), nodes=2, node_rank=0)
    first, rerun = make(two, None, None), make(two, None, None)
    assert first.settings.nodes == 2 and first._nodes is link  # type: ignore[attr-defined]
    assert rerun.settings.nodes == 1 and isinstance(rerun._nodes, OneNode)  # type: ignore[attr-defined]
