"""Throughput: the running trial's batches/s as it runs (`LivePane`), and samples/s against
num_workers over the finished trials with the knee, the recommendation and memory (`ThroughputChart`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from textual.content import Content
from textual_plotext import PlotextPlot

from loadertop.core.engine import ReportRow, build_report, pct, rate, seconds
from loadertop.core.model.config import TrialConfig
from loadertop.core.model.curves import family_key
from loadertop.faces.tui import fmt
from loadertop.faces.tui.state import SweepState
from loadertop.faces.tui.widgets.pane import Pane


class LivePane(Pane[SweepState]):
    DEFAULT_CLASSES = "box"

    def title(self) -> str:
        trace = self.state.focus()
        if trace is None:
            return "Throughput"
        if self.state.live is trace:
            return f"Throughput · trial {trace.index + 1}/{self.state.total} {trace.config.label()}"
        return f"Throughput · trial {trace.index + 1} {trace.config.label()} (done)"

    def view(self) -> Content:
        trace = self.state.focus()
        width = max(self.content_size.width, 20)
        if trace is None:
            return Content.styled("batches/s of the running trial show here", "dim")
        result = trace.result
        if result is not None and result.status != "ok":
            why = (result.error or result.reason or "no reason given").strip()
            return Content.assemble((f"{result.status}: ", "bold $error"), (why, "$error"))
        if not trace.batches_per_s:
            first = f"first batch after {seconds(trace.first_batch_s)}; " if trace.first_batch_s else ""
            return Content.styled(f"{first}skipping the start-up buffer…", "dim")
        now = trace.batches_per_s[-1]
        numbers = f" {rate(now)} batches/s · {rate(trace.samples_per_s[-1])} samples/s"
        spark = fmt.spark(trace.batches_per_s, width - len(numbers), lo=0.0, min_range=1.0)
        med = result.samples_per_s if result and result.samples_per_s else trace.median_samples_per_s
        spread = result.spread if result else trace.spread
        stall = result.stall_fraction if result else trace.stall_fraction
        # Most important first; what does not fit the width is left off rather than cut.
        pieces = [
            f"median {rate(med)} samples/s" + (f" ±{pct(spread)}" if spread is not None else ""),
            f"stall {pct(stall)}",
            *([f"{pct(result.fraction_of_ceiling)} of ceiling"] if result and result.fraction_of_ceiling else []),
            f"1st batch {seconds(trace.first_batch_s)}",
            f"{len(trace.batches_per_s)} blocks",
        ]
        detail = pieces[0]
        for piece in pieces[1:]:
            if len(detail) + 3 + len(piece) <= width:
                detail += f" · {piece}"
        return Content("\n").join([Content.assemble((spark, "$accent"), (numbers, "bold")), Content(detail)])


class ThroughputChart(PlotextPlot):
    """samples/s against num_workers over the finished trials, PSS on the right axis.

    One PlotextPlot in this pane (textual-plotext pins plotext < 6; plots must not share state)."""

    DEFAULT_CLASSES = "box"

    def __init__(self, state: SweepState, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.state = state

    def on_mount(self) -> None:
        super().on_mount()
        self.update_view()

    def on_resize(self) -> None:
        self.update_view()

    def update_view(self) -> None:
        state = self.state
        self.plt.clear_data()
        self.plt.clear_figure()
        # Short panes keep every row for the curves: the title carries the legend instead.
        legend = self.size.height >= 14
        report = state.report()
        families = _families(report.rows if report is not None else ())
        if not families:
            self.border_title = "samples/s vs num_workers: drawn as trials finish"
            self.refresh()
            return
        rec, knee = state.recommendation, state.knee
        main = family_key(rec.config) if rec else max(families, key=lambda f: len(families[f]))
        has_previous = self._plot_previous(main, legend)
        has_pss = self._plot_curves(families, main, legend)
        if knee is not None and knee.num_workers is not None:
            self.plt.vline(knee.num_workers, color="orange")
        if rec is not None:
            label = "recommended" if legend else None
            self.plt.scatter([rec.config.num_workers], [rec.samples_per_s], marker="★", color="red", label=label)
        self.plt.xticks(sorted({row.config.num_workers for points in families.values() for row in points}))
        if legend:
            self.plt.xlabel("num_workers")
            self.plt.ylabel("PSS MB", yside="right")  # type: ignore[call-arg]  # textual-plotext's stub calls it xside; plotext takes yside
        title = "samples/s vs num_workers"
        if not legend:
            title += " · • PSS MB (right)" if has_pss else ""
            title += " · … previous" if has_previous else ""
            title += " · ★ recommended" if rec is not None else ""
        if knee is not None and knee.num_workers is not None:
            title += f" · | knee {knee.num_workers}"
        self.border_title = title
        self.refresh()

    def _plot_previous(self, main: TrialConfig, legend: bool) -> bool:
        """The compared-with run's main family in gray; False when there is none."""
        previous = self.state.previous
        if previous is None or previous is self.state.result:
            return False
        old = _families(build_report(previous).rows).get(main)
        if not old:
            return False
        xs, ys = [row.config.num_workers for row in old], [row.samples_per_s for row in old]
        self.plt.plot(xs, ys, marker=".", color="gray", label="previous" if legend else None)
        return True

    def _plot_curves(self, families: dict[TrialConfig, list[ReportRow]], main: TrialConfig, legend: bool) -> bool:
        """Up to four families, the main one first, and its PSS on the right axis; True when PSS was drawn."""
        colors = ["cyan", "magenta", "blue", "yellow"]
        for n, (fam, points) in enumerate(sorted(families.items(), key=lambda kv: kv[0] != main)[:4]):
            label = "samples/s" if fam == main else fam.label().replace("w=0 ", "")
            xs, ys = [row.config.num_workers for row in points], [row.samples_per_s for row in points]
            self.plt.plot(xs, ys, marker="braille", color=colors[n], label=label if legend or fam != main else None)
        pss = [(row.config.num_workers, row.pss_mb) for row in families[main] if row.pss_mb is not None]
        if pss:
            counts, pss_mb = zip(*pss, strict=True)
            self.plt.plot(counts, pss_mb, marker="•", color="green", yside="right", label="PSS MB" if legend else None)
        return bool(pss)


def _families(rows: Iterable[ReportRow]) -> dict[TrialConfig, list[ReportRow]]:
    """The report's measured rows by family, each by worker count: a finalist measured twice is one point at the
    engine's mean of its runs, as the table shows it."""
    families: dict[TrialConfig, list[ReportRow]] = defaultdict(list)
    for row in rows:
        if row.status == "ok" and row.samples_per_s is not None:
            families[family_key(row.config)].append(row)
    for points in families.values():
        points.sort(key=lambda row: row.config.num_workers)
    return dict(families)
