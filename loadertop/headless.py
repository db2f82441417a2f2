"""The headless face: progress on stderr, the results table and recommendation on stdout, exports on disk.

It consumes the same event stream as the TUI, so scripts and CI see exactly what the screen shows.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from types import FrameType
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from loadertop.core.config import Settings
from loadertop.core.driver import Sweep
from loadertop.core.events import Event, Notice, SweepFinished, SweepStarted, TrialFinished, TrialProgress
from loadertop.core.export import write_csv, write_json
from loadertop.core.results import SweepResult, TrialResult
from loadertop.core.table import HEADERS, RSS_FOOTNOTE, marks, num, pct, trial_cells

EXIT_INTERRUPTED = 130


def trial_line(trial: TrialResult, total: int) -> str:
    head = f"[{trial.index + 1}/{total}] {trial.config.label():<28}"
    if trial.status != "ok":
        return f"{head} {trial.status}: {trial.error}"
    return (
        f"{head} {num(trial.samples_per_s, '7.0f')} samples/s ±{pct(trial.spread, '.1f'):>5}  "
        f"stall {pct(trial.stall_fraction):>4}  first batch {num(trial.first_batch_s, '.2f')} s  "
        f"({trial.blocks} blocks{'' if trial.stable else ', not stable'})"
    )


def results_table(result: SweepResult) -> Table:
    table = Table(title="loadertop results", title_justify="left", caption=RSS_FOOTNOTE, caption_justify="left")
    for header in HEADERS:
        table.add_column(header, justify="left" if header == "status" else "right", no_wrap=header != "status")
    table.add_column("why")
    for trial in result.trials:
        cells = trial_cells(trial)
        note = ", ".join(marks(trial, result))
        style = "bold green" if "recommended" in note else ("yellow" if "knee" in note else None)
        why = f"[{note}] {trial.reason}" if note else trial.reason
        table.add_row(*cells, why if trial.status == "ok" else "", style=style)
    return table


class Reporter:
    """Turns events into terminal output. Progress goes to `err`, results to `out`."""

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self.out = Console(file=out, width=None if out.isatty() else 200, highlight=False)
        self.err = Console(file=err, highlight=False, stderr=True, soft_wrap=True)
        self.live = err.isatty()
        self.total = 0
        self.progress: Progress | None = None
        self.task = None

    def handle(self, event: Event) -> None:
        if isinstance(event, SweepStarted):
            self.total = len(event.planned)
            self.err.print(f"loadertop: {event.machine.summary()}")
            self.err.print(f"loadertop: {self.total} trials of {event.settings.dataset}; run folder {event.run_dir}")
            if self.live:
                self.progress = Progress(
                    TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                    TimeElapsedColumn(), console=self.err, transient=True,
                )  # fmt: skip
                self.progress.start()
                self.task = self.progress.add_task("starting the runner", total=self.total)
        elif isinstance(event, TrialProgress) and self.progress is not None and self.task is not None:
            self.progress.update(self.task, description=f"trial {event.index + 1}: {event.samples_per_s:.0f} samples/s")
        elif isinstance(event, TrialFinished):
            line = trial_line(event.result, self.total)
            if self.progress is not None and self.task is not None:
                self.progress.console.print(line)
                self.progress.advance(self.task)
            else:
                self.err.print(line, markup=False)
        elif isinstance(event, Notice):
            self.err.print(f"loadertop: {event.level}: {event.message}", markup=False)
        elif isinstance(event, SweepFinished):
            self.stop()
            self.summary(event.result)

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None

    def summary(self, result: SweepResult) -> None:
        self.out.print(results_table(result))
        if result.knee:
            self.out.print(f"Knee ({result.knee.rule}): {result.knee.reason}", markup=False)
        if result.recommendation:
            rec = result.recommendation
            self.out.print(f"Recommended: {rec.config.label()}, {rec.samples_per_s:.0f} samples/s", markup=False)
            self.out.print(f"Why: {rec.reason}", markup=False)
            self.out.print(rec.snippet, markup=False)
        else:
            self.out.print("No recommendation: no trial finished.")
        if result.interrupted:
            self.out.print(f"Interrupted: {len(result.trials)} finished trials kept.")
        self.out.print(f"Wall time {result.wall_s:.1f} s; run folder {result.run_dir}", markup=False)


def run_headless(
    settings: Settings,
    *,
    out_dir: Path | None,
    json_path: Path | None,
    csv_path: Path | None,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
) -> int:
    sweep = Sweep(settings, out_dir=out_dir)
    reporter = Reporter(out, err)
    caught: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        caught.append(signum)
        sweep.cancel()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        for event in sweep.events():
            reporter.handle(event)
    finally:
        reporter.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    result = sweep.result
    assert result is not None
    for path, write in ((json_path, write_json), (csv_path, write_csv)):
        if path is not None:
            write(result, path)
            reporter.err.print(f"loadertop: wrote {path}", markup=False)
    if caught:
        return EXIT_INTERRUPTED if caught[0] == signal.SIGINT else 128 + caught[0]
    return 0
