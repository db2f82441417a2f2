"""The real app on the real engine: a tiny sweep of the built-in workload, through `run_test`."""

from __future__ import annotations

import time
from pathlib import Path

import psutil
import pytest
from tui_fakes import sync, wait_until

from loadertop.core.engine import SweepRequest
from loadertop.core.model.config import Settings
from loadertop.faces.tui.app import make_app
from loadertop.faces.tui.widgets.header import HeaderPane
from loadertop.faces.tui.widgets.results import ResultsTable

TINY = Settings(dataset="synthetic:cpu_ms=0.2,io_ms=4", workers=(0, 1), trial_seconds=3.0)


@sync
async def test_a_real_two_trial_sweep(runs: Path, no_leftovers: None) -> None:
    app = make_app(SweepRequest(TINY, out_dir=runs))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: app.state.phase in ("finished", "crashed"), timeout=120)
        assert app.state.phase == "finished", app.state.error
        result = app.state.result
        assert result is not None and [t.config.num_workers for t in result.trials] == [0, 1]
        assert all(t.status == "ok" and t.samples_per_s for t in result.trials)
        table = app.query_one(ResultsTable)
        assert table.row_count == 2
        assert result.recommendation is not None
        app.flush(everything=True)
        header = app.query_one(HeaderPane).render().plain
        assert result.recommendation.snippet in header
        assert app.state.traces  # the live panes got samples
        trace = app.state.trace(result.trials[1].index)
        assert trace is not None
        assert trace.batches_per_s and trace.worker_pids
        await pilot.press("e")
        assert all(p.exists() for p in app.exports)
        assert app.exports[0].parent == Path(result.run_dir or "")
        await pilot.press("q")
    assert app.return_code == 0


@sync
async def test_q_mid_trial_leaves_no_process_behind(runs: Path, no_leftovers: None) -> None:
    app = make_app(SweepRequest(Settings(workers=(2,), trial_seconds=30.0), out_dir=runs))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: app.state.live is not None and len(app.state.live.batches_per_s) >= 1, 120)
        workers = [psutil.Process(pid) for pid in app.state.live.worker_pids]  # type: ignore[union-attr]
        started = time.monotonic()
        await pilot.press("q")
    _, alive = psutil.wait_procs(workers, timeout=2.0)
    assert not alive
    assert time.monotonic() - started < 5.0
    assert app.return_code == 130


@pytest.mark.tui
def test_make_app_builds_the_engine_factory_lazily(runs: Path) -> None:
    app = make_app(SweepRequest(TINY, out_dir=runs))
    assert callable(app.sweep_factory) and app.sweeps == []
