"""GPU pane: a utilization sparkline per GPU with now/avg/max beside it, or, without NVML, why not
and the consumer-busy % (1 − stall fraction) instead."""

from __future__ import annotations

from textual.content import Content

from loadertop.core.engine import utilization
from loadertop.faces.tui import fmt
from loadertop.faces.tui.state import SweepState
from loadertop.faces.tui.widgets.pane import Pane


class GpuPane(Pane[SweepState]):
    DEFAULT_CLASSES = "box"

    def has_gpus(self) -> bool:
        machine = self.state.machine
        return bool(self.state.gpu_recent or (machine and machine.gpus)) and not self.state.gpu_unavailable

    def title(self) -> str:
        return "GPU utilization" if self.has_gpus() else "GPU · consumer busy"

    def view(self) -> Content:
        state = self.state
        width = max(self.content_size.width, 20)
        trace = state.focus()
        # While a trial runs the sparkline scrolls across trials; afterwards it is the shown trial's.
        live = state.live is not None or trace is None
        lines: list[Content] = []
        if self.has_gpus():
            machine = state.machine
            indices = sorted(set(state.gpu_recent) | {g.index for g in (machine.gpus if machine else ())})
            for i in indices:
                trial = trace.gpu_util.get(i, []) if trace else []
                recent = state.gpu_recent.get(i, []) if live else trial
                # now / avg / max (the engine's): the sparkline rescales, so the absolute numbers sit beside it
                stats = utilization(recent[-1] if recent else None, trial)
                label = f"{i} "
                spark = fmt.spark(recent, width - len(label) - len(stats) - 1, lo=0, hi=100)
                lines.append(Content.assemble((label, "bold"), (spark, "$accent"), " ", stats))
            if self.app.size.height >= 30:
                lines.append(Content.styled("% of time a kernel ran (NVML); avg/max: this trial", "dim"))
            return Content("\n").join(lines)
        lines.append(Content.styled(fmt.no_gpu_line(state.gpu_unavailable), "$warning"))
        trial_busy = trace.busy if trace else []
        recent = state.busy_recent if live else trial_busy
        stats = utilization(recent[-1] if recent else None, trial_busy, scale=100.0)
        label = "busy "
        spark = fmt.spark(recent, width - len(label) - len(stats) - 1, lo=0.0, hi=1.0)
        lines.append(Content.assemble((label, "bold"), (spark, "$accent"), " ", stats))
        if self.app.size.height >= 30:
            lines.append(Content.styled("consumer busy = 1 − stall fraction", "dim"))
        return Content("\n").join(lines)
