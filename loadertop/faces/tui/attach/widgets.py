"""The attach view's panes: the job's header, its workers' memory and CPU, the GPU, and the warnings.

Each reads the shared LiveState (`Pane` repaints only what changed); the throughput chart is in chart.py.
"""

from __future__ import annotations

from textual.content import Content

from loadertop.core.engine import clock, mb, num, pct, percent, rate, slope, utilization
from loadertop.core.model.stages import LIVE_STAGES
from loadertop.faces.tui import fmt
from loadertop.faces.tui.attach.state import LiveState, WorkerTrace
from loadertop.faces.tui.widgets.pane import Pane

WATCH_HINT = "for batch in loadertop.watch(loader):"
SPARK_MIN = 8  # cells of a worker's USS sparkline before the numbers beside it give way


class AttachHeader(Pane[LiveState]):
    """Who is watched (pid, command, watched or not), how often, for how long, the latest figures, and the end."""

    def view(self) -> Content:
        state = self.state
        info = state.session
        if info is None:
            return Content.assemble(("loadertop attach", "bold $accent"), ("  pick a job…", "dim"))
        watched = ("watched", "bold $success") if info.watched else ("not watched: psutil and NVML only", "$warning")
        first = Content.assemble(
            ("loadertop attach ", "bold $accent"),
            (f"pid {info.pid}", "bold"),
            " · ",
            watched,
            f" · every {info.interval:g} s · {clock(state.elapsed())} elapsed",
        )
        lines = [first, Content.styled(info.command or "(command line unknown)", "dim"), self._figures()]
        if state.ended is not None:
            lines.append(
                Content.assemble(
                    ("■ the job ended: ", "bold $warning"),
                    (state.ended, "$warning"),
                    ("  (last view kept · p picks another job · q quits)", "dim"),
                )
            )
        elif state.error is not None:
            lines.append(Content.assemble(("■ ", "bold $error"), (state.error, "$error")))
        return Content("\n").join(lines)

    def _figures(self) -> Content:
        snap = self.state.last
        if snap is None:
            return Content.styled("waiting for the first interval…", "dim")
        parts: list[str | tuple[str, str]] = []
        if not snap.watched:
            memory = f"total PSS {mb(snap.total_pss_mb)} · main CPU {percent(snap.main_cpu_percent)}"
            return Content.assemble(memory, ("  (rates and epochs need loadertop.watch() in the job)", "dim"))
        if snap.epoch is not None:
            parts += [("epoch ", "dim"), (f"{snap.epoch}", "bold"), "  "]
        parts += [(rate(snap.samples_per_s), "bold"), " samples/s · ", (rate(snap.batches_per_s), "bold")]
        parts += [" batches/s · stall ", (pct(snap.stall_fraction), "bold")]
        if snap.step_ms is not None:
            parts.append(f" · step {snap.step_ms:.1f} ms")
        if snap.wait_ms_p95 is not None:
            parts.append(f" · wait p95 {snap.wait_ms_p95:.1f} ms")
        return Content.assemble(*parts)


class WorkersPane(Pane[LiveState]):
    """Per worker: USS over time, its slope ± error in MB/min, PSS and CPU; the job's totals above them."""

    DEFAULT_CLASSES = "box"

    def title(self) -> str:
        n = len(self.state.current_workers())
        return f"Workers · {n} · USS over time, slope, PSS, CPU" if n else "Workers"

    def view(self) -> Content:
        snap = self.state.last
        width, height = max(self.content_size.width, 20), max(self.content_size.height, 2)
        if snap is None:
            return Content.styled("waiting for the first interval…", "dim")
        main = f"main CPU {percent(snap.main_cpu_percent)} · RSS {mb(snap.main_rss_mb)}"
        lines = [
            Content.assemble(("total PSS ", "bold"), f"{mb(snap.total_pss_mb)} · {main}"),
            Content.styled(f"{mb(snap.mem_available_mb)} available to the job", "dim"),
        ]
        workers = self.state.current_workers()
        if not workers:
            lines.append(Content.styled("no worker processes: batches load in the main process", "dim"))
            return Content("\n").join(lines)
        flagged = [w for w in workers if w.last and w.last.leaking]
        room = height - len(lines)
        shown = workers if len(workers) <= room else [*flagged, *(w for w in workers if w not in flagged)][: room - 1]
        top = max((w.last.uss_mb or 0.0) for w in workers if w.last)
        lines += [self._line(w, width, top, w in flagged) for w in workers if w in shown]
        hidden = [w for w in workers if w not in shown]
        if hidden:
            slopes = [w.last.uss_slope_mb_per_min for w in hidden if w.last and w.last.uss_slope_mb_per_min]
            steepest = max(slopes, default=None)
            lines.append(Content.styled(f"+{len(hidden)} more · steepest {slope(steepest)}", "dim"))
        return Content("\n").join(lines)

    def _line(self, worker: WorkerTrace, width: int, top: float, flag: bool) -> Content:
        last = worker.last
        assert last is not None  # current workers were seen in the last snapshot
        label = f"{worker.label:>3} "
        mark = " ⚠" if flag else ""
        # The numbers matter more than the sparkline: USS and slope always, then CPU, PSS and the slope's error
        # while the sparkline keeps SPARK_MIN cells.
        fields = [f" {mb(last.uss_mb):>7}", f" {slope(last.uss_slope_mb_per_min):>13}"]
        extra = {
            "cpu": f" CPU {percent(last.cpu_percent):>4}",
            "pss": f" PSS {mb(last.pss_mb, short=True):>5}",
        }
        used = len(label) + len(mark) + sum(map(len, fields))
        slope_err = slope(last.uss_slope_mb_per_min, last.uss_slope_err_mb_per_min)
        if width - used - (len(slope_err) - 13) >= SPARK_MIN + 30:
            fields[1] = f" {slope_err:>17}"
            used += 4
        for key in ("cpu", "pss"):
            if width - used - len(extra[key]) >= SPARK_MIN:
                used += len(extra[key])
            else:
                extra[key] = ""
        spark = fmt.spark(worker.uss, max(width - used, 0), min_range=max(4.0, 0.05 * top))
        return Content.assemble(
            (label, "bold"),
            (spark, "$warning" if flag else "$accent"),
            fields[0],
            (fields[1], "bold $warning" if flag else ""),
            extra["pss"],
            extra["cpu"],
            (mark, "bold $warning"),
        )


class RanksPane(Pane[LiveState]):
    """Attached to a launcher (torchrun): each rank's samples/s, stall, data wait (mean, p95, p99) and workers, the
    job's samples/s and the slowest rank, all as the engine folded them (engine/live/ranks.py). Hidden for one job."""

    DEFAULT_CLASSES = "box"

    def title(self) -> str:
        view = self.state.last.ranks if self.state.last is not None else None
        if view is None:
            return "Ranks"
        slowest = f" · slowest: rank {view.slowest_rank}" if view.slowest_rank is not None else ""
        return f"Ranks · job {rate(view.samples_per_s)} samples/s{slowest}"

    def view(self) -> Content:
        view = self.state.last.ranks if self.state.last is not None else None
        if view is None:
            return Content("")
        lines = [Content.styled("rank     pid samples/s stall  mean   p95   p99 wkr", "dim")]  # waits in ms
        for row in view.ranks:
            text = (
                f"{row.rank:>4} {row.pid:>7} {rate(row.samples_per_s):>9} {pct(row.stall_fraction):>5} "
                f"{num(row.wait_ms_mean, 1):>5} {num(row.wait_ms_p95, 1):>5} {num(row.wait_ms_p99, 1):>5} "
                f"{row.workers:>3}"
            )
            if row.slowest:
                lines.append(Content.assemble((text, "bold $warning"), (" ←", "bold $warning")))
            elif row.ended:
                lines.append(Content.styled(f"{text}  ended", "dim"))
            else:
                lines.append(Content(text))
        lines.append(Content.styled(view.pacing, "$accent"))
        return Content("\n").join(lines)

    def update_view(self) -> None:
        self.display = self.state.last is not None and self.state.last.ranks is not None
        super().update_view()
        self.refresh(layout=True)  # the sentence naming the slowest rank wraps


class GpuLivePane(Pane[LiveState]):
    """The job's GPU utilization over time with now/avg/max, or the engine's "unavailable: reason"."""

    DEFAULT_CLASSES = "box"

    def title(self) -> str:
        return "GPU utilization (the job's GPUs)"

    def view(self) -> Content:
        state = self.state
        width = max(self.content_size.width, 20)
        values = [v for v in state.gpu_util if v is not None]
        snap = state.last
        if not values:
            why = snap.gpu_unavailable if snap is not None else None
            if snap is None:
                return Content.styled("waiting for the first interval…", "dim")
            return Content.styled(why or "unavailable: no GPU reading yet", "$warning")
        now = snap.gpu_util if snap is not None else None
        stats = utilization(now, values)
        spark = fmt.spark(values, width - len(stats) - 1, lo=0, hi=100)
        return Content.assemble((spark, "$accent"), " ", stats)


class MessagesPane(Pane[LiveState]):
    """Leak warnings first and in bold, then other warnings, what cannot be shown (`missing`), and the tune notes."""

    DEFAULT_CLASSES = "box"

    def title(self) -> str:
        leaks = len(self.state.leak_warnings())
        return f"Warnings · ⚠ {leaks} leak" if leaks else "Warnings, missing, notes"

    def view(self) -> Content:
        state = self.state
        snap = state.last
        if snap is None:
            return Content.styled("warnings, what cannot be shown and tune notes show here", "dim")
        lines = [Content.assemble(("⚠ ", "bold $error"), (w, "bold $error")) for w in state.leak_warnings()]
        lines += [Content.assemble(("! ", "bold $warning"), (w, "$warning")) for w in state.other_warnings()]
        lines += [Content.assemble(("missing: ", "dim"), (m, "dim")) for m in snap.missing]
        if not snap.watched and not any(WATCH_HINT in m for m in snap.missing):
            lines.append(Content.styled(f"to see rates and epochs, iterate with `{WATCH_HINT}`", "dim"))
        lines += [Content.assemble(("· ", "$accent"), note) for note in list(state.notes)[-4:]]
        if not lines:
            lines.append(Content.styled("no warnings", "dim"))
        lines.append(Content.styled(LIVE_STAGES, "dim"))  # where the time goes inside a sample: said, not guessed
        return Content("\n").join(lines)

    def update_view(self) -> None:
        super().update_view()
        self.refresh(layout=True)  # long warnings wrap: the height follows the text, not its line count
