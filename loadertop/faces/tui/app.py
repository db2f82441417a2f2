"""The Textual app: runs sweeps in a thread worker and shows their event stream in panes.

The sweep thread only iterates `sweep.events()` and posts messages. On the UI thread, each event is
folded into a `SweepState` (O(1) for samples); the panes the samples touched are rebuilt on a 1 Hz timer that
runs only while a sweep does (a pane whose text did not change is not repainted), the chart and the table only
when a trial starts or ends. --json/--csv are written when a sweep ends, and on quit mid-sweep.
"""

from __future__ import annotations

import os
import threading
import traceback
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.events import Resize
from textual.notifications import SeverityLevel
from textual.widgets import DataTable, Footer, Static

from loadertop.core.model.config import Settings, TrialConfig, UsageError
from loadertop.core.model.events import Notice, ProbeSample, SweepFinished, SweepStarted, TrialProgress
from loadertop.core.model.results import SweepResult
from loadertop.core.model.stages import StagesReport
from loadertop.faces.tui import layout, outputs, ranges
from loadertop.faces.tui.messages import SweepCrashed, SweepEnded, SweepEvent
from loadertop.faces.tui.noting import NotingApp
from loadertop.faces.tui.state import SweepState
from loadertop.faces.tui.sweep_api import SweepFactory, SweepLike, engine_factory
from loadertop.faces.tui.widgets.gpu import GpuPane
from loadertop.faces.tui.widgets.header import HeaderPane
from loadertop.faces.tui.widgets.help import PANES_SHORT, HelpScreen
from loadertop.faces.tui.widgets.memory import MemoryPane
from loadertop.faces.tui.widgets.nodes import NodesPane
from loadertop.faces.tui.widgets.pane import Pane
from loadertop.faces.tui.widgets.results import RERUN_ROW_HELP, ResultsTable
from loadertop.faces.tui.widgets.stages import StagesScreen
from loadertop.faces.tui.widgets.throughput import LivePane, ThroughputChart

if TYPE_CHECKING:
    from loadertop.core.engine import SweepRequest

# Pane redraws while a sweep runs: the probes tick at 2 Hz and blocks come about once a second, so 1 Hz shows
# every block and keeps the monitor's CPU away from the trial it measures. Stopped when a sweep ends.
REFRESH_S = 1.0
LIGHT, DARK = "textual-light", "textual-dark"
STAGES_HELP = "where a sample's time goes: each stage, its ceiling, what to change"
MeasureStages = Callable[[Settings], StagesReport]


def engine_stages(settings: Settings) -> StagesReport:
    """The sweep's dataset through `loadertop stages` (engine imported on first use, as the sweep's)."""
    from loadertop.core.engine import stages

    args = [f"{key}={value}" for key, value in settings.dataset_args]
    return stages(settings.dataset, dataset_args=args or None)


class LoadertopApp(NotingApp[None]):
    CSS_PATH = "loadertop.tcss"
    TITLE = "loadertop"
    ENABLE_COMMAND_PALETTE = False
    HORIZONTAL_BREAKPOINTS, VERTICAL_BREAKPOINTS = layout.HORIZONTAL, layout.VERTICAL  # typed by App (ClassVar)
    # Single keys only: tmux delays Esc, and Alt/Ctrl combinations get eaten by terminals and multiplexers.
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "rerun", "rerun", tooltip="rerun the whole sweep; the table shows Δ against this run", id="rerun"),
        # The table binds enter too (so the key is handled after the arrow keys before it); this one
        # is for when the table does not have focus.
        Binding("enter", "rerun_row", "row", key_display="⏎", tooltip=RERUN_ROW_HELP, id="rerun_row"),
        Binding("p", "pause", "pause", tooltip="pause / resume (the block being measured is discarded)", id="pause"),
        Binding("s", "stop", "stop", tooltip="stop after the current trial (finished trials are kept)", id="stop"),
        Binding("e", "export", "save", tooltip="export JSON, CSV and Markdown into the run folder", id="export"),
        Binding(
            "plus,equals_sign",
            "widen",
            "more",
            key_display="+",
            tooltip="widen the worker range upward and rerun",
            id="widen",
        ),
        Binding("minus", "narrow", "less", key_display="-", tooltip="drop the top worker counts, rerun", id="narrow"),
        Binding("w", "stages", "time", tooltip=STAGES_HELP, id="stages"),
        Binding("y", "yank", "copy", tooltip="copy the DataLoader(...) snippet (OSC 52), write snippet.py", id="yank"),
        # Not in the footer, which holds the others at 80 columns: the help lists it
        Binding(
            "t", "toggle_theme", "theme", tooltip="switch between the dark and the light theme", id="theme", show=False
        ),
        Binding("question_mark", "help", "help", key_display="?", tooltip="this help", id="help"),
        Binding("q", "quit", "quit", tooltip="quit: stops the running trial, keeps the finished ones", id="quit"),
    ]

    def __init__(
        self,
        settings: Settings,
        *,
        sweep_factory: SweepFactory,
        previous: SweepResult | None = None,
        theme: str | None = None,
        autostart: bool = True,
        json_path: Path | None = None,
        csv_path: Path | None = None,
        stages: MeasureStages | None = None,
    ) -> None:
        super().__init__()
        self.settings = settings  # what `r` reruns; `+`/`-` change its workers
        self.measure_stages = stages if stages is not None else engine_stages
        self.sweep_factory = sweep_factory
        self.state = SweepState(previous)
        self.sweep: SweepLike | None = None
        self.autostart = autostart
        self.generation = 0
        self.sweeps: list[SweepLike] = []
        self.pending: tuple[Settings, Sequence[TrialConfig] | None] | None = None
        self.failure_code = 0  # 1: the engine raised; 2: it rejected the input
        self.messages: list[tuple[str, str]] = []  # (severity, text) of every notification, for tests
        self.exports: list[Path] = []
        self.snippet_path: Path | None = None
        self.json_path, self.csv_path = json_path, csv_path
        self.written: dict[Path, str | None] = {}  # --json/--csv: path -> None once written, else the error
        self.quit_running = False  # the app ended while a sweep ran: its finished trials are written on exit
        self.quitting = threading.Event()  # the sweep thread stops posting once set
        self._dirty: set[str] = set()
        wanted = theme or os.environ.get("LOADERTOP_THEME", "")
        self.theme = LIGHT if wanted.lower() in ("light", LIGHT) else DARK

    # ---- layout --------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        # Kept by name: the help screen may be on top when they need a redraw, so no query_one().
        self.header = HeaderPane(self.state, id="header")
        self.table = ResultsTable(self.state, id="results")
        self.too_small = Static(id="too-small")
        self.panes: dict[str, Pane[SweepState] | ResultsTable | ThroughputChart] = {
            "header": self.header,
            "gpu": GpuPane(self.state, id="gpu"),
            "memory": MemoryPane(self.state, id="memory"),
            "live": LivePane(self.state, id="live"),
            "chart": ThroughputChart(self.state, id="chart"),
            "table": self.table,
            "nodes": NodesPane(self.state, id="nodes"),  # many nodes only: hidden otherwise
        }
        yield self.header
        with Horizontal(id="panes"):
            with Vertical(id="left"):
                yield self.panes["gpu"]
                yield self.panes["memory"]
            with Vertical(id="right"):
                yield self.panes["live"]
                yield self.panes["chart"]
        yield self.panes["nodes"]
        yield self.table
        yield self.too_small
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self._ticker = self.set_interval(REFRESH_S, self.flush, pause=True)
        self.table.focus()
        if self.autostart:
            self.start_sweep(self.settings)

    def on_resize(self, event: Resize) -> None:
        width, height = event.size
        self.too_small.update(
            f"terminal too small: {width}×{height}\nloadertop needs at least {layout.MIN_WIDTH}×{layout.MIN_HEIGHT}.\n"
            "The sweep keeps running; q quits."
        )
        # Some panes show more lines on a taller terminal; the chart and the table follow their own size.
        for name, pane in self.panes.items():
            if isinstance(pane, Pane):
                pane.invalidate()
                self._dirty.add(name)
        self.flush()

    # ---- the sweep thread ----------------------------------------------------------------------

    def start_sweep(self, settings: Settings, only: Sequence[TrialConfig] | None = None) -> None:
        """Start a sweep now (callers make sure none is running)."""
        self.generation += 1
        previous = self.state.result
        self.state.begin(only=bool(only))
        try:
            sweep = self.sweep_factory(settings, previous, list(only) if only else None)
        except UsageError as error:
            self._crashed(str(error), code=2)
            return
        except Exception as error:
            self._crashed(f"{type(error).__name__}: {error}", code=1)
            return
        self.sweep = sweep
        self.sweeps.append(sweep)
        self.header.status_line = None  # paths from the last export describe the last result
        self._ticker.resume()
        self._pump(sweep, self.generation)
        self.flush(everything=True)

    @work(thread=True, exit_on_error=False, group="sweep")
    def _pump(self, sweep: SweepLike, generation: int) -> None:
        # Runs in a thread: it touches no widget and no app state, it only posts messages.
        try:
            for event in sweep.events():
                if not self.quitting.is_set():
                    self.post_message(SweepEvent(generation, event))
                # After quit we keep draining: the engine ends right after SweepFinished (within 2 s
                # of cancel), and that is when it has saved the finished trials.
        except Exception as error:
            self.post_message(SweepCrashed(generation, error, traceback.format_exc()))
        finally:
            self.post_message(SweepEnded(generation))

    def on_sweep_event(self, message: SweepEvent) -> None:
        if message.generation != self.generation:
            return  # a cancelled sweep's stragglers
        event = message.event
        self._dirty |= self.state.apply(event)
        if isinstance(event, SweepStarted) and not self.state.only:
            self.settings = replace(self.settings, workers=event.settings.workers)
        if isinstance(event, Notice) and event.level in ("warning", "error"):
            # Info notices (the search trace, the ceilings) go to the header's notice line, not to toasts: a burst of
            # them at the start covered the table. Warnings and errors stay in the header too; the toast calls them out.
            severity: SeverityLevel = "error" if event.level == "error" else "warning"
            self.notify(event.message, severity=severity, timeout=8)
        if isinstance(event, (ProbeSample, TrialProgress)):
            return  # high rate: the timer redraws
        self.flush()
        if isinstance(event, SweepFinished):
            self._ticker.pause()
            self._write_requested(event.result)

    def _write_requested(self, result: SweepResult) -> None:
        """--json/--csv, through the engine's writers; a failure is said here and, after exit, on stderr."""
        written = outputs.write_requested(result, self.json_path, self.csv_path)
        self.written.update(written)
        for path, error in written.items():
            if error is not None:
                self.notify(f"cannot write {path}: {error}", severity="error", timeout=15)

    def write_on_exit(self) -> None:
        """After the app has exited: a sweep quit mid-way leaves --json/--csv of its finished trials, marked
        interrupted, like the headless face (the engine's own result once it has stopped, else the table's)."""
        if not self.quit_running:
            return
        sweep = self.sweep
        result = sweep.result if sweep is not None and sweep.result is not None else self.state.snapshot()
        if result is not None:
            self._write_requested(result)

    def on_sweep_crashed(self, message: SweepCrashed) -> None:
        if message.generation != self.generation:
            return
        self.log.error(message.detail)
        code = 2 if isinstance(message.error, UsageError) else 1
        self._crashed(f"{type(message.error).__name__}: {message.error}", code=code)

    def on_sweep_ended(self, message: SweepEnded) -> None:
        if message.generation != self.generation:
            return
        if self.state.running:
            self._crashed("the engine stopped without a final result", code=1)
        if self.pending is not None and not self.quitting.is_set():
            settings, only = self.pending
            self.pending = None
            self.start_sweep(settings, only)

    def _crashed(self, text: str, *, code: int) -> None:
        self.failure_code = code
        self.state.crashed(text)
        self._ticker.pause()
        self.flush(everything=True)
        self.notify(text, title="sweep failed", severity="error", timeout=15)

    def flush(self, everything: bool = False) -> None:
        """Redraw the stale panes (all of them with `everything`)."""
        if not self.screen_stack:
            return  # shutting down: a late message from the sweep thread
        self.screen_stack[0].set_class(self.state.phase == "finished", "-done")
        names = set(self.panes) if everything else self._dirty | ({"nodes"} if "table" in self._dirty else set())
        self._dirty = set()
        for name in names:
            pane = self.panes[name]
            if everything and isinstance(pane, Pane):
                pane.invalidate()  # a theme or size change: same text, new look
            pane.update_view()

    # ---- actions -------------------------------------------------------------------------------

    def _request(self, settings: Settings, only: Sequence[TrialConfig] | None, what: str) -> None:
        """Start a sweep, or, while one runs, cancel it and start this one when it has stopped."""
        if self.state.running and self.sweep is not None:
            self.pending = (settings, only)
            self.sweep.cancel()
            self.notify(f"{what}: stopping the running sweep first")
        else:
            self.notify(what)
            self.start_sweep(settings, only)

    def action_rerun(self) -> None:
        self._request(self.settings, None, "rerunning the sweep; vs prev compares with the last run")

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table is self.table:
            self.action_rerun_row()

    def action_rerun_row(self) -> None:
        config = self.table.selected_config()
        if config is None:
            self.notify("no row to rerun yet", severity="warning")
            return
        if self.state.running:
            self.notify("a sweep is running: wait for it, or press s to stop after this trial", severity="warning")
            return
        tighter = replace(
            self.settings,
            target_spread=min(self.settings.target_spread, 0.02),
            trial_seconds=self.settings.trial_seconds * 2,
        )
        self._request(tighter, [config], f"rerunning {config.label()} with more repeats")

    def action_pause(self) -> None:
        if not self.state.running or self.sweep is None:
            self.notify("no sweep is running", severity="warning")
            return
        if self.state.paused:
            self.sweep.resume()
            self.state.set_paused(False)
            self.notify("resumed")
        else:
            self.sweep.pause()
            self.state.set_paused(True)
            self.notify("paused: the block being measured will be discarded")
        self._dirty.add("header")
        self.flush()

    def action_stop(self) -> None:
        if not self.state.running or self.sweep is None:
            self.notify("no sweep is running", severity="warning")
            return
        self.sweep.stop_after_current()
        self.state.stop_requested()
        self.notify("stopping after the current trial")
        self._dirty.add("header")
        self.flush()

    def _run_dir(self) -> Path | None:
        if self.state.run_dir:
            return Path(self.state.run_dir)
        return Path(self.sweep.run_dir) if self.sweep is not None else None

    def action_export(self) -> None:
        result = self.state.snapshot()
        run_dir = self._run_dir()
        if result is None or not result.trials or run_dir is None:
            self.notify("nothing to export yet: no trial has finished", severity="warning")
            return
        try:
            self.exports = outputs.export_all(result, run_dir)
        except OSError as error:
            self.notify(f"export failed: {error}", severity="error")
            return
        names = ", ".join(p.name for p in self.exports)
        self._status(f"exported {names} to {run_dir}")

    def action_yank(self) -> None:
        rec = self.state.recommendation
        run_dir = self._run_dir()
        if rec is None or run_dir is None:
            self.notify("no recommendation yet: it comes when the sweep ends", severity="warning")
            return
        self.copy_to_clipboard(rec.snippet)  # OSC 52: reaches the local clipboard over SSH and tmux
        try:
            self.snippet_path = outputs.write_snippet(rec, run_dir)
        except OSError as error:
            self.notify(f"copied, but writing snippet.py failed: {error}", severity="error")
            return
        self._status(f"snippet copied to the clipboard (OSC 52) and written to {self.snippet_path}")

    def _status(self, text: str) -> None:
        self.header.status_line = Content.styled(text, "$success")
        self._dirty.add("header")
        self.flush()
        self.notify(text)

    def _change_workers(self, workers: tuple[int, ...] | None, verb: str) -> None:
        old = self.settings.workers
        if workers is None or workers == old:
            self.notify(f"cannot {verb} the worker range further", severity="warning")
            return
        self.settings = replace(self.settings, workers=workers)
        show = ",".join(map(str, workers))
        self._request(self.settings, None, f"workers {','.join(map(str, old))} → {show}: rerunning")

    def action_widen(self) -> None:
        self._change_workers(ranges.widen(self.settings.workers), "widen")

    def action_narrow(self) -> None:
        self._change_workers(ranges.narrow(self.settings.workers), "narrow")

    def action_toggle_theme(self) -> None:
        self.theme = LIGHT if self.theme != LIGHT else DARK
        self.flush(everything=True)

    def action_stages(self) -> None:
        if isinstance(self.screen, StagesScreen):
            self.pop_screen()
            return
        if self.state.running and not self.state.paused:
            self.notify("the stages would take the CPUs the sweep measures with: press w after it, or pause (p) "
                        "first", severity="warning")  # fmt: skip
            return
        settings, result = self.settings, self.state.result
        kept = result.stages if result is not None and not self.state.running else None  # the sweep measured them
        measure = (lambda: kept) if kept is not None else (lambda: self.measure_stages(settings))
        self.push_screen(StagesScreen(measure, what=settings.dataset or "synthetic"))

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            self.pop_screen()
            return
        self.push_screen(HelpScreen([b for b in self.BINDINGS if isinstance(b, Binding)], short=PANES_SHORT))

    async def action_quit(self) -> None:
        """Quit now: cancel the running trial (the engine has its processes gone within 2 s)."""
        running = self._abandon()
        self._ticker.pause()
        self.exit(return_code=130 if running else self.failure_code)

    def on_unmount(self) -> None:
        # However the app ends (q, ctrl+q, an exception, a test), the sweep must not outlive it: the
        # thread is joined on the way out, and the engine ends its events() within 2 s of cancel().
        self._abandon()

    def _abandon(self) -> bool:
        """Cancel the running sweep for good (once); True when one was running."""
        if self.quitting.is_set():
            return False
        self.quitting.set()
        self.pending = None
        if self.state.running and self.sweep is not None:
            self.sweep.cancel()
            self.quit_running = True
            return True
        return False

    # ---- table ---------------------------------------------------------------------------------

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table is not self.table:
            return
        config = self.table.selected_config()
        if config is not None and self.state.select(config):  # while a trial runs, the panes follow it
            self._dirty |= {"memory", "live", "gpu", "nodes"}
            self.flush()


def make_app(
    request: SweepRequest,
    *,
    sweep_factory: SweepFactory | None = None,
    theme: str | None = None,
    stages: MeasureStages | None = None,
) -> LoadertopApp:
    """The one way to build the app: the CLI, the tests and the screenshot script all come here. `sweep_factory`
    replaces the engine (the tests' recorded sweeps), `stages` its stage measurement (`w`)."""
    factory = sweep_factory if sweep_factory is not None else engine_factory(request)
    return LoadertopApp(
        request.settings, sweep_factory=factory, previous=request.previous, theme=theme,
        json_path=request.json_path, csv_path=request.csv_path, stages=stages,
    )  # fmt: skip
