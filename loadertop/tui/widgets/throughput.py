"""Throughput: the running trial's batches/s as it runs (`LivePane`), and samples/s against
num_workers over the finished trials with the knee, the recommendation and memory (`ThroughputChart`)."""

from __future__ import annotations

from collections import defaultdict
from statistics import median

from textual.content import Content
from textual_plotext import PlotextPlot

from loadertop.core.model.config import TrialConfig
from loadertop.core.model.results import TrialResult
from loadertop.tui import fmt
from loadertop.tui.state import SweepState, family
from loadertop.tui.widgets.pane import Pane


class LivePane(Pane):
    DEFAULT_CLASSES = "box"

    def title(self) -> str:
        trace = self.state.focus()
        if trace is None:
            return "Throughput"
        if self.state.live is trace:
            return f"Throughput · trial {trace.index + 1}/{self.state.total} {trace.config.label()}"
        return f"Throughput · trial {trace.index + 1} {trace.config.label()} (done)"

    def render(self) -> Content:
        trace = self.state.focus()
        width = max(self.content_size.width, 20)
        if trace is None:
            return Content.styled("batches/s of the running trial show here", "dim")
        result = trace.result
        if result is not None and result.status != "ok":
            why = (result.error or result.reason or "no reason given").strip()
            return Content.assemble((f"{result.status}: ", "bold $error"), (why, "$error"))
        if not trace.batches_per_s:
            first = f"first batch after {fmt.seconds(trace.first_batch_s)}; " if trace.first_batch_s else ""
            return Content.styled(f"{first}skipping the start-up buffer…", "dim")
        now = trace.batches_per_s[-1]
        numbers = f" {fmt.rate(now)} batches/s · {fmt.rate(trace.samples_per_s[-1])} samples/s"
        spark = fmt.spark(trace.batches_per_s, width - len(numbers), lo=0.0, min_range=1.0)
        med = result.samples_per_s if result and result.samples_per_s else median(trace.samples_per_s)
        spread = result.spread if result else trace.spread
        stall = result.stall_fraction if result else trace.stall_fraction
        # Most important first; what does not fit the width is left off rather than cut.
        pieces = [
            f"median {fmt.rate(med)} samples/s" + (f" ±{fmt.pct(spread, 1)}" if spread is not None else ""),
            f"stall {fmt.pct(stall)}",
            *([f"{fmt.pct(result.fraction_of_ceiling)} of ceiling"] if result and result.fraction_of_ceiling else []),
            f"1st batch {fmt.seconds(trace.first_batch_s)}",
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
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        # Short panes keep every row for the curves: the title carries the legend instead.
        legend = self.size.height >= 14
        # Points are rows, so a finalist measured twice is plotted at its mean, as the table shows it.
        ok = [
            (r.result, rate)
            for r in state.rows
            if r.result is not None and r.status == "ok" and (rate := r.samples_per_s())
        ]
        if not ok:
            self.border_title = "samples/s vs num_workers: drawn as trials finish"
            self.refresh()
            return
        rec = state.recommendation
        knee = state.knee
        families: dict[TrialConfig, list[tuple[TrialResult, float]]] = defaultdict(list)
        for result, rate in ok:
            families[family(result.config)].append((result, rate))
        main = family(rec.config) if rec else max(families, key=lambda f: len(families[f]))
        previous = state.previous
        has_previous = False
        if previous is not None and previous is not state.result:
            old = sorted(
                (t for t in previous.trials if t.status == "ok" and t.samples_per_s and family(t.config) == main),
                key=lambda t: t.config.num_workers,
            )
            if old:
                has_previous = True
                xs = [t.config.num_workers for t in old]
                ys = [t.samples_per_s for t in old]
                plt.plot(xs, ys, marker=".", color="gray", label="previous" if legend else None)
        colors = ["cyan", "magenta", "blue", "yellow"]
        for n, (fam, results) in enumerate(sorted(families.items(), key=lambda kv: kv[0] != main)[:4]):
            results.sort(key=lambda point: point[0].config.num_workers)
            xs = [t.config.num_workers for t, _ in results]
            label = "samples/s" if fam == main else fam.label().replace("w=0 ", "")
            ys = [rate for _, rate in results]
            plt.plot(xs, ys, marker="braille", color=colors[n], label=label if legend or fam != main else None)
        mains = sorted((t for t, _ in families[main]), key=lambda t: t.config.num_workers)
        pss = [(t.config.num_workers, t.total_pss_mb) for t in mains if t.total_pss_mb is not None]
        if pss:
            xs, ys = zip(*pss, strict=True)
            plt.plot(xs, ys, marker="•", color="green", yside="right", label="PSS MB" if legend else None)
        has_knee = knee is not None and knee.num_workers is not None
        if knee is not None and knee.num_workers is not None:
            plt.vline(knee.num_workers, color="orange")
        if rec is not None:
            plt.scatter(
                [rec.config.num_workers],
                [rec.samples_per_s],
                marker="★",
                color="red",
                label="recommended" if legend else None,
            )
        plt.xticks(sorted({t.config.num_workers for t, _ in ok}))
        if legend:
            plt.xlabel("num_workers")
            plt.ylabel("PSS MB", yside="right")
        title = "samples/s vs num_workers"
        if not legend:
            title += " · • PSS MB (right)" if pss else ""
            title += " · … previous" if has_previous else ""
            title += " · ★ recommended" if rec is not None else ""
        if has_knee and knee is not None:
            title += f" · | knee {knee.num_workers}"
        self.border_title = title
        self.refresh()
