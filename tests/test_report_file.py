"""`loadertop report RUN --html/--svg/--png`: one recorded run drawn to each format, what each file holds, and every
bad input answered in one line with exit 2."""

from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

pytest.importorskip("matplotlib")  # the `report` extra (CI installs it)

from loadertop.core.engine import build_report, rate
from loadertop.core.model.results import SweepResult
from loadertop.faces.cli import report_main
from loadertop.faces.report_file import Shared, load, picture, render_html, render_image
from loadertop.faces.report_file import words as render_words

DATA = Path(__file__).parent / "data"
RECORDED = DATA / "recorded_result.json"
RESULT = SweepResult.from_dict(json.loads(RECORDED.read_text()))
# A resource fetched from the web: what a self-contained page must not hold (an SVG namespace is a name, not a fetch).
FETCHED = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//|url\(\s*["']?\s*(?:https?:)?//|@import""", re.I)


@pytest.fixture(scope="module")
def shared() -> Shared:
    return load(RECORDED)


@pytest.fixture(scope="module")
def page(shared: Shared) -> str:
    return render_html(shared)


@pytest.mark.unit
def test_the_page_holds_its_figure_inline_and_fetches_nothing(page: str) -> None:
    assert page.startswith("<!DOCTYPE html>") and page.count("<svg") == 1 and "</svg>" in page
    assert FETCHED.search(page) is None and "<script" not in page and "<link" not in page and "<img" not in page
    assert "<?xml" not in page and "<metadata>" not in page  # matplotlib's prologue and its creator's address


@pytest.mark.unit
def test_the_page_says_the_pick_its_reason_the_line_to_paste_and_the_machine(page: str) -> None:
    rec = RESULT.recommendation
    assert rec is not None and rec.config.num_workers == 2
    assert f"Pick: {rec.config.label()} · {rate(rec.samples_per_s)} samples/s" in page
    assert rec.reason in page  # nothing in it needs escaping
    assert f"<pre><code>{rec.snippet}</code></pre>" in page and "num_workers=2" in rec.snippet
    assert f"Knee ({RESULT.knee.rule if RESULT.knee else ''})" in page
    assert RESULT.machine.summary() in page and RESULT.machine.torch in page
    picked = re.search(r'<tr class="picked">(.*?)</tr>', page)
    assert picked is not None and "<td>★◆</td>" in picked.group(1) and "<td>2</td>" in picked.group(1)


@pytest.mark.unit
def test_every_configuration_is_a_row_of_the_page_as_the_report_prints_it(page: str) -> None:
    report = build_report(RESULT)
    rows = re.findall(r"<tr(?: class=\"picked\")?>(.*?)</tr>", page)[1:]  # the header row first
    assert len(rows) == len(report.rows)
    for html_row, row in zip(rows, report.rows, strict=True):
        assert f"<td>{report.cells(row)['samples/s']}</td>" in html_row
        assert f"<td>{report.cells(row)['pss']}</td>" in html_row


@pytest.mark.unit
def test_the_charts_draw_the_reports_figures_not_their_own(shared: Shared) -> None:
    """The throughput curve's points are the report's samples/s by worker count, its error bars ± the report's
    spread; memory is PSS; the epoch chart is epoch_restart_s, where measured."""
    fig = picture(shared, header=False)
    throughput, memory, epochs = fig.axes
    rows = sorted((r for r in build_report(RESULT).rows if r.samples_per_s), key=lambda r: r.config.num_workers)
    curve = throughput.lines[0]
    assert list(curve.get_xdata()) == [r.config.num_workers for r in rows]
    assert list(curve.get_ydata()) == [r.samples_per_s for r in rows]
    caps = [line for line in throughput.lines if line.get_marker() == "_"]  # the error bars' caps: top then bottom
    top = [float(y) for y in caps[1].get_ydata()]
    assert top == pytest.approx([r.samples_per_s * (1 + (r.spread or 0)) for r in rows])
    assert list(memory.lines[0].get_ydata()) == [r.pss_mb for r in rows]
    assert list(epochs.lines[0].get_ydata()) == [r.epoch_restart_s for r in rows]
    assert any("pick and knee: 2 workers" in t.get_text() for t in throughput.texts)


@pytest.mark.unit
def test_a_run_without_epoch_restarts_says_so_instead_of_an_empty_chart(shared: Shared) -> None:
    from dataclasses import replace

    plain = replace(shared.result, trials=tuple(replace(t, epoch_restart_s=None) for t in shared.result.trials))
    redone = load_from(plain)
    epochs = picture(redone, header=False).axes[2]
    assert not epochs.lines and [t.get_text() for t in epochs.texts] == ["epoch restarts were not measured in this run"]


def load_from(result: SweepResult) -> Shared:
    from loadertop.faces.report_file import curves

    report = build_report(result)
    return Shared(result, report, curves(report), RECORDED)


@pytest.fixture(scope="module")
def svg(shared: Shared) -> bytes:
    return render_image(shared, "svg")


@pytest.mark.unit
def test_a_killed_sweeps_folder_is_drawn_from_its_trial_log_without_a_pick(tmp_path: Path) -> None:
    """No result.json (killed before its conclusion): the trials it finished are drawn, and the page says there is
    no recommendation rather than inventing one."""
    (tmp_path / "settings.json").write_text(json.dumps(RESULT.settings.to_dict()))
    (tmp_path / "machine.json").write_text(json.dumps(json.loads(RECORDED.read_text())["machine"]))
    (tmp_path / "trials.jsonl").write_text("".join(json.dumps(t.to_dict()) + "\n" for t in RESULT.trials))
    killed = load(tmp_path)
    assert killed.result.recommendation is None and len(killed.curves[0].rows) == 7
    words = render_words(killed)
    assert words.pick == "No recommendation: the sweep ended before its conclusion" and words.snippet == ""
    assert words.note.startswith("Interrupted: the finished trials are drawn.")


@pytest.mark.unit
def test_the_png_is_a_png_of_a_shareable_size(shared: Shared) -> None:
    png = render_image(shared, "png")
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
    width, height = struct.unpack(">II", png[16:24])
    assert 1200 <= width <= 2400 and 1000 <= height <= 2600
    assert 30_000 < len(png) < 2_000_000


@pytest.mark.unit
def test_the_svg_is_well_formed_xml_with_the_words_above_the_charts(svg: bytes, page: str) -> None:
    root = ElementTree.fromstring(svg)
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert FETCHED.search(svg.decode()) is None and b"matplotlib.org" not in svg
    # The words are drawn above the charts (as glyph paths): the file is taller than the page's charts-only figure.
    charts = ElementTree.fromstring(page[page.index("<svg") : page.index("</svg>") + 6])
    assert float(root.attrib["height"].removesuffix("pt")) > float(charts.attrib["height"].removesuffix("pt")) + 100


@pytest.mark.unit
def test_report_writes_the_file_it_is_asked_for_the_same_for_the_same_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], svg: bytes
) -> None:
    out = tmp_path / "r.svg"
    assert report_main([str(RECORDED), "--svg", str(out)]) == 0
    assert capsys.readouterr().out.split() == [str(out)]
    assert out.read_bytes() == svg  # no date, no random ids: a report drawn again is the same file


def _bad(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert report_main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.unit
def test_bad_inputs_are_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    html = str(tmp_path / "r.html")
    assert "no such run folder" in _bad([str(tmp_path / "nope"), "--html", html], capsys)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "not a loadertop run folder" in _bad([str(empty), "--html", html], capsys)
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    assert "not a loadertop result" in _bad([str(garbage), "--html", html], capsys)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**json.loads(RECORDED.read_text()), "version": 99}))
    assert "result version 99" in _bad([str(other), "--html", html], capsys)
    assert "name a file to write" in _bad([str(RECORDED)], capsys)
    assert "does not exist" in _bad([str(RECORDED), "--png", str(tmp_path / "no" / "r.png")], capsys)
    assert not Path(html).exists()


@pytest.mark.unit
def test_a_run_with_no_finished_trial_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(RECORDED.read_text())
    for trial in data["trials"]:
        trial.update(status="failed", samples_per_s=None, error="worker killed")
    data.update(recommendation=None, knee=None)
    failed = tmp_path / "failed.json"
    failed.write_text(json.dumps(data))
    assert "no finished trial to draw" in _bad([str(failed), "--svg", str(tmp_path / "r.svg")], capsys)


@pytest.mark.unit
def test_without_matplotlib_it_names_the_extra_to_install(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    err = _bad([str(RECORDED), "--png", str(tmp_path / "r.png")], capsys)
    assert "pip install 'loadertop[report]'" in err and not (tmp_path / "r.png").exists()


def test_the_command_exits_2_with_one_line_on_bad_input(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "loadertop", "report", str(tmp_path / "nope"), "--html", str(tmp_path / "r.html")],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("loadertop report: error: ") and done.stderr.count("\n") == 1, done.stderr
