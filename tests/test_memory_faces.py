"""One live trial's memory through both faces: a real sweep (real DataLoader workers whose USS climbs), its event
stream drawn by the TUI's memory pane and printed by the headless reporter. Both render the engine's figures
(engine/verdict/memory.py), so they must agree: the same workers, USS, slopes and ⚠, live and in the result."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tui_fakes import sync, wait_until

from loadertop.core.engine import Sweep, SweepRequest, mb, num, slope
from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.events import Event, ProbeSample, WorkerUss
from loadertop.core.model.results import SweepResult
from loadertop.faces.headless import Reporter
from loadertop.faces.tui.app import make_app
from loadertop.faces.tui.widgets.memory import MemoryPane

GROWING = f"{Path(__file__).parent / 'data' / 'growing.py'}:build"
# Enough blocks for a window of ~7 s: USS is read every 2 s, and a ⚠ takes 3 steps up.
SETTINGS = Settings(dataset=GROWING, workers=(2,), trial_seconds=9.0, min_blocks=24, search="grid")


class Teed:
    """The real Sweep, its events also handed to the headless reporter: the two faces see one stream."""

    def __init__(self, sweep: Sweep, reporter: Reporter) -> None:
        self.sweep, self.reporter = sweep, reporter
        self.ticks: list[ProbeSample] = []

    def events(self) -> Iterator[Event]:
        for event in self.sweep.events():
            self.reporter.handle(event)
            if isinstance(event, ProbeSample) and event.uss is not None:
                self.ticks.append(event)
            yield event

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sweep, name)


@sync
async def test_the_pane_and_headless_render_the_same_memory(runs: Path, no_leftovers: None) -> None:
    out, err = io.StringIO(), io.StringIO()
    reporter = Reporter(out, err)
    teed: list[Teed] = []

    def factory(settings: Settings, previous: SweepResult | None, only: list[TrialConfig] | None) -> Teed:
        teed.append(Teed(Sweep(settings, out_dir=runs, previous=previous, only=only), reporter))
        return teed[0]

    app = make_app(SweepRequest(SETTINGS), sweep_factory=factory)  # type: ignore[arg-type]
    async with app.run_test(size=(120, 40)) as pilot:

        def fitted() -> bool:  # the running trial's tick with every worker's slope fitted
            live = app.state.live
            figures = live.figures if live is not None else None
            return (
                figures is not None
                and len(figures.workers) == 2
                and all(w.slope_mb_per_min is not None for w in figures.workers)
            )

        await wait_until(pilot, fitted, timeout=180)
        app.flush(everything=True)
        live = app.state.live
        assert live is not None and live.figures is not None
        figures = live.figures  # what the engine said at this tick, drawn now
        pane = app.query_one(MemoryPane).render().plain.splitlines()
        rows = [line for line in pane if line.lstrip().startswith("w")]
        assert len(rows) == 2  # the trial's own two workers, no others
        for row, worker in zip(rows, figures.workers, strict=True):
            assert mb(worker.uss_mb) in row and slope(worker.slope_mb_per_min) in row
            assert ("⚠" in row) == worker.climbing

        await wait_until(pilot, lambda: app.state.phase in ("finished", "crashed"), timeout=180)
        assert app.state.phase == "finished", app.state.error
        result = app.state.result
        assert result is not None
        (trial,) = result.trials
        app.flush(everything=True)
        pane_done = app.query_one(MemoryPane).render().plain
        await pilot.press("q")

    # The result: every worker climbs ~48 KB per sample, and the engine says so once, for every face.
    assert trial.status == "ok" and len(trial.worker_uss_mb) == 2
    assert all(trial.worker_uss_climbing) and trial.leak is not None
    assert all(s is not None and s > 5.0 for s in trial.worker_uss_slope_mb_per_min)
    # Each worker's last live figures are its result's: the same rule over the same readings. (Its last tick, not
    # the trial's: the workers exit after the trial's Finished, and a tick taken before the driver read it shows
    # none, as between epochs.)
    last: dict[int, WorkerUss] = {}
    for tick in teed[0].ticks:
        if tick.index == trial.index and tick.uss is not None:
            last |= {w.pid: w for w in tick.uss.workers}
    live = sorted((w.slope_mb_per_min or 0.0, w.climbing) for w in last.values())
    assert live == sorted(zip(trial.worker_uss_slope_mb_per_min, trial.worker_uss_climbing, strict=True))
    # The TUI, finished: the result's figures, with the ⚠.
    for uss, growth in zip(trial.worker_uss_mb, trial.worker_uss_slope_mb_per_min, strict=True):
        assert mb(uss) in pane_done and slope(growth) in pane_done
    assert "⚠" in pane_done and f"PSS {mb(trial.total_pss_mb)}" in pane_done
    # Headless: the same ⚠ sentence, and the table's USS and PSS are the same figures.
    assert f"⚠ memory: {trial.leak}" in " ".join(err.getvalue().split())
    table = out.getvalue()
    assert num(max(trial.worker_uss_mb)) in table and num(trial.total_pss_mb) in table
    # The JSON: the same verdict, per worker.
    saved = json.loads((Path(result.run_dir or "") / "result.json").read_text())["trials"][0]
    assert saved["leak"] == trial.leak and saved["worker_uss_climbing"] == [True, True]
    assert saved["parked_beside"] == 0
