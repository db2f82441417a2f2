"""Memory pane: each of the trial's own workers' USS over time and its growth slope, total PSS, and RSS (which
double-counts pages the workers share with the parent, so it is labelled as such).

It draws the engine's figures (ProbeSample.uss while the trial runs, its TrialResult after): which workers are the
trial's, their slopes and the ⚠. Nothing here fits or judges."""

from __future__ import annotations

from textual.content import Content

from loadertop.core.engine import mb, slope
from loadertop.faces.tui import fmt
from loadertop.faces.tui.state import SweepState
from loadertop.faces.tui.trace import WorkerMemory
from loadertop.faces.tui.widgets.pane import Pane


class MemoryPane(Pane[SweepState]):
    DEFAULT_CLASSES = "box"

    def title(self) -> str:
        trace = self.state.focus()
        if trace is None:
            return "Memory"
        when = "" if self.state.live is trace else " (done)"
        return f"Memory · trial {trace.index + 1} w={trace.config.num_workers}{when}"

    def view(self) -> Content:
        trace = self.state.focus()
        width, height = max(self.content_size.width, 20), max(self.content_size.height, 2)
        if trace is None:
            return Content.styled("waiting for the first trial…", "dim")
        total = "total PSS " if width >= 46 else "PSS "
        lines = [
            Content.assemble(
                (total, "bold"),
                f"{mb(trace.pss_mb)} · ",
                ("RSS ", "bold"),
                f"{mb(trace.rss_mb)} ",
                ("incl. shared pages" if width >= 46 else "incl. shared", "dim"),
            )
        ]
        workers = trace.workers()
        if not workers:
            text = "no workers: batches load in the main process" if trace.config.num_workers == 0 else "no USS yet"
            lines.append(Content.styled(text, "dim"))
            return Content("\n").join(lines)
        climbing = [w for w in workers if w.climbing]
        room = height - len(lines)
        if len(workers) + (1 if climbing else 0) <= room:
            shown = workers
        else:
            # Short of rows: the climbing workers first, then the rest in order; a line says what is hidden.
            keep = [*climbing, *(w for w in workers if not w.climbing)][: max(room - 1, 0)]
            shown = [w for w in workers if w in keep]
        top = max((w.now or 0.0) for w in workers)
        lines.extend(self._worker_line(worker, width, top) for worker in shown)
        hidden = [w for w in workers if w not in shown]
        if hidden:
            steepest = max((w.slope for w in hidden if w.slope is not None), default=None)
            peak = max((w.now or 0.0) for w in hidden)
            lines.append(Content.styled(f"+{len(hidden)} more · up to {mb(peak)} · steepest {slope(steepest)}", "dim"))
        if climbing and len(lines) < height:
            names = ",".join(w.label for w in climbing[:4])
            lines.append(Content.styled(f"⚠ {names}: USS keeps climbing (copy-on-read?)", "bold $warning"))
        return Content("\n").join(lines)

    def _worker_line(self, worker: WorkerMemory, width: int, top: float) -> Content:
        now = f"{mb(worker.now):>7}"
        growth = f"{slope(worker.slope):>13}"
        flag = " ⚠" if worker.climbing else ""
        label = f"{worker.label:>3} "
        room = width - len(label) - len(now) - len(growth) - len(flag) - 1
        # A floor on the scale (4 MB or 5%) keeps a few pages of noise from looking like a climb.
        spark = fmt.spark(worker.series, room, min_range=max(4.0, 0.05 * top))
        return Content.assemble(
            (label, "bold"),
            (spark, "$warning" if worker.climbing else "$accent"),
            " ",
            now,
            (growth, "bold $warning" if worker.climbing else ""),
            (flag, "bold $warning"),
        )
