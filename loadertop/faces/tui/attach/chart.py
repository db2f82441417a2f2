"""The live job's throughput over time: samples/s, the stall fraction on the right axis, epoch boundaries marked.

One PlotextPlot (textual-plotext pins plotext < 6; plots must not share state). The absolute figures of the
latest interval are in the title and the header: a chart's scale moves."""

from __future__ import annotations

from textual_plotext import PlotextPlot

from loadertop.core.engine import pct, rate
from loadertop.faces.tui.attach.state import LiveState


class LiveThroughputChart(PlotextPlot):
    DEFAULT_CLASSES = "box"

    def __init__(self, state: LiveState, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.state = state
        self.marks: list[float] = []  # the epoch boundaries drawn (those within the history)

    def on_mount(self) -> None:
        super().on_mount()
        self.update_view()

    def on_resize(self) -> None:
        self.update_view()

    def update_view(self) -> None:
        state = self.state
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        ts, rates = state.points(state.samples_per_s)
        st, stalls = state.points(state.stall_fraction, scale=100.0)
        snap = state.last
        if not rates and not stalls:
            self._memory_only()
            return
        legend = self.size.height >= 14
        if rates:
            plt.plot(ts, rates, marker="braille", color="cyan", label="samples/s" if legend else None)
        if stalls:
            plt.plot(st, stalls, marker="braille", color="red", yside="right", label="stall %" if legend else None)
            plt.ylim(0, 100, yside="right")  # type: ignore[arg-type]  # stub types yside as float; plotext takes "left"/"right"
        plt.ylim(0, max(rates, default=1.0) * 1.1 or 1.0, yside="left")  # type: ignore[arg-type]  # stub types yside as float; plotext takes "left"/"right"
        low, high = state.t[0], state.t[-1]
        self.marks = [end for end in state.epoch_ends if low <= end <= high]
        for end in self.marks:
            plt.vline(end, color="orange")
        if legend:
            plt.xlabel("seconds since attach")
            plt.ylabel("stall %", yside="right")  # type: ignore[call-arg]  # textual-plotext's stub calls it xside; plotext takes yside
        now = f"{rate(snap.samples_per_s)} samples/s · stall {pct(snap.stall_fraction)}" if snap else ""
        title = f"Throughput · {now}"
        if not legend:
            title += " · ⠿ samples/s · ⠿ stall % (right, red)"
        if state.epoch_ends:
            title += " · | epoch end"
        self.border_title = title
        self.refresh()

    def _memory_only(self) -> None:
        """No rates (the job does not run loadertop.watch(), or has taken no step yet): the job's PSS instead."""
        state = self.state
        self.marks = []
        ts, pss = state.points(state.total_pss_mb)
        if state.last is not None and not state.last.watched:
            why = "no samples/s: the job does not run loadertop.watch()"
        else:
            why = "samples/s: waiting for the job's first steps"
        if pss:
            self.plt.plot(ts, pss, marker="braille", color="green")
            self.plt.ylim(0, max(pss) * 1.1)
            if self.size.height >= 14:
                self.plt.xlabel("seconds since attach")
            why += " · total PSS MB over time"
        self.border_title = why
        self.refresh()
