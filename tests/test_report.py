"""One recorded result through every face: headless text, Markdown, CSV and the TUI table print the same figures and
the same ★/◆ rows, because they all render the engine's report.

tests/data/recorded_result.json is a real run, kept as recorded: `loadertop --headless --workers 0-8 --trial-seconds 3`
(adaptive: the finalists w=4 and w=5 were measured twice, the knee and the recommendation are at 2 workers).
tests/data/previous_result.json is the run before it on the same machine (`--workers 0-3`), the baseline for Δ.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from tui_fakes import FakeSweep, FakeSweepFactory, cell, sync, wait_until

from loadertop.core.engine import (
    HEADERS,
    NONE,
    Report,
    SweepRequest,
    build_report,
    clock,
    duration_text,
    mb,
    num,
    pct,
    percent,
    rate,
    seconds,
    slope,
    utilization,
)
from loadertop.core.engine.report.export import markdown, write_csv
from loadertop.core.engine.verdict.outcome import conclude
from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.curves import curve_key
from loadertop.core.model.events import Event, SweepFinished, SweepStarted, TrialFinished, TrialStarted
from loadertop.core.model.results import SweepResult
from loadertop.faces.headless import EXIT_FAILED, Reporter, _export, run_headless
from loadertop.faces.tui.app import make_app
from loadertop.faces.tui.state import SweepState
from loadertop.faces.tui.widgets.header import HeaderPane
from loadertop.faces.tui.widgets.results import ResultsTable

DATA = Path(__file__).parent / "data"
RESULT = SweepResult.from_dict(json.loads((DATA / "recorded_result.json").read_text()))
PREVIOUS = SweepResult.from_dict(json.loads((DATA / "previous_result.json").read_text()))
FIGURES = ("samples/s", "spread", "stall", "uss", "pss", "change", "mark")  # what every face shows
KEY_OF = {header: key for key, header in HEADERS.items()}


def expected() -> dict[TrialConfig, dict[str, str]]:
    report = build_report(RESULT, PREVIOUS)
    return {row.config: {k: report.cells(row)[k] for k in FIGURES} for row in report.rows}


def by_runs(report: Report) -> dict[str, TrialConfig]:
    """The "#" cell (a configuration's trial indexes) names its row in the text faces."""
    return {report.cells(row)["runs"]: row.config for row in report.rows}


# -- the report against the recorded data ------------------------------------------------------------------------


@pytest.mark.unit
def test_the_recording_has_what_the_faces_disagreed_on() -> None:
    configs = [t.config for t in RESULT.trials]
    assert len(configs) > len(set(configs))  # repeats: per trial and per configuration differ
    assert RESULT.knee is not None and RESULT.knee.num_workers is not None and RESULT.recommendation is not None
    # the largest worker's USS and the mean read differently for some configuration
    assert any(f"{max(t.worker_uss_mb):.0f}" != f"{sum(t.worker_uss_mb) / len(t.worker_uss_mb):.0f}"
               for t in RESULT.trials if t.worker_uss_mb)  # fmt: skip


@pytest.mark.unit
def test_one_row_per_configuration_with_the_mean_the_recommendation_quotes() -> None:
    report = build_report(RESULT)
    assert len(report.rows) == len({t.config for t in RESULT.trials})
    for row in report.rows:
        runs = [t for t in RESULT.trials if t.config == row.config]
        assert row.runs == tuple(t.index for t in runs)
        rates = [t.samples_per_s for t in runs if t.status == "ok" and t.samples_per_s is not None]
        assert row.samples_per_s == pytest.approx(sum(rates) / len(rates))
        assert row.uss_per_worker_mb == (max(runs[-1].worker_uss_mb) if runs[-1].worker_uss_mb else None)
        assert row.pss_mb == runs[-1].total_pss_mb
    rec = RESULT.recommendation
    assert rec is not None
    (star,) = [row for row in report.rows if row.recommended]
    assert star.config == rec.config and star.samples_per_s == pytest.approx(rec.samples_per_s)
    workers = [(row.config.num_workers) for row in report.rows]
    assert workers == sorted(workers)  # one curve here: the rows go by worker count, whatever order they ran in


@pytest.mark.unit
def test_the_knee_is_marked_once_on_the_recommended_curve() -> None:
    report = build_report(RESULT)
    knee, rec = RESULT.knee, RESULT.recommendation
    assert knee is not None and rec is not None
    (diamond,) = [row for row in report.rows if row.knee]
    assert diamond.config.num_workers == knee.num_workers
    assert curve_key(diamond.config) == curve_key(rec.config)
    # a second trial of the knee's configuration is still one row with one mark
    again = replace(next(t for t in RESULT.trials if t.config == diamond.config), index=len(RESULT.trials))
    twice = build_report(replace(RESULT, trials=(*RESULT.trials, again)))
    assert [row.config for row in twice.rows if row.knee] == [diamond.config]
    assert next(row for row in twice.rows if row.knee).runs[-1] == again.index


def with_equivalents() -> SweepResult:
    """The recorded trials judged by today's engine: the finalists' repeats (4 workers at 554 and 317 samples/s,
    5 at 419 and 312) say runs differ by ±31% on that machine, so nothing measured is surely outside the band of
    the best: the set holds every count, 2 the recommendation, and the reason says it is inconclusive."""
    judged = conclude(list(RESULT.trials), RESULT.settings, RESULT.machine, ceilings=RESULT.ceilings)
    return judged.result


@pytest.mark.unit
def test_the_equivalence_set_is_marked_and_kept_in_the_json() -> None:
    result = with_equivalents()
    rec = result.recommendation
    assert rec is not None and [c.num_workers for c in rec.equivalent] == [0, 1, 2, 3, 4, 5, 8]
    assert rec.config.num_workers == 2
    assert rec.reason.startswith("inconclusive: runs of one configuration differ by ±31%")
    assert "0–8 workers (all 7 measured) are not surely more than the 15% band behind the best (445 samples/s)" in (
        rec.reason
    )
    marked = [row.config for row in build_report(result).rows if "≈" in row.marks]
    assert marked == [c for c in rec.equivalent if c != rec.config]  # the recommendation keeps its ★ alone
    result = replace(result, recommendation=replace(rec, close=True))
    back = SweepResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert back.recommendation == result.recommendation
    # results written before the set was kept still load, with an empty one
    old = result.to_dict()
    del old["recommendation"]["equivalent"], old["recommendation"]["close"]
    loaded = SweepResult.from_dict(json.loads(json.dumps(old))).recommendation
    assert loaded is not None and loaded.equivalent == () and not loaded.close
    out = io.StringIO()
    Reporter(out, io.StringIO(), None).summary(result)
    labels = ", ".join(c.label() for c in rec.equivalent)
    assert f"Within noise of the best (≈): {labels} (a close call)" in " ".join(out.getvalue().split())


@pytest.mark.unit
def test_the_csv_marks_the_equivalence_set(tmp_path: Path) -> None:
    result = with_equivalents()
    rec = result.recommendation
    assert rec is not None
    write_csv(result, tmp_path / "out.csv")
    marked = [
        line["num_workers"] for line in csv.DictReader((tmp_path / "out.csv").open()) if line["equivalent"] == "True"
    ]
    assert marked == [str(c.num_workers) for c in rec.equivalent if c != rec.config]


@pytest.mark.unit
def test_change_is_against_the_same_configuration_in_the_previous_run() -> None:
    report = build_report(RESULT, PREVIOUS)
    old = {t.config: t.samples_per_s for t in PREVIOUS.trials if t.status == "ok"}
    for row in report.rows:
        cell = report.cells(row)["change"]
        if row.config in old:
            assert row.change == pytest.approx(row.samples_per_s / old[row.config] - 1)  # type: ignore[operator]
            assert cell == pct(row.change, signed=True)
        else:
            assert row.change is None and cell == "new"
    assert build_report(RESULT).cells(report.rows[0])["change"] == ""  # nothing to compare with


@pytest.mark.unit
def test_one_percent_and_one_number_format() -> None:
    assert [pct(x) for x in (0.05, 0.0501, 0.008, 0.0214, 0.512, 1.0, None)] == [
        "5%", "5%", "0.8%", "2.1%", "51%", "100%", "–",
    ]  # fmt: skip
    assert [pct(x, signed=True) for x in (0.08, -0.016, -0.38)] == ["+8%", "−1.6%", "−38%"]
    assert [num(444.76), num(0.153, 2, " s"), num(None)] == ["445", "0.15 s", "–"]


@pytest.mark.unit
def test_one_formatter_set_for_every_face() -> None:
    """samples/s reads 4310 in the table, the panes, attach and the reasons; every figure not measured reads NONE."""
    assert [rate(4310.2), rate(25.13), rate(4.55), rate(None)] == ["4310", "25", "4.5", NONE]
    assert [mb(512), mb(2048), mb(2048, short=True), mb(7.3), mb(None)] == ["512 MB", "2.0 GB", "2.0G", "7.3 MB", NONE]
    assert [slope(1.25), slope(-0.46, 0.31), slope(None)] == ["+1.2 MB/min", "-0.5±0.3 MB/min", NONE]
    assert [seconds(0.153), seconds(12.4), seconds(None)] == ["0.15 s", "12 s", NONE]
    assert [clock(3725), clock(78), clock(None)] == ["1:02:05", "1:18", NONE]
    assert [percent(82.4), percent(None)] == ["82%", NONE]
    assert [duration_text(40), duration_text(70 * 60)] == ["40 s", "1 h 10 min"]
    assert utilization(78.0, [70.0, 80.0, 90.0]) == " 78% avg  80% max  90%"
    assert utilization(0.5, [0.25, 0.75], scale=100.0) == " 50% avg  50% max  75%"
    assert utilization(None, []) == f"   {NONE} avg    {NONE} max    {NONE}"


# -- every face renders it ---------------------------------------------------------------------------------------


def text_rows(lines: list[str], sep: str) -> Iterator[dict[str, str]]:
    """Rows of a text table whose first line of cells is its header; a row's figures are on its first line."""
    header: list[str] | None = None
    for line in lines:
        cells = [c.strip() for c in line.strip().strip(sep).split(sep)]
        if header is None:
            header = [KEY_OF[c] for c in cells] if "samples/s" in cells else None
        elif len(cells) == len(header) and cells[header.index("workers")].isdigit():
            yield dict(zip(header, cells, strict=True))


def assert_same(face: str, rows: list[dict[str, str]], configs: Sequence[TrialConfig]) -> None:
    want = expected()
    assert len(rows) == len(want), face
    for config, cells in zip(configs, rows, strict=True):
        assert {k: cells[k] for k in FIGURES} == want[config], f"{face}: {config.label()}"


@pytest.mark.unit
def test_headless_table() -> None:
    out = io.StringIO()
    Reporter(out, io.StringIO(), PREVIOUS).summary(RESULT)
    rows = list(text_rows(out.getvalue().replace("┃", "│").splitlines(), "│"))  # rich's header has its own bar
    names = by_runs(build_report(RESULT, PREVIOUS))
    assert_same("headless", rows, [names[r["runs"]] for r in rows])
    assert [r["uss"] for r in rows if r["workers"] == "0"] == [NONE]  # not measured: the engine's glyph
    padded = [line for line in out.getvalue().splitlines() if line != line.rstrip()]
    assert not padded, padded  # a file or a pipe gets no width padding (rich pads titles and wrapped paragraphs)


@pytest.mark.unit
def test_markdown() -> None:
    rows = list(text_rows(markdown(RESULT, PREVIOUS).splitlines(), "|"))
    names = by_runs(build_report(RESULT, PREVIOUS))
    assert_same("markdown", rows, [names[r["runs"]] for r in rows])


@pytest.mark.unit
def test_csv(tmp_path: Path) -> None:
    write_csv(RESULT, tmp_path / "out.csv", PREVIOUS)
    lines = list(csv.DictReader((tmp_path / "out.csv").open()))
    report = build_report(RESULT, PREVIOUS)
    assert [line["runs"] for line in lines] == [" ".join(map(str, row.runs)) for row in report.rows]
    for line, row in zip(lines, report.rows, strict=True):
        cells = {
            "samples/s": num(float(line["samples_per_s"])),
            "spread": pct(float(line["spread"])),
            "stall": pct(float(line["stall_fraction"])),
            "uss": num(float(line["uss_per_worker_mb"])) if line["uss_per_worker_mb"] else "–",
            "pss": num(float(line["total_pss_mb"])),
            "change": pct(float(line["change_vs_previous"]), signed=True) if line["change_vs_previous"] else "new",
            "mark": ("★" if line["recommended"] == "True" else "")
            + ("◆" if line["knee"] == "True" else "")
            + ("≈" if line["equivalent"] == "True" else ""),
        }
        assert cells == expected()[row.config], row.config.label()


class ReplaySweep(FakeSweep):
    """The recorded result as the event stream the TUI reads: each trial starts and finishes, then the sweep."""

    recorded = RESULT

    def events(self) -> Iterator[Event]:
        self.started.set()
        recorded = self.recorded
        planned = tuple(dict.fromkeys(t.config for t in recorded.trials))
        yield SweepStarted(str(self.run_dir), recorded.machine, recorded.settings, planned, self.previous)
        total = len(recorded.trials)
        for trial in recorded.trials:
            yield TrialStarted(trial.index, total, trial.config, 1000 + trial.index, (), trial.first_batch_s or 0.0)
            yield TrialFinished(trial)
        self.result = recorded
        yield SweepFinished(recorded)


class ReplayFactory(FakeSweepFactory):
    def __init__(self, root: Path, recorded: SweepResult = RESULT) -> None:
        super().__init__(root)
        self.recorded = recorded

    def __call__(
        self, settings: Settings, previous: SweepResult | None, only: Sequence[TrialConfig] | None
    ) -> FakeSweep:
        sweep = ReplaySweep(settings, previous, only, machine=RESULT.machine, run_dir=self.root)
        sweep.recorded = self.recorded
        self.sweeps.append(sweep)
        return self.sweeps[-1]


@pytest.mark.tui
@sync
async def test_tui_results_table(tmp_path: Path) -> None:
    app = make_app(SweepRequest(RESULT.settings, previous=PREVIOUS), sweep_factory=ReplayFactory(tmp_path))
    async with app.run_test(size=(160, 40)) as pilot:
        await wait_until(pilot, lambda: app.state.phase == "finished")
        app.flush(everything=True)
        table = app.query_one(ResultsTable)
        keys = [str(column.key.value) for column in table.ordered_columns]
        rows = [dict(zip(keys, map(str, table.get_row_at(i)), strict=True)) for i in range(table.row_count)]
        assert_same("tui", rows, table.configs)
        assert [r["uss"] for r in rows if r["workers"] == "0"] == [NONE]  # not measured: the headless table's glyph


@pytest.mark.tui
def test_tui_mid_sweep_shows_a_finalist_as_the_mean_of_its_runs() -> None:
    state = SweepState()
    sweep = ReplaySweep(RESULT.settings, None, None, machine=RESULT.machine, run_dir=Path("/nowhere"))
    for event in sweep.events():
        if isinstance(event, SweepFinished):
            break
        state.apply(event)
    live = state.report()
    assert state.running and live is not None
    final = {row.config: row.samples_per_s for row in build_report(RESULT).rows}
    assert {row.config: row.samples_per_s for row in live.rows} == final


# -- headless exit codes -----------------------------------------------------------------------------------------


@pytest.mark.unit
def test_a_failed_export_says_which_file_and_why(tmp_path: Path) -> None:
    err = io.StringIO()
    missing = tmp_path / "gone" / "out.json"
    assert _export(Reporter(io.StringIO(), err, None), RESULT, None, missing, None)
    (line,) = err.getvalue().splitlines()
    assert str(missing) in line and "No such file or directory" in line and str(RESULT.run_dir) in line


def test_a_failed_export_exits_1_and_the_run_folder_keeps_every_trial(tmp_path: Path) -> None:
    settings = Settings(workers=(0, 1), search="grid", trial_seconds=0.6, block_seconds=0.1, interval=0.2)
    err = io.StringIO()
    request = SweepRequest(settings, out_dir=tmp_path / "runs", json_path=tmp_path / "gone" / "out.json")
    code = run_headless(request, out=io.StringIO(), err=err)
    assert code == EXIT_FAILED, err.getvalue()
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert len((run_dir / "trials.jsonl").read_text().splitlines()) == 2


@pytest.mark.tui
@sync
async def test_tui_marks_the_equivalence_set(tmp_path: Path) -> None:
    result = with_equivalents()
    rec = result.recommendation
    assert rec is not None
    app = make_app(SweepRequest(result.settings), sweep_factory=ReplayFactory(tmp_path, result))
    async with app.run_test(size=(160, 40)) as pilot:
        await wait_until(pilot, lambda: app.state.phase == "finished")
        app.flush(everything=True)
        table = app.query_one(ResultsTable)
        marks = {table.configs[i]: cell(table, i, "mark") for i in range(table.row_count)}
        assert [c for c, mark in marks.items() if "≈" in mark] == [c for c in rec.equivalent if c != rec.config]
        assert "★" in marks[rec.config] and "≈" not in marks[rec.config]
        header = str(app.query_one(HeaderPane).view())
        assert "inconclusive: runs of one configuration differ" in header  # the recommendation line's reason
