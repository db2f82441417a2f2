"""`loadertop report RUN`: a finished sweep as one file to attach to a pull request or a chat.

It draws the engine's report (engine/report/rows.py) and nothing else: samples/s against num_workers with each
row's spread as error bars, the knee, the pick, each configuration's memory and epoch restart, the reason and the
DataLoader line, and the machine. matplotlib (the `report` extra) is imported only here, only when a file is drawn.
The HTML page holds its figure as inline SVG and loads nothing: it can be opened anywhere, offline."""

from __future__ import annotations

import html
import io
import re
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loadertop import __version__
from loadertop.core.engine import HEADERS, NONE, Report, ReportRow, build_report, num, pct, rate, read_run, seconds
from loadertop.core.model.config import TrialConfig, UsageError
from loadertop.core.model.curves import curve_key, on_curve
from loadertop.core.model.results import SweepResult

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure, SubFigure

INSTALL = "pip install 'loadertop[report]'"
FORMATS = ("html", "svg", "png")
MAX_CURVES = 6  # more curves than this are left to the table: a legend of ten lines is read by nobody
COLORS = ("#1f5fa8", "#d9731a", "#2e8b57", "#8e44ad", "#b03a48", "#6b7a8f")
PICK, KNEE, SAME, FAILED = "#e8b400", "#c0392b", "#555555", "#b03a48"
HOLLOW = (1.0, 1.0, 1.0, 0.0)  # a marker's face left clear: its ring alone
PICK_BOX = {"boxstyle": "round,pad=0.3", "facecolor": "white", "edgecolor": PICK, "alpha": 0.92}
LEGEND_MARKS = ("± spread", "pick", "knee", "within noise", "failed")  # after the curves, in this order
WIDTH_IN = 12.0
STYLE: dict[str, Any] = {
    "svg.fonttype": "path",  # glyphs as shapes: the picture reads the same wherever it is opened
    "svg.hashsalt": "loadertop",  # the same report draws the same file
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.titleweight": "bold",
    "axes.titlelocation": "left",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#e3e3e3",
    "grid.linewidth": 0.8,
    "legend.frameon": False,
}


@dataclass(frozen=True)
class Curve:
    """One curve of the report: its rows by worker count (the family's 0-worker origin first)."""

    label: str
    rows: tuple[ReportRow, ...]
    main: bool  # the pick's curve (or the knee's, or the longest)


@dataclass(frozen=True)
class Shared:
    """What one report file shows: the run, its report, and the curves drawn from it."""

    result: SweepResult
    report: Report
    curves: tuple[Curve, ...]
    source: Path

    @property
    def failed(self) -> tuple[ReportRow, ...]:
        return tuple(row for row in self.report.rows if row.status != "ok")


def load(path: Path) -> Shared:
    """A run folder or a result JSON file, as its report; UsageError (one line) when there is nothing to draw."""
    if not path.exists():
        raise UsageError(f"{path}: no such run folder or result file")
    try:
        result = read_run(path)
    except UsageError:
        raise
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    report = build_report(result)
    found = curves(report)
    if not found:
        raise UsageError(f"{path}: no finished trial to draw (every configuration failed or was skipped)")
    return Shared(result, report, found, path)


def _drawn(row: ReportRow) -> bool:
    return row.status == "ok" and row.samples_per_s is not None


def curves(report: Report) -> tuple[Curve, ...]:
    """The report's finished rows as curves (the model's definition of one), the pick's curve first."""
    done = [row for row in report.rows if _drawn(row)]
    keys = list(dict.fromkeys(curve_key(row.config) for row in done if row.config.num_workers > 0))
    if not keys:  # only 0-worker rows: one curve of their points
        keys = list(dict.fromkeys(curve_key(row.config) for row in done))
    marked = report.recommended or next((row for row in done if row.knee), None)
    main: TrialConfig | None
    if marked is not None and marked.config.num_workers > 0:
        main = curve_key(marked.config)
    else:
        main = max(keys, key=lambda key: sum(on_curve(row.config, key) for row in done), default=None)
    found = []
    for key in keys:
        points = sorted((row for row in done if on_curve(row.config, key)), key=lambda row: row.config.num_workers)
        label = key.label().removeprefix("w=0").strip() or "0 workers"
        found.append(Curve(label, tuple(points), key == main))
    return tuple(sorted(found, key=lambda curve: not curve.main))


def _matplotlib() -> tuple[type[Figure], Any]:
    try:
        import matplotlib
        from matplotlib.figure import Figure
    except ImportError:
        raise UsageError(f"drawing a report needs matplotlib: {INSTALL}") from None
    return Figure, matplotlib


@contextmanager
def _style() -> Iterator[type[Figure]]:
    figure, matplotlib = _matplotlib()
    with matplotlib.rc_context(STYLE):
        yield figure


# Drawing.


def _series(rows: tuple[ReportRow, ...], attr: str) -> tuple[list[int], list[float]]:
    pairs = [(row.config.num_workers, getattr(row, attr)) for row in rows if getattr(row, attr) is not None]
    return [x for x, _ in pairs], [float(y) for _, y in pairs]


def _workers(n: int) -> str:
    return f"{n} worker" if n == 1 else f"{n} workers"


def _worker_ticks(ax: Axes, shared: Shared) -> None:
    counts = sorted({row.config.num_workers for row in shared.report.rows})
    if counts and counts[-1] > 16:  # 0, 1, 2, 4 ... 64 on a linear axis would crowd the few that matter most
        ax.set_xscale("symlog", linthresh=1.0, linscale=0.6)
    ax.set_xticks(counts, [str(n) for n in counts])
    ax.set_xlabel("num_workers")


def draw_throughput(ax: Axes, shared: Shared) -> None:
    """samples/s against num_workers per curve, each point ± its spread (the table's ± column); the pick, the knee,
    the configurations within noise of the best and the failed ones marked."""
    top = 0.0
    for n, curve in enumerate(shared.curves[:MAX_CURVES]):
        xs, ys = _series(curve.rows, "samples_per_s")
        err = [(row.spread or 0.0) * (row.samples_per_s or 0.0) for row in curve.rows if _drawn(row)]
        color = COLORS[n % len(COLORS)]
        ax.errorbar(xs, ys, yerr=err, color=color, marker="o", markersize=5 if curve.main else 4, capsize=4,
                    linewidth=2.4 if curve.main else 1.3, alpha=1.0 if curve.main else 0.8, label=curve.label,
                    zorder=3 if curve.main else 2)  # fmt: skip
        if curve.main:
            low = [y - e for y, e in zip(ys, err, strict=True)]
            high = [y + e for y, e in zip(ys, err, strict=True)]
            ax.fill_between(xs, low, high, color=color, alpha=0.12, linewidth=0, label="± spread")
        top = max([top, *(y + e for y, e in zip(ys, err, strict=True))])
    _mark_rows(ax, shared)
    ax.set_ylim(0, top * 1.25 if top > 0 else 1)
    _worker_ticks(ax, shared)
    ax.set_ylabel("samples/s")
    ax.set_title("Throughput: samples/s against num_workers (median, error bars ± the spread)")
    more = len(shared.curves) - MAX_CURVES
    if more > 0:
        ax.text(1.0, 1.01, f"{more} more curves in the table", transform=ax.transAxes, ha="right", fontsize=9)
    ax.margins(x=0.03)
    _legend(ax)


def _mark_rows(ax: Axes, shared: Shared) -> None:
    rows = shared.report.rows
    same = [row for row in rows if row.equivalent and _drawn(row)]
    if same:
        ax.scatter(*_series(tuple(same), "samples_per_s"), s=190, facecolors=HOLLOW, edgecolors=SAME, linewidths=1.4,
                   zorder=4, label="within noise of the best")  # fmt: skip
    knee = next((row for row in rows if row.knee and _drawn(row)), None)
    pick = shared.report.recommended
    if knee is not None:
        ax.axvline(knee.config.num_workers, color=KNEE, linestyle=":", linewidth=1.4, zorder=1)
        ax.scatter(*_series((knee,), "samples_per_s"), marker="D", s=150 if knee is pick else 110,
                   facecolors=HOLLOW, edgecolors=KNEE, linewidths=1.8, zorder=7,
                   label=f"knee: {_workers(knee.config.num_workers)}")  # fmt: skip
    if pick is not None and pick.samples_per_s is not None:
        ax.scatter([pick.config.num_workers], [pick.samples_per_s], marker="*", s=420, color=PICK, edgecolors="black",
                   linewidths=0.8, zorder=6, label="pick")  # fmt: skip
        what = "pick and knee" if pick is knee else "pick"
        ax.annotate(f"{what}: {_workers(pick.config.num_workers)}\n{rate(pick.samples_per_s)} samples/s",
                    (pick.config.num_workers, pick.samples_per_s), xytext=(16, 20), textcoords="offset points",
                    fontsize=10, fontweight="bold", zorder=8,
                    bbox=PICK_BOX)  # fmt: skip
    failed = shared.failed
    if failed:
        ax.scatter([row.config.num_workers for row in failed], [0.0] * len(failed), marker="x", s=70, color=FAILED,
                   linewidths=2, zorder=5, clip_on=False, label=f"failed ({len(failed)})")  # fmt: skip


def _legend(ax: Axes) -> None:
    """The curves first, then the band and the marks, in rows under the chart."""
    handles, labels = ax.get_legend_handles_labels()

    def place(i: int) -> int:
        return next((n for n, mark in enumerate(LEGEND_MARKS) if labels[i].startswith(mark)), -1)

    order = sorted(range(len(labels)), key=place)
    ax.legend([handles[i] for i in order], [labels[i] for i in order], loc="upper center",
              bbox_to_anchor=(0.5, -0.13), ncol=min(len(order), 5), fontsize=9)  # fmt: skip


def draw_memory(ax: Axes, shared: Shared) -> None:
    """Each configuration's PSS (every process of the loader) per curve; the largest worker's USS on the pick's."""
    for n, curve in enumerate(shared.curves[:MAX_CURVES]):
        color = COLORS[n % len(COLORS)]
        xs, ys = _series(curve.rows, "pss_mb")
        ax.plot(xs, ys, color=color, marker="o", markersize=4, linewidth=2.2 if curve.main else 1.2,
                alpha=1.0 if curve.main else 0.75, label="PSS, all processes" if curve.main else None)  # fmt: skip
        if curve.main:
            ux, uy = _series(curve.rows, "uss_per_worker_mb")
            ax.plot(ux, uy, color=color, marker="s", markersize=3.5, linestyle="--", linewidth=1.2,
                    label="USS of the largest worker")  # fmt: skip
    pick = shared.report.recommended
    if pick is not None and pick.pss_mb is not None:
        ax.scatter([pick.config.num_workers], [pick.pss_mb], marker="*", s=300, color=PICK, edgecolors="black",
                   linewidths=0.8, zorder=6)  # fmt: skip
        ax.annotate(f"{num(pick.pss_mb)} MB", (pick.config.num_workers, pick.pss_mb), xytext=(10, -16),
                    textcoords="offset points", fontsize=9, fontweight="bold")  # fmt: skip
    ax.set_ylim(bottom=0)
    ax.margins(y=0.15)
    _worker_ticks(ax, shared)
    ax.set_ylabel("MB")
    ax.set_title("Memory per configuration")
    ax.legend(loc="best", fontsize=9)


def draw_epochs(ax: Axes, shared: Shared) -> None:
    """Each configuration's epoch restart (the wait from an epoch's last batch to the next one's first), per
    curve, where it was measured."""
    drawn = False
    for n, curve in enumerate(shared.curves[:MAX_CURVES]):
        xs, ys = _series(curve.rows, "epoch_restart_s")
        if xs:
            drawn = True
            ax.plot(xs, ys, color=COLORS[n % len(COLORS)], marker="o", markersize=4,
                    linewidth=2.2 if curve.main else 1.2, alpha=1.0 if curve.main else 0.75)  # fmt: skip
    pick = shared.report.recommended
    if pick is not None and pick.epoch_restart_s is not None:
        ax.scatter([pick.config.num_workers], [pick.epoch_restart_s], marker="*", s=300, color=PICK,
                   edgecolors="black", linewidths=0.8, zorder=6)  # fmt: skip
        ax.annotate(seconds(pick.epoch_restart_s), (pick.config.num_workers, pick.epoch_restart_s), xytext=(10, -16),
                    textcoords="offset points", fontsize=9, fontweight="bold")  # fmt: skip
    ax.set_title("Epoch restart: last batch of an epoch to the next one's first")
    if not drawn:
        ax.text(0.5, 0.5, "epoch restarts were not measured in this run", transform=ax.transAxes, ha="center",
                va="center", color="#777777")  # fmt: skip
        ax.set_axis_off()
        return
    ax.set_ylim(bottom=0)
    ax.margins(y=0.15)
    _worker_ticks(ax, shared)
    ax.set_ylabel("seconds")


def draw_charts(fig: Figure | SubFigure, shared: Shared) -> None:
    grid = fig.add_gridspec(2, 2, height_ratios=(1.35, 1.0))
    draw_throughput(fig.add_subplot(grid[0, :]), shared)
    draw_memory(fig.add_subplot(grid[1, 0]), shared)
    draw_epochs(fig.add_subplot(grid[1, 1]), shared)


# The words beside the figure: the same in the picture's header and in the page.


@dataclass(frozen=True)
class Words:
    title: str
    pick: str  # the pick and its figures, or why there is none
    reason: str
    snippet: str
    knee: str
    same: str  # the configurations within noise of the best, when there are several
    machine: str
    note: str  # interrupted, the run folder


def words(shared: Shared) -> Words:
    result, row = shared.result, shared.report.recommended
    rec = result.recommendation
    if rec is not None and row is not None:
        spread = f" ± {pct(row.spread)}" if row.spread is not None else ""
        pick = f"Pick: {rec.config.label()} · {rate(rec.samples_per_s)} samples/s{spread}"
        pick += f" · PSS {num(row.pss_mb)} MB" if row.pss_mb is not None else ""
        reason, snippet = rec.reason, rec.snippet
    else:
        pick = "No recommendation: the sweep ended before its conclusion" if result.interrupted else (
            "No recommendation")  # fmt: skip
        reason, snippet = "", ""
    knee = f"Knee ({result.knee.rule}): {result.knee.reason}" if result.knee else ""
    same = ""
    if rec is not None and len(rec.equivalent) > 1:
        same = "Within noise of the best: " + ", ".join(c.label() for c in rec.equivalent)
        same += " (a close call)" if rec.close else ""
    m = result.machine
    machine = f"{m.summary()}; Python {m.python}, torch {m.torch or NONE}, {m.platform}"
    run = result.run_dir or str(shared.source)
    note = ("Interrupted: the finished trials are drawn. " if result.interrupted else "") + (
        f"Run {run}, {len(result.trials)} trials; loadertop {__version__}")  # fmt: skip
    return Words(f"loadertop: DataLoader sweep of {result.settings.dataset}", pick, reason, snippet, knee, same,
                 machine, note)  # fmt: skip


def _header(fig: SubFigure, height_in: float, lines: list[tuple[str, dict[str, Any]]]) -> None:
    y = 0.18  # inches from the top
    for text, style in lines:
        size = style.get("fontsize", 10)
        fig.text(0.012, 1 - y / height_in, text, va="top", ha="left", **style)
        y += (text.count("\n") + 1) * size * 1.45 / 72 + 0.06


def _header_lines(said: Words) -> list[tuple[str, dict[str, Any]]]:
    wrap = int(WIDTH_IN * 72 / (10 * 0.55))  # characters of a 10 pt sans font across the figure
    box = {"boxstyle": "round,pad=0.4", "facecolor": "#f3f4f6", "edgecolor": "#d0d4da"}
    lines: list[tuple[str, dict[str, Any]]] = [
        (said.title, {"fontsize": 15, "fontweight": "bold"}),
        (said.pick, {"fontsize": 12, "fontweight": "bold", "color": "#1f5fa8"}),
    ]
    if said.reason:
        lines.append((textwrap.fill(said.reason, wrap), {"fontsize": 10}))
    if said.snippet:
        lines.append((said.snippet, {"fontsize": 10.5, "family": "monospace", "bbox": box}))
    for extra in (said.knee, said.same):
        if extra:
            lines.append((textwrap.fill(extra, wrap), {"fontsize": 9, "color": "#444444"}))
    lines.append((textwrap.fill(said.machine, wrap), {"fontsize": 9, "color": "#666666"}))
    return lines


def picture(shared: Shared, *, header: bool) -> Figure:
    """The charts, with the words above them when the picture is the whole file (SVG, PNG)."""
    figure, _ = _matplotlib()
    charts_in = 8.4
    lines = _header_lines(words(shared)) if header else []
    header_in = 0.3 + sum((t.count("\n") + 1) * s.get("fontsize", 10) * 1.45 / 72 + 0.06 for t, s in lines)
    fig = figure(figsize=(WIDTH_IN, charts_in + (header_in if header else 0.0)), layout="constrained")
    if not header:
        draw_charts(fig, shared)
        return fig
    grid = fig.add_gridspec(2, 1, height_ratios=(header_in, charts_in))
    _header(fig.add_subfigure(grid[0]), header_in, lines)
    draw_charts(fig.add_subfigure(grid[1]), shared)
    return fig


def render_image(shared: Shared, fmt: str, *, header: bool = True) -> bytes:
    """The picture as SVG or PNG bytes."""
    with _style():
        fig = picture(shared, header=header)
        out = io.BytesIO()
        # No date and no creator: the same run draws the same bytes, and the file names no web address.
        meta: dict[str, Any] = {"Date": None, "Creator": None} if fmt == "svg" else {"Software": None}
        fig.savefig(out, format=fmt, dpi=150, metadata=meta, facecolor="white")
    return out.getvalue()


# The page.

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:#1d2330;margin:24px auto;
max-width:1180px;padding:0 16px;line-height:1.45}
h1{font-size:22px;margin:0 0 4px}
.machine,.note,.foot{color:#5b6472;font-size:13px}
.pick{border-left:5px solid #e8b400;background:#fffaf0;padding:10px 16px;margin:16px 0;border-radius:4px}
.pick h2{font-size:18px;margin:0 0 6px;color:#1f5fa8}
.pick p{margin:6px 0}
pre{background:#f3f4f6;border:1px solid #d0d4da;border-radius:4px;padding:10px 12px;font-size:14px;overflow-x:auto}
figure{margin:8px 0}
figure svg{width:100%;height:auto}
.table{overflow-x:auto}
table{border-collapse:collapse;font-size:12px;white-space:nowrap;width:100%}
th,td{padding:3px 5px;border-bottom:1px solid #e3e6ea;text-align:right}
th{background:#f3f4f6;white-space:normal;vertical-align:bottom}
tr.picked td{background:#fff4c7;font-weight:600}
td.status{text-align:left}
"""


def _inline_svg(svg: bytes) -> str:
    """matplotlib's SVG as an element of the page: no XML prologue, no metadata block."""
    text = svg.decode()
    text = text[text.index("<svg") :]
    return re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)


def _table(shared: Shared) -> str:
    report = shared.report
    keys = [key for key in report.columns if key != "why"]
    head = "".join(f"<th>{html.escape(HEADERS[key])}</th>" for key in keys)
    body = []
    for row in report.rows:
        cells = report.cells(row)
        tds = "".join(
            f'<td class="status">{html.escape(cells[k])}</td>' if k == "status" else f"<td>{html.escape(cells[k])}</td>"
            for k in keys
        )
        body.append(f'<tr class="picked">{tds}</tr>' if row.recommended else f"<tr>{tds}</tr>")
    return f'<div class="table"><table><tr>{head}</tr>{"".join(body)}</table></div>'


def render_html(shared: Shared) -> str:
    said = words(shared)
    e = html.escape
    with _style():
        figure = _inline_svg(render_image(shared, "svg", header=False))
    star = "★ " if shared.report.recommended is not None else ""
    pick = [f"<h2>{star}{e(said.pick)}</h2>"]
    pick += [f"<p>{e(said.reason)}</p>"] if said.reason else []
    pick += [f"<pre><code>{e(said.snippet)}</code></pre>"] if said.snippet else []
    pick += [f"<p>{e(text)}</p>" for text in (said.knee, said.same) if text]
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{e(said.title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{e(said.title)}</h1>",
        f'<p class="machine">{e(said.machine)}</p>',
        f'<section class="pick">{"".join(pick)}</section>',
        f"<figure>{figure}</figure>",
        _table(shared),
        f'<p class="foot">{e(shared.report.footnote)}</p>',
        f'<p class="note">{e(said.note)}</p>',
        "</body></html>",
        "",
    ])  # fmt: skip


def write(shared: Shared, outputs: dict[str, Path]) -> list[Path]:
    """Each asked format to its file (html, svg, png); the files written."""
    written = []
    for fmt, path in outputs.items():
        if fmt == "html":
            path.write_text(render_html(shared), encoding="utf-8")
        else:
            path.write_bytes(render_image(shared, fmt))
        written.append(path)
    return written
