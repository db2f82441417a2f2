"""`loadertop stages`' headless face: the stage table (ms and CPU ms per sample, share bars), the stages' sum against
the 0-worker time, the ceilings, the worker start, the profiling's overhead and the advice, laid out for the output's
width (80 columns fit). Every figure is the engine's StagesReport's, printed through its formatters.
"""

from __future__ import annotations

from typing import TextIO

from rich.console import Console, Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from loadertop.core.engine import NONE, mb, num, pct, rate, seconds
from loadertop.core.model.stages import StageRow, StagesReport
from loadertop.faces.headless_table import output_width

BAR = 10  # cells of a share bar
IF_FREE = 3  # the stages whose "were it free" ceiling is listed: the largest by CPU
# The parts past the 0-worker time, under a heading of their own.
PARTS = {"handoff": "+ a worker's hand-over", "main": "+ the main process's own work"}


def ms(value: float | None) -> str:
    """Milliseconds per sample: two decimals, three below 0.1 ms."""
    if value is None:
        return NONE
    return num(value * 1000, 2 if value * 1000 >= 0.1 else 3)


def bar(share: float | None) -> str:
    if share is None:
        return ""
    filled = max(0, min(BAR, int(share * BAR + 0.5)))
    return "█" * filled + "·" * (BAR - filled)


def title(report: StagesReport) -> str:
    m = report.measurement
    size = f"{m.length} samples" if m.length is not None else "iterable"
    return (f"loadertop stages: {m.dataset} ({size}), batch {m.batch_size}, 0 workers, one process: "
            f"{m.samples} samples timed in {seconds(m.elapsed_s)}")  # fmt: skip


def stage_table(report: StagesReport, width: int) -> Table:
    """The stages, one line each: the figures keep their width, the stage's name is cut (…) to fit `width`."""
    table = Table(title=escape(title(report)), title_justify="left")
    figures = (("ms/sample", 9), ("CPU ms", 7), ("share", 5), ("", BAR))
    name_width = max(12, width - sum(w for _, w in figures) - 3 * len(figures) - 4)
    table.add_column("stage", no_wrap=True, overflow="ellipsis", max_width=name_width)
    for header, cells in figures:
        table.add_column(header, justify="right" if header else "left", no_wrap=True, min_width=cells)
    part = "sample"
    for row in report.rows:
        if row.stage.part != part:
            part = row.stage.part
            table.add_section()
            table.add_row(Text(PARTS.get(part) or part, style="dim"))
        style = "yellow" if row.stage.kind == "unattributed" else None
        table.add_row(escape(row.stage.name), ms(row.stage.wall_s), ms(row.stage.cpu_s), pct(row.share),
                      bar(row.share), style=style)  # fmt: skip
    return table


def sums(report: StagesReport) -> list[str]:
    m = report.measurement
    apart = f"{pct(abs(report.gap))} {'under' if report.gap > 0 else 'over'}"
    lines = [
        f"sum of the stages {ms(report.stages_wall_s)} ms per sample against the 0-worker time "
        f"{ms(report.reference_wall_s)} ms ({m.reference}): {apart}",
        f"{'dataset[i]' if not m.dataset.startswith('graph ') else 'the graph'} alone {ms(m.sample_wall_s)} ms "
        f"({ms(m.sample_cpu_s)} CPU ms); the whole pipeline {ms(report.pipeline_cpu_s)} CPU ms per sample on "
        f"{report.cpus} usable CPUs",
    ]
    unmeasured = [f"{r.stage.name} ({r.stage.note})" for r in report.rows if r.stage.wall_s is None]
    if unmeasured:
        lines.append("not measured: " + "; ".join(unmeasured))
    return lines


def listed(head: str, items: list[str], mark: str = "") -> RenderableType:
    """A heading, then each item under it, wrapped under its own first word (not under the heading)."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column()
    for item in items:
        grid.add_row(f" {mark}", Text(item))
    return Group(Text(head), grid)


def ceiling_items(report: StagesReport) -> list[str]:
    items = [f"{c.name}: ~{rate(c.samples_per_s)} samples/s ({c.basis})" for c in report.ceilings]
    largest = sorted((r for r in report.rows if r.if_free is not None), key=lambda r: -(r.cpu_share or 0.0))
    return items + [f"were {free_name(r)} free: ~{rate(r.if_free)} samples/s" for r in largest[:IF_FREE]]


def free_name(row: StageRow) -> str:
    return f"{row.stage.name} ({pct(row.cpu_share)} of the CPU)"


def start_lines(report: StagesReport) -> list[str]:
    m = report.measurement
    lines = [
        f"worker start: a fresh worker's first batch {seconds(m.worker_first_batch_s)}, 0 workers' "
        f"{seconds(m.main_first_batch_s)}; the first sample in a fresh process {seconds(m.first_sample_s)}"
    ]
    if m.lazy_imports:
        said = ", ".join(
            f"{lazy.package} ({lazy.modules} module{'s' if lazy.modules != 1 else ''}, {seconds(lazy.seconds)})"
            for lazy in m.lazy_imports
        )
        lines.append(f"imported by the first sample: {said}")
    if m.libraries:
        lines.append("by library (profiled): " + ", ".join(f"{s.library} {pct(s.share)}" for s in m.libraries))
    lines.append(
        f"batch: {mb(m.batch_bytes / 2**20)} ({', '.join(m.tensors) or NONE}); profiling overhead (CPU): hooks "
        f"{pct(m.hooks_overhead, signed=True)}, cProfile {pct(m.profile_overhead, signed=True)} (the profile only "
        f"splits what the hooks and the plain samples timed)"
    )
    return lines + [f"note: {note}" for note in m.notes]


def advice_block(report: StagesReport) -> RenderableType:
    if not report.advice:
        return Text("advice: none (no rule's premise holds on these figures)")
    return listed("advice:", [advice.text for advice in report.advice], "*")


def render(report: StagesReport, width: int) -> RenderableType:
    return Group(
        stage_table(report, width),
        *(Text(line) for line in sums(report)),
        listed("ceilings on this machine:", ceiling_items(report)),
        *(Text(line) for line in start_lines(report)),
        advice_block(report),
    )


TOP = 3  # the stages a sweep's short section lists: the largest by CPU


def short_section(report: StagesReport) -> RenderableType:
    """A sweep's stages in a few lines: the largest stages by CPU, the ceilings, the advice (`loadertop stages` has
    the whole table)."""
    m = report.measurement
    top = sorted((r for r in report.rows if r.cpu_share is not None), key=lambda r: -(r.cpu_share or 0.0))[:TOP]
    items = [f"{r.stage.name}: {ms(r.stage.wall_s)} ms, {ms(r.stage.cpu_s)} CPU ms per sample, {pct(r.cpu_share)} "
             f"of the CPU" for r in top]  # fmt: skip
    head = (f"Where the time goes ({m.dataset}, batch {m.batch_size}, 0 workers, one process: {m.samples} samples "
            f"timed in {seconds(m.elapsed_s)}; {ms(report.pipeline_cpu_s)} CPU ms per sample in all):")  # fmt: skip
    ceilings = [f"{c.name}: ~{rate(c.samples_per_s)} samples/s ({c.basis})" for c in report.ceilings]
    return Group(
        listed(head, items),
        listed("Ceilings:", ceilings),
        advice_block(report),
        Text("(loadertop stages --dataset SPEC: every stage, the worker start, the libraries)", style="dim"),
    )


def print_stages(report: StagesReport, out: TextIO) -> None:
    """The report on `out`, at its width (a file or a pipe: $COLUMNS, else 100)."""
    width = output_width(out)
    tty = out.isatty()
    console = Console(width=width, no_color=not tty, highlight=False, force_terminal=tty)
    with console.capture() as captured:
        console.print(render(report, width))
    text = captured.get()
    # rich pads a wrapped line to the width; a file or a pipe gets it without
    out.write(text if tty else "\n".join(line.rstrip() for line in text.split("\n")))
