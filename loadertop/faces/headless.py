"""The headless face: progress on stderr, the results table and recommendation on stdout, exports on disk.

It consumes the same event stream as the TUI, so scripts and CI see exactly what the screen shows.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TextIO

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from loadertop.core.engine import (
    Report,
    Sweep,
    SweepRequest,
    TrialCount,
    build_report,
    clock,
    pct,
    rate,
    seconds,
    write_csv,
    write_json,
)
from loadertop.core.model.events import (
    Event,
    Notice,
    ProbeSample,
    SweepFinished,
    SweepStarted,
    TrialFinished,
    TrialProgress,
)
from loadertop.core.model.results import SweepResult, TrialResult
from loadertop.faces.headless_stages import short_section
from loadertop.faces.headless_table import layout, output_width

EXIT_FAILED = 1
EXIT_NONE_FINISHED = 2  # as bad input: every configuration failed, so no answer
EXIT_INTERRUPTED = 130
HOLD_S = 5.0  # the longest the opening lines wait for the first trial once the dataset loaded
CHECK_HOLD_S = 120.0  # ... and for the dataset check itself (a runner importing torch on a busy machine)


def trial_line(trial: TrialResult, counter: str) -> str:
    """`counter` is TrialCount.counter(): '3/8', or '9/9 (8 planned +1 refine)' once the search has added trials."""
    head = f"[{counter}] {trial.config.label():<28}"
    if trial.status != "ok":
        return f"{head} {trial.status}: {trial.error}"
    return (
        f"{head} {rate(trial.samples_per_s):>7} samples/s ±{pct(trial.spread):>5}  "
        f"stall {pct(trial.stall_fraction):>4}  first batch {seconds(trial.first_batch_s)}  "
        f"({trial.blocks} {'block' if trial.blocks == 1 else 'blocks'}"
        f"{f' of {trial.epoch_batches}-batch epochs' if trial.epoch_batches else ''}"
        f"{'' if trial.stable else ', decided early' if trial.decided else ', not stable'}"
        f"{', on the workers of its first run' if trial.warm else ''})"
        f"{per_node(trial)}"
    )


def per_node(trial: TrialResult) -> str:
    """'  per node 1000 / 820, slowest node 1 (host-b) rank 0' on a many-node sweep's trial line, else ''."""
    if not trial.node_trials:
        return ""
    rates = " / ".join(rate(n.samples_per_s if n.status == "ok" else None) for n in trial.node_trials)
    return f"  per node {rates}" + (f", slowest {trial.slowest_rank}" if trial.slowest_rank else "")


def nodes_table(report: Report) -> Table | None:
    """The recommended configuration node by node (◀ marks the node of the job's slowest rank); None on one node."""
    row = report.recommended
    if row is None or not row.nodes:
        return None
    table = Table(title=f"per node: {row.config.label()}", title_justify="left")
    for key in report.node_columns:
        left = key in ("node", "host", "status")
        table.add_column(report.node_headers[key], justify="left" if left else "right", no_wrap=key != "status")
    for node in row.nodes:
        cells = report.node_cells(node)
        table.add_row(*(escape(cells[key]) for key in report.node_columns), style="yellow" if node.paces else None)
    return table


_PADDING = re.compile(r"[ \t]+\n")


class Terminal:
    """A text stream that goes quiet instead of raising once its terminal or pipe is gone.

    After SIGHUP (the SSH session dropped) every write to the old tty fails with EIO, and a closed pipe
    fails with EPIPE: the sweep must still end cleanly, save its results and exit with the right code.
    `hang_up` also points fds 1 and 2 at /dev/null, so Python's own flush at exit cannot fail either."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.gone = False
        # rich pads a line to the width (a centred title, a wrapped paragraph); a file or a pipe gets it without
        self._tidy = not self.isatty()

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                return self._stream.write(_PADDING.sub("\n", text) if self._tidy else text)
            except (OSError, ValueError):
                self.hang_up()
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self._stream.flush()
            except (OSError, ValueError):
                self.hang_up()

    def isatty(self) -> bool:
        try:
            return not self.gone and self._stream.isatty()
        except (OSError, ValueError):
            return False

    def fileno(self) -> int:
        return self._stream.fileno()

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)

    def hang_up(self) -> None:
        self.gone = True
        try:
            fd = self._stream.fileno()
        except (OSError, ValueError):
            return
        if fd in (1, 2):
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, fd)
            os.close(null)


class Reporter:
    """Turns events into terminal output. Progress goes to `err`, results to `out`."""

    def __init__(
        self, out: TextIO, err: TextIO, previous: SweepResult | None = None, checked: threading.Event | None = None
    ) -> None:
        self.terminals = (Terminal(out), Terminal(err))
        self.width = output_width(out)  # the terminal's; a file or a pipe: $COLUMNS, else 100
        self.out = Console(file=self.terminals[0], width=self.width, highlight=False)  # type: ignore[arg-type]  # Terminal: IO[str] by duck typing
        self.err = Console(file=self.terminals[1], highlight=False, stderr=True, soft_wrap=True)  # type: ignore[arg-type]  # as above
        self.live = err.isatty()
        self.previous = previous
        self.count = TrialCount()  # the engine's count: the total so far and what the search added to the plan
        self.progress: Progress | None = None
        self.task: TaskID | None = None
        self._held: list[Event] | None = []
        self._held_since = time.monotonic()
        self._checked = checked  # the sweep's dataset check passed (None: only the HOLD_S timer applies)

    def _hold(self, event: Event) -> bool:
        """Hold the opening lines until the first trial (at most HOLD_S): a dataset that cannot be loaded then
        shows as the one line naming the problem, not after a header for a sweep that never ran."""
        if self._held is None:
            return False
        checking = self._checked is not None and not self._checked.is_set()
        early = time.monotonic() - self._held_since < (CHECK_HOLD_S if checking else HOLD_S)
        if early and isinstance(event, SweepStarted | Notice):
            self._held.append(event)
            return True
        if early and isinstance(event, ProbeSample):
            return True
        held, self._held = self._held, None
        for earlier in held:
            self.handle(earlier)
        return isinstance(event, ProbeSample)

    def hang_up(self) -> None:
        """The terminal is gone (SIGHUP): stop drawing and write nothing more to it."""
        for terminal in self.terminals:
            terminal.hang_up()

    def handle(self, event: Event) -> None:
        if self._hold(event):
            return
        if self.count.apply(event) and self.progress is not None and self.task is not None:
            self.progress.update(self.task, total=self.count.total)
        if isinstance(event, SweepStarted):
            self.err.print(f"loadertop: {event.machine.summary()}")
            planned = f"{self.count.planned} trials planned for {event.settings.dataset}"
            self.err.print(f"loadertop: {planned}; run folder {event.run_dir}")
            if self.live:
                self.progress = Progress(
                    TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                    TimeElapsedColumn(), console=self.err, transient=True,
                )  # fmt: skip
                self.progress.start()
                self.task = self.progress.add_task("starting the runner", total=self.count.total)
        elif isinstance(event, TrialProgress) and self.progress is not None and self.task is not None:
            now = f"trial {event.index + 1}: {rate(event.samples_per_s)} samples/s"
            self.progress.update(self.task, description=now)
        elif isinstance(event, TrialFinished):
            line = trial_line(event.result, self.count.counter(event.result.index))
            if event.result.leak:  # the engine's ⚠, as the TUI's memory pane shows it
                line += f"\n  ⚠ memory: {event.result.leak}"
            if self.progress is not None and self.task is not None:
                self.progress.console.print(line, markup=False)
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
        report = build_report(result, self.previous)
        for part in layout(report, self.out, self.width):
            self.out.print(part)
        nodes = nodes_table(report)
        if nodes is not None:
            self.out.print(nodes)
        if self.previous is not None:
            self.out.print(f"vs prev: samples/s against {self.previous.run_dir or 'the previous run'}", markup=False)
        if result.knee:
            self.out.print(f"Knee ({result.knee.rule}): {result.knee.reason}", markup=False)
        if result.recommendation:
            rec = result.recommendation
            self.out.print(f"Recommended: {rec.config.label()}, {rate(rec.samples_per_s)} samples/s", markup=False)
            self.out.print(f"Why: {rec.reason}", markup=False)
            paced = report.recommended.pacing if report.recommended else ""
            if paced and paced not in rec.reason:  # said once, wherever the engine put it
                self.out.print(f"Nodes: {paced}", markup=False)
            if len(rec.equivalent) > 1:  # the equivalence set: what the recommendation could be swapped for
                labels = ", ".join(c.label() for c in rec.equivalent)
                close = " (a close call)" if rec.close else ""
                self.out.print(f"Within noise of the best (≈): {labels}{close}", markup=False)
            self.out.print(rec.snippet, markup=False)
        elif none_finished(result):
            self.out.print("No recommendation: every configuration failed (tracebacks: runner.log).", markup=False)
        else:
            self.out.print("No recommendation: no trial finished.")
        if result.stages is not None:
            self.out.print(short_section(result.stages))
        if result.interrupted:
            self.out.print(f"Interrupted: {len(result.trials)} finished trials kept.")
        self.out.print(f"Wall time {clock(result.wall_s)}; run folder {result.run_dir}", markup=False)


def run_headless(request: SweepRequest, *, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    sweep = Sweep.of(request)
    previous = request.previous
    reporter = Reporter(out, err, previous, checked=sweep.checked)
    caught: list[int] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        caught.append(signum)
        if signum == signal.SIGHUP:
            reporter.hang_up()  # the terminal is gone: never write to it again
        sweep.cancel()

    handlers = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        for event in sweep.events():
            reporter.handle(event)
    finally:
        reporter.stop()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    result = sweep.result
    assert result is not None
    failed = _export(reporter, result, previous, request.json_path, request.csv_path)
    if caught:
        return EXIT_INTERRUPTED if caught[0] == signal.SIGINT else 128 + caught[0]
    if failed:
        return EXIT_FAILED
    # Failures the data does not explain (a hang, a signal, the memory guard) keep the run folder and its log
    return EXIT_NONE_FINISHED if none_finished(result) else 0


def none_finished(result: SweepResult) -> bool:
    """A sweep that ran to its end without one configuration measured: there is no answer, so no success."""
    statuses = {t.status for t in result.trials}
    return not result.interrupted and "failed" in statuses and "ok" not in statuses


def _export(
    reporter: Reporter, result: SweepResult, previous: SweepResult | None, json_path: Path | None, csv_path: Path | None
) -> bool:
    """Write the asked-for files; True when one could not be (said in one line; the run folder has every trial)."""
    failed = False
    writes: list[tuple[Path | None, Callable[[Path], Path]]] = [
        (json_path, lambda p: write_json(result, p)),
        (csv_path, lambda p: write_csv(result, p, previous)),
    ]
    for path, write in writes:
        if path is None:
            continue
        try:
            write(path)
        except OSError as exc:  # the folder went away or filled up during the sweep: the usage was fine
            reporter.err.print(f"loadertop: error: cannot write {path}: {exc.strerror or exc}; "
                               f"the result is in {result.run_dir}", markup=False)  # fmt: skip
            failed = True
            continue
        reporter.err.print(f"loadertop: wrote {path}", markup=False)
    return failed
