"""The attach app: a live training job's data loading, one LiveSnapshot per interval.

A thread worker opens the session (when a job was picked here) and iterates `session.snapshots()`, posting one
message per snapshot; the UI thread folds it into a LiveState and redraws the panes. Detaching (`p`, `q`, the app
ending) sets the attachment's stop flag and closes its session, which makes `snapshots()` return.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Protocol, TextIO

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.events import Resize
from textual.message import Message
from textual.widgets import Footer, Static

from loadertop.core.model.live import LiveSnapshot
from loadertop.faces.tui import layout
from loadertop.faces.tui.attach.chart import LiveThroughputChart
from loadertop.faces.tui.attach.picker import JobLister, PickerScreen
from loadertop.faces.tui.attach.state import LiveState, SessionInfo
from loadertop.faces.tui.attach.widgets import AttachHeader, GpuLivePane, MessagesPane, RanksPane, WorkersPane
from loadertop.faces.tui.noting import NotingApp
from loadertop.faces.tui.widgets.help import HelpScreen
from loadertop.faces.tui.widgets.pane import Pane

TUI_DIR = Path(__file__).resolve().parent.parent

PANES_HELP = (
    ("Header", "the job: pid, command line, watched (loadertop.watch) or not, the interval, the time since attach; "
     "the last interval's samples/s, batches/s, stall fraction, step time and p95 wait; how the view ended."),
    ("Throughput", "samples/s over time (left axis), the stall fraction in % (right axis, red), epoch ends (|)."),
    ("GPU", "utilization of the job's GPUs over time with now / avg / max, or why it is unavailable."),
    ("Ranks", "attached to a launcher (torchrun's pid): each rank's samples/s, stall, data wait (mean, p95, p99; "
     "ms) and workers, ← on the slowest by its mean data wait; the job's samples/s; the rest of the view is the "
     "lowest rank's."),
    ("Workers", "each DataLoader worker's USS over time, its slope ± error in MB/min (⚠ with a leak warning), "
     "PSS and CPU; the job's total PSS, the main process and the memory still available."),
    ("Warnings", "leak warnings first (⚠, with the time left to the memory limit and the fix), other warnings, "
     "what cannot be shown and why, and tune notes; last, that a live job's stages (where a sample's time goes) "
     "are not measured, and the command that measures them."),
)  # fmt: skip


class SessionLike(Protocol):
    """What the engine's LiveSession offers the app (tests pass fakes)."""

    pid: int
    command: str
    watched: bool

    def snapshots(self) -> Iterator[LiveSnapshot]: ...

    def close(self) -> None: ...


Opener = Callable[[int | str], SessionLike]


@dataclass
class Attachment:
    """One attach: the worker thread and the UI share it. `detach()` may come before the session is open."""

    generation: int
    stop: threading.Event = field(default_factory=threading.Event)
    session: SessionLike | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def adopt(self, session: SessionLike) -> bool:
        """Keep the session the worker opened; False (and it is closed) when detached meanwhile."""
        with self.lock:
            if not self.stop.is_set():
                self.session = session
                return True
        session.close()
        return False

    def detach(self) -> None:
        with self.lock:
            self.stop.set()
            session = self.session
        if session is not None:
            session.close()


class Opened(Message):
    def __init__(self, generation: int, info: SessionInfo) -> None:
        super().__init__()
        self.generation, self.info = generation, info


class Snapshot(Message):
    def __init__(self, generation: int, snapshot: LiveSnapshot) -> None:
        super().__init__()
        self.generation, self.snapshot = generation, snapshot


class Failed(Message):
    """The session could not be opened (`opening`), or its stream raised."""

    def __init__(self, generation: int, text: str, opening: bool) -> None:
        super().__init__()
        self.generation, self.text, self.opening = generation, text, opening


class StreamEnded(Message):
    def __init__(self, generation: int) -> None:
        super().__init__()
        self.generation = generation


class AttachApp(NotingApp[int]):
    CSS_PATH: ClassVar = [TUI_DIR / "loadertop.tcss", Path(__file__).resolve().parent / "attach.tcss"]
    TITLE = "loadertop attach"
    ENABLE_COMMAND_PALETTE = False
    HORIZONTAL_BREAKPOINTS, VERTICAL_BREAKPOINTS = layout.HORIZONTAL, layout.VERTICAL  # typed by App (ClassVar)
    # Single keys only: tmux delays Esc, and Alt/Ctrl combinations get eaten by terminals and multiplexers.
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("p", "pick", "pick", tooltip="detach and pick another job from the list", id="attach.pick"),
        Binding("question_mark", "help", "help", key_display="?", tooltip="this help", id="attach.help"),
        Binding("q", "quit", "quit", tooltip="detach and quit (the job goes on)", id="attach.quit"),
        Binding("ctrl+c", "interrupt_job", show=False, priority=True, id="attach.interrupt"),
    ]

    def __init__(
        self,
        *,
        opener: Opener,
        jobs: JobLister,
        interval: float,
        session: SessionLike | None = None,
        json_path: Path | None = None,
        sink: Callable[[LiveSnapshot], None] | None = None,
        interrupt: Callable[[], None] | None = None,
    ) -> None:
        super().__init__()
        self.sink = sink  # each snapshot is handed here too, from the session's thread (--openmetrics)
        self.interrupt = interrupt  # `loadertop run`: Ctrl-C is the job's (the terminal's keys are the app's)
        self.opener, self.list_jobs, self.interval = opener, jobs, interval
        self.first_session = session
        self.json_path = json_path
        self.json_error: str | None = None
        self._json_file: TextIO | None = None
        self.state = LiveState()
        self.attachment: Attachment | None = None
        self.generation = 0
        self.failure_code = 0
        self.messages: list[tuple[str, str]] = []  # (severity, text) of every notification, for tests

    def compose(self) -> ComposeResult:
        self.too_small = Static(id="too-small")
        self.panes: dict[str, Pane[LiveState] | LiveThroughputChart] = {
            "header": AttachHeader(self.state, id="header"),
            "chart": LiveThroughputChart(self.state, id="chart"),
            "gpu": GpuLivePane(self.state, id="gpu"),
            "ranks": RanksPane(self.state, id="ranks"),
            "workers": WorkersPane(self.state, id="workers"),
            "messages": MessagesPane(self.state, id="messages"),
        }
        yield self.panes["header"]
        with Horizontal(id="panes"):
            with Vertical(id="left"):
                yield self.panes["chart"]
            with Vertical(id="right"):
                yield self.panes["ranks"]
                yield self.panes["workers"]
                yield self.panes["gpu"]
        yield self.panes["messages"]
        yield self.too_small
        yield Footer(compact=True)

    def on_mount(self) -> None:
        if self.first_session is not None:
            self.start(session=self.first_session)
        else:
            self.action_pick()

    def on_resize(self, event: Resize) -> None:
        width, height = event.size
        self.too_small.update(
            f"terminal too small: {width}×{height}\n"
            f"loadertop needs at least {layout.MIN_WIDTH}×{layout.MIN_HEIGHT}.\nq quits."
        )
        self.flush(everything=True)

    # ---- one attachment ------------------------------------------------------------------------

    def start(self, *, target: int | str | None = None, session: SessionLike | None = None) -> None:
        """Attach: to `session` (opened before the app started) or to `target`, opened in the worker thread."""
        self.detach()
        self.generation += 1
        self.attachment = Attachment(self.generation)
        self.state.begin(_info(session, self.interval) if session is not None else None)
        self.flush(everything=True)
        self._pump(self.attachment, target, session)

    @work(thread=True, exit_on_error=False, group="attach")
    def _pump(self, attachment: Attachment, target: int | str | None, session: SessionLike | None) -> None:
        # Runs in a thread: it touches no widget and no app state, it only posts messages.
        generation = attachment.generation
        if session is None:
            try:
                session = self.opener(target if target is not None else "")
            except Exception as error:  # AttachError (one line) or anything else: said on the picker
                self.post_message(Failed(generation, _one_line(error), opening=True))
                return
        if not attachment.adopt(session):
            return
        self.post_message(Opened(generation, _info(session, self.interval)))
        try:
            for snapshot in session.snapshots():
                if attachment.stop.is_set():
                    break
                if self.sink is not None:
                    self.sink(snapshot)
                self.post_message(Snapshot(generation, snapshot))
        except Exception as error:
            if not attachment.stop.is_set():
                self.post_message(Failed(generation, _one_line(error), opening=False))
        finally:
            session.close()
            self.post_message(StreamEnded(generation))

    def detach(self) -> None:
        if self.attachment is not None:
            self.attachment.detach()
            self.attachment = None

    def on_opened(self, message: Opened) -> None:
        if message.generation == self.generation:
            self.state.session = message.info
            self.flush(everything=True)

    def on_snapshot(self, message: Snapshot) -> None:
        if message.generation != self.generation:
            return  # a detached session's straggler
        snapshot = message.snapshot
        self.state.apply(snapshot)
        self._append_json(snapshot)
        if snapshot.ended is not None:
            self.notify(f"the job ended: {snapshot.ended}", severity="warning", timeout=15)
        self.flush()

    def on_failed(self, message: Failed) -> None:
        if message.generation != self.generation:
            return
        if message.opening:
            self.attachment = None
            self.action_pick(error=message.text)
            return
        self.failure_code = 1
        self.state.error = f"the view stopped: {message.text}"
        self.notify(self.state.error, severity="error", timeout=15)
        self.flush()

    def on_stream_ended(self, message: StreamEnded) -> None:
        attachment = self.attachment
        if message.generation != self.generation or attachment is None or attachment.stop.is_set():
            return
        if self.state.ended is None and self.state.error is None:
            self.state.ended = "the session stopped sending snapshots"
            self.flush()

    def _append_json(self, snapshot: LiveSnapshot) -> None:
        """--json: one JSON object per interval, appended and flushed (as headless); a failure is said once."""
        if self.json_path is None or self.json_error is not None:
            return
        try:
            if self._json_file is None:
                self._json_file = self.json_path.open("a", encoding="utf-8")
            self._json_file.write(json.dumps(snapshot.to_dict()) + "\n")
            self._json_file.flush()
        except OSError as error:
            self.json_error = str(error)
            self.notify(f"cannot write {self.json_path}: {error}", severity="error", timeout=15)

    def flush(self, everything: bool = False) -> None:
        """Redraw the panes (once per interval: every pane may have changed)."""
        if not self.screen_stack:
            return  # shutting down: a late message from the worker thread
        for pane in self.panes.values():
            if everything and isinstance(pane, Pane):
                pane.invalidate()  # a size change: same text, new layout
            pane.update_view()

    # ---- actions -------------------------------------------------------------------------------

    def action_pick(self, error: str | None = None) -> None:
        """Detach (the last view stays underneath) and show the job list; enter attaches to the chosen job."""
        self.detach()
        if isinstance(self.screen, PickerScreen):
            self.pop_screen()
        self.push_screen(PickerScreen(self.list_jobs, error), callback=self._picked)

    def _picked(self, pid: int | None) -> None:
        if pid is not None:
            self.start(target=pid)

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            self.pop_screen()
            return
        self.push_screen(HelpScreen([b for b in self.BINDINGS if isinstance(b, Binding)], PANES_HELP))

    def action_interrupt_job(self) -> None:
        """Ctrl-C under `loadertop run`: SIGINT to the job, as the terminal would send it without loadertop."""
        if self.interrupt is None:
            self.action_help_quit()
            return
        self.interrupt()
        self.notify("Ctrl-C sent to the job (SIGINT); q leaves the view", severity="warning", timeout=5)

    async def action_quit(self) -> None:
        self.detach()
        self.exit(return_code=self.failure_code)

    def on_unmount(self) -> None:
        # However the app ends (q, ctrl+q, an exception, a test), no session may outlive it.
        self.detach()
        if self._json_file is not None:
            self._json_file.close()


def _info(session: SessionLike, interval: float) -> SessionInfo:
    return SessionInfo(pid=session.pid, command=session.command, watched=session.watched, interval=interval)


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
