"""The job picker (`loadertop attach` with no argument): the watchable jobs, newest first, chosen with ↑/↓ and enter.

It dismisses with the chosen job's pid; `q` quits the app. With no job it says how to make one watchable.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Footer, OptionList, Static
from textual.widgets.option_list import Option

from loadertop.core.engine import clock
from loadertop.core.model.jobs import JobInfo
from loadertop.faces.tui.attach.widgets import WATCH_HINT

JobLister = Callable[[], list[JobInfo]]

EMPTY = (
    "No watchable job on this machine.\n\n"
    "In the training script, iterate the loader through loadertop:\n\n"
    f"    {WATCH_HINT}\n\n"
    "then press r here. `loadertop attach PID` also attaches to a job without it (memory, CPU and GPU only)."
)


def job_line(job: JobInfo, now: float) -> Content:
    """pid, when it started (clock time and how long ago), and its command line."""
    started = time.strftime("%H:%M:%S", time.localtime(job.hello.started))
    ago = clock(now - job.hello.started)
    return Content.assemble(
        (f"{job.pid:>8}", "bold"), f"  {started} ({ago} ago)  ", (job.command or "(command unknown)", "")
    )


class PickerScreen(Screen[int]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "refresh_jobs", "refresh", tooltip="list the watchable jobs again", id="picker.refresh"),
        Binding("q", "app.quit", "quit", tooltip="quit without attaching", id="picker.quit"),
    ]

    DEFAULT_CSS = """
    PickerScreen { layout: vertical; }
    PickerScreen #picker-title { padding: 0 1; background: $boost; text-style: bold; }
    PickerScreen #picker-error { padding: 0 1; color: $error; display: none; }
    PickerScreen #picker-error.-shown { display: block; }
    PickerScreen OptionList { height: 1fr; border: round $primary; }
    PickerScreen #picker-empty { height: 1fr; padding: 1 2; border: round $primary; display: none; }
    PickerScreen.-empty #picker-empty { display: block; }
    PickerScreen.-empty OptionList { display: none; }
    """

    def __init__(self, jobs: JobLister, error: str | None = None) -> None:
        super().__init__()
        self.list_jobs = jobs
        self.error = error  # why the last pick could not be attached to
        self.jobs: list[JobInfo] = []

    def compose(self) -> ComposeResult:
        yield Static(
            Content.assemble(
                ("loadertop attach", "bold $accent"), ("  watchable jobs, newest first · ↑/↓ enter attaches", "")
            ),
            id="picker-title",
        )
        yield Static(self.error or "", id="picker-error", classes="-shown" if self.error else "")
        yield OptionList(id="picker-jobs")
        yield Static(EMPTY, id="picker-empty")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.action_refresh_jobs()

    def action_refresh_jobs(self) -> None:
        try:
            self.jobs = self.list_jobs()
        except OSError as error:  # an unreadable jobs folder reads as no jobs, with the reason
            self.jobs = []
            self.query_one("#picker-error", Static).update(f"cannot list jobs: {error}")
        options = self.query_one(OptionList)
        options.clear_options()
        now = time.time()
        options.add_options([Option(job_line(job, now), id=str(job.pid)) for job in self.jobs])
        self.set_class(not self.jobs, "-empty")
        if self.jobs:
            options.highlighted = 0
            options.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        if event.option.id is not None:
            self.dismiss(int(event.option.id))
