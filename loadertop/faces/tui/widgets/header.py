"""Header: the machine, the workload, progress, and at the end the recommendation and its snippet."""

from __future__ import annotations

from textual.content import Content

from loadertop.core.engine import clock, mb, rate
from loadertop.core.model.results import MachineInfo
from loadertop.faces.tui import fmt
from loadertop.faces.tui.state import SweepState
from loadertop.faces.tui.widgets.pane import Pane


class HeaderPane(Pane[SweepState]):
    status_line: Content | None = None  # the last export/snippet paths, set by the app

    def view(self) -> Content:
        state = self.state
        lines = [self._machine_line(state.machine), self._progress_line()]
        rec = state.recommendation
        if state.phase == "finished" and rec is not None:
            lines.append(
                Content.assemble(
                    ("★ ", "bold $success"),
                    (f"{rec.config.label()}", "bold"),
                    f": {rate(rec.samples_per_s)} samples/s. ",
                    rec.reason,
                )
            )
            lines.append(Content.styled(rec.snippet, "bold $accent"))
            knee = state.knee
            if knee is not None and self.app.size.height >= 40:
                where = f"{knee.num_workers} workers" if knee.num_workers is not None else "no clear knee"
                lines.append(Content.assemble(("◆ knee: ", "$accent"), f"{where} ({knee.rule}): {knee.reason}"))
        notice = next((n for n in reversed(state.notices) if n.level in ("warning", "error")), None)
        if notice is not None:
            style = "$error" if notice.level == "error" else "$warning"
            lines.append(Content.assemble(("! ", f"bold {style}"), (notice.message, style)))
        latest = state.notices[-1] if state.notices and state.running else None
        if latest is not None and latest is not notice:
            # The notice line: the engine's latest word (the search's last decision, the ceilings), one line, in
            # place of toasts over the table.
            line = Content.assemble(("· ", "bold $accent"), (latest.message, "dim"))
            width = self.content_size.width
            lines.append(line.truncate(width, ellipsis=True) if width > 0 else line)
        if self.status_line is not None:
            lines.append(self.status_line)
        return Content("\n").join(lines)

    def _machine_line(self, machine: MachineInfo | None) -> Content:
        if machine is None:
            return Content.assemble(("loadertop", "bold $accent"), "  looking at this machine…")
        cpus = f"{machine.usable_cpus} usable CPU{'s' if machine.usable_cpus != 1 else ''}"
        if machine.logical_cpus != machine.usable_cpus:
            cpus += f" of {machine.logical_cpus}"
        if machine.cpu_quota is not None:
            cpus += f" (quota {machine.cpu_quota:g})"
        mem = f"{mb(machine.mem_total_mb)} RAM, {mb(machine.mem_available_mb)} free"
        if machine.gpus:
            names = sorted({g.name.removeprefix("NVIDIA ") for g in machine.gpus})
            gpus = f"{len(machine.gpus)}× {', '.join(names)}"
        else:
            gpus = "no GPU"
        return Content.assemble(
            ("loadertop ", "bold $accent"), (machine.hostname, "bold"), f"  {cpus} · {mem} · {gpus}"
        )

    def _progress_line(self) -> Content:
        state = self.state
        workload = ""
        if state.settings is not None:
            s = state.settings
            args = ",".join(f"{k}={v}" for k, v in s.dataset_args)
            dataset = f"{s.dataset}:{args}" if args else s.dataset
            step = f" · step {s.step_ms:g} ms" if s.step_ms else ""
            batch = ",".join(map(str, s.batch_sizes))
            workers = fmt.worker_list(s.workers)
            workload = f"{dataset} · bs {batch} · workers {workers}{step}  "
        parts: list[str | tuple[str, str]] = [(workload, "dim")]
        if state.phase == "running":
            config = state.current_config()
            if state.current is not None and config is not None:
                parts.append((f"trial {state.current + 1}/{state.total}", "bold"))
                parts.append(self._grown())
                parts.append(f" {config.label()}")
            else:
                parts.append(f"starting ({_trials(state.total)} planned)")
            parts.append(f" · {clock(state.t)} elapsed · {state.count.left()}")
            if state.only:
                parts.append(" · row rerun")
            if state.paused:
                parts.append(("  ⏸ PAUSED", "bold reverse $warning"))
            elif state.stopping:
                parts.append(("  ■ stopping after this trial", "bold $warning"))
        elif state.phase == "finished" and state.result is not None:
            result = state.result
            # A row rerun's result is the whole merged table: say what the rerun itself measured.
            trials = state.measured if state.only else list(result.trials)
            failed = sum(t.status != "ok" for t in trials)
            if state.only:
                again = ", ".join(dict.fromkeys(t.config.label() for t in trials)) or "nothing"
                parts.append((f"row rerun done: {again} measured again, {_trials(len(trials))}", "bold"))
            else:
                parts.append((f"done: {_trials(len(trials))}", "bold"))
                ran = state.count.ran(len(trials))
                parts.append(f" ({ran})" if ran else "")
            if failed:
                parts.append(f" ({failed} not ok)")
            parts.append(f" in {clock(result.wall_s or state.t)}")
            if result.interrupted:
                parts.append(("  stopped early", "$warning"))
            if state.recommendation is None:
                parts.append(("  no recommendation", "$warning"))
        elif state.phase == "crashed":
            parts.append(("sweep failed: ", "bold $error"))
            parts.append((state.error or "unknown error", "$error"))
        elif state.result is not None:
            parts.append("previous run loaded")
        else:
            parts.append("starting…")
        return Content.assemble(*parts)

    def _grown(self) -> str:
        """' (8 planned +1 refine)' once the search has added trials to its first plan: the total grew, and why."""
        why = self.state.count.why()
        return f" ({why})" if why else ""


def _trials(n: int) -> str:
    return f"{n} trial{'' if n == 1 else 's'}"
