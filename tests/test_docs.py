"""The README and docs/ tell one story, and it is the code's: every flag they name exists, every default they quote is
the option's, every JSON key they name is in a real result, the table columns they list are the ones the faces
print, and what they say a dataset factory may return and how often it is built agrees with itself and the code."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loadertop.core.engine.report.rows import HEADERS, KNEE, RECOMMENDED
from loadertop.core.model.config import Settings, settings_options
from loadertop.core.model.live import JobRanks, LiveSnapshot, RankRow
from loadertop.core.model.results import SweepResult
from loadertop.faces.cli import (
    build_attach_parser,
    build_parser,
    build_report_parser,
    build_run_parser,
    build_stages_parser,
)
from loadertop.faces.tui.widgets.results import COLUMNS as TUI_COLUMNS

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
# Flags of the other programs the docs show loadertop beside: torchrun, srun, docker, the linters, the training
# script of an example, and the scripts under benchmarks/ and tests/ (each has its own --help).
FOREIGN = {
    *("--nnodes", "--nproc-per-node", "--node-rank", "--master-addr", "--master-port"),  # torchrun
    *("--rdzv-backend", "--rdzv-endpoint", "--rdzv-id", "--rdzv-conf"),  # torchrun's rendezvous
    *("--nodes", "--ntasks-per-node", "--cpus-per-task"),  # srun
    *("--shm-size", "--ipc"),  # docker run
    *("--check", "--min-confidence"),  # ruff format, vulture
    "--epochs",  # the example's train.py
    *("--count", "--repeats", "--fake", "--mb-per-s", "--port"),  # imagefolder's generator, benchmarks, tests
    *("--no-sandbox", "--disable-gpu", "--window-size", "--screenshot"),  # chromium, for a report
}


def lines() -> Iterator[tuple[str, int, str]]:
    for path in DOCS:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            yield str(path.relative_to(ROOT)), number, line


def parsers() -> dict[str, argparse.ArgumentParser]:
    return {
        "loadertop": build_parser(),
        "attach": build_attach_parser(),
        "run": build_run_parser(),
        "stages": build_stages_parser(),
        "report": build_report_parser(),
    }


def flags_of(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {flag: action for action in parser._actions for flag in action.option_strings if flag.startswith("--")}


def test_every_flag_the_docs_name_is_a_flag_of_loadertop_or_of_the_program_beside_it() -> None:
    known = {flag for parser in parsers().values() for flag in flags_of(parser)}
    unknown = [f"{where}:{n}: {flag}" for where, n, line in lines() for flag in FLAG.findall(line)]
    unknown = [u for u in unknown if u.rsplit(" ", 1)[1] not in known | FOREIGN]
    assert not unknown, "flags no parser has:\n" + "\n".join(unknown)


def effective_defaults(page: str) -> dict[str, Any]:
    """What a user gets for each flag when giving nothing: attach's and run's own parsers on their pages, the sweep's
    Settings (the option's default, else the field's) everywhere else."""
    own = {"docs/attach.md": "attach", "docs/run.md": "run", "docs/stages.md": "stages"}.get(page)
    if own:
        return {flag: action.default for flag, action in flags_of(parsers()[own]).items()}
    fields = {f.name: f.default for f in dataclasses.fields(Settings)}
    options = [(name, opt) for name, opt in settings_options() if opt.flag]
    return {str(opt.flag): fields[name] if opt.default is None else opt.default for name, opt in options}


def test_every_default_the_docs_quote_is_the_option_s() -> None:
    row = re.compile(r"^\| `(--[a-z-]+)[^`]*` \|.*\(default (?:`)?([0-9.]+)")
    wrong = []
    for where, n, line in lines():
        found = row.search(line)
        if not found:
            continue
        flag, said = found.groups()
        default = effective_defaults(where).get(flag)
        if not isinstance(default, int | float) or float(said) != float(default):
            wrong.append(f"{where}:{n}: {flag} default {said}, the code's: {default!r}")
    assert not wrong, "\n".join(wrong)


def keys_of(value: Any, prefix: str = "") -> set[str]:
    """Every key of a JSON value, bare and as a dotted path (`machine.dataset_build`)."""
    found: set[str] = set()
    if isinstance(value, dict):
        for key, inner in value.items():
            found |= {key, prefix + key} | keys_of(inner, f"{prefix}{key}.")
    elif isinstance(value, list):
        for inner in value:
            found |= keys_of(inner, prefix)
    return found


def json_keys() -> set[str]:
    """The keys of `--json`: a recorded sweep's result as to_dict writes it today, and attach's interval objects."""
    recorded = json.loads((ROOT / "tests" / "data" / "recorded_result.json").read_text())
    keys = keys_of(SweepResult.from_dict(recorded).to_dict())
    keys |= {f.name for cls in (LiveSnapshot, JobRanks, RankRow) for f in dataclasses.fields(cls)}
    return keys | {"worker_pids", "worker_uss_mb", "worker_uss_slope_mb_per_min"}  # LiveSnapshot.to_dict adds these


def test_every_json_key_the_docs_name_is_in_a_real_result() -> None:
    keys, wrong = json_keys(), []
    for where, n, line in lines():
        if where == "docs/stages.md" or not re.search(r"\bJSON\b|--json|result\.json", line):
            continue  # stages' own JSON: its page is checked by its tests
        for name in re.findall(r"`([a-z][a-z0-9_]*(?:\.[a-z0-9_]+)+|[a-z][a-z0-9]*_[a-z0-9_]+)`", line):
            if not name.endswith((".json", ".jsonl", ".csv", ".md", ".log", ".py")) and name not in keys:
                wrong.append(f"{where}:{n}: {name}")
    assert not wrong, "JSON keys no result has:\n" + "\n".join(wrong)


def readme_table(heading: str) -> list[str]:
    """The first cells of the table under a README heading."""
    text = (ROOT / "README.md").read_text().split(f"## {heading}\n", 1)[1]
    rows = [line for line in text.split("\n## ", 1)[0].splitlines() if line.startswith("| ")]
    return [row.split(" | ")[0].removeprefix("| ").strip() for row in rows[1:]]


def test_the_columns_the_readme_explains_are_the_headers_the_faces_print() -> None:
    named = [name.strip() for cell in readme_table("Reading the results") for name in cell.split(", ")]
    marks = {f"{RECOMMENDED} {KNEE}"}
    unknown = sorted(set(named) - marks - set(HEADERS.values()))
    assert not unknown, f"not a column the faces print: {unknown}"


def test_the_tui_table_s_labels_are_the_report_s_or_spelled_out_in_docs_tui() -> None:
    tui = (ROOT / "docs" / "tui.md").read_text()
    assert dict((key, label) for label, key in TUI_COLUMNS)["change"] == HEADERS["change"]  # one column, one name
    short = [label for label, key in TUI_COLUMNS if label and label != HEADERS.get(key)]
    missing = [label for label in short if f"`{label}`" not in tui]
    assert not missing, f"TUI labels docs/tui.md does not explain: {missing}"
    for where, n, line in lines():
        assert "Δ prev" not in line, f"{where}:{n}: the column is {HEADERS['change']!r} in every face"


def test_the_docs_agree_a_factory_may_return_a_dataloader_as_the_code_takes_one() -> None:
    torch_data = pytest.importorskip("torch.utils.data")
    from loadertop.core.datasets.spec import check_loaded

    loaded = check_loaded(torch_data.DataLoader(list(range(8)), batch_size=2, drop_last=True), "a factory")
    assert loaded.loader_name == "DataLoader" and loaded.extra == {"drop_last": True}
    text = {path.name: " ".join(path.read_text().split()) for path in DOCS}
    assert "a `DataLoader` or torchdata `StatefulDataLoader` itself" in text["README.md"]
    assert "a `DataLoader` or `StatefulDataLoader`" in text["datasets.md"]
    assert "a `--dataset` factory may return a `DataLoader` or `StatefulDataLoader`" in text["tune.md"]
    for name, page in text.items():
        assert "not loader objects" not in page and "to pass `loader.dataset`" not in page, name


def test_the_docs_agree_the_dataset_is_built_once_per_sweep() -> None:
    text = {path.name: " ".join(path.read_text().split()) for path in DOCS}
    assert "The dataset is built once per sweep" in text["README.md"]
    assert "built once per sweep" in text["datasets.md"]
    for name, page in text.items():
        assert "calls the factory in a fresh process" not in page, name


def test_the_readme_s_timing_of_the_default_run_says_what_machine_it_was_measured_on() -> None:
    text = " ".join((ROOT / "README.md").read_text().split())
    said = re.search(r"`loadertop` with no arguments sweeps the built-in synthetic workload[^.]*\.", text)
    assert said is not None
    assert re.search(r"\d+:\d\d", said.group()) and "measured on" in said.group(), said.group()


def test_every_environment_variable_the_docs_name_is_read_by_the_code() -> None:
    source = "\n".join(path.read_text() for path in (ROOT / "loadertop").rglob("*.py"))
    named = {name for _, _, line in lines() for name in re.findall(r"\bLOADERTOP_[A-Z_]+\b", line)}
    assert named and not {name for name in named if name not in source}


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def headings(page: Path) -> set[str]:
    return {slug(h) for h in re.findall(r"^#+ (.*)$", page.read_text(), re.M)}


def test_every_link_and_path_the_docs_give_leads_somewhere() -> None:
    broken = []
    for page in DOCS:
        text = page.read_text()
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if target.startswith("http"):
                continue
            path, _, anchor = target.partition("#")
            found = page.parent / path if path else page
            if not found.exists() or (anchor and found.suffix == ".md" and anchor not in headings(found)):
                broken.append(f"{page.name}: {target}")
        for path in re.findall(r"(?<![\w/.-])((?:loadertop|tests|benchmarks|docs|screenshots)/[\w./-]*\w)", text):
            if not (ROOT / path).exists() and not (page.parent / path).exists():
                broken.append(f"{page.name}: {path}")
    assert not broken, "\n".join(broken)


def test_every_column_the_docs_name_is_one_a_face_or_the_csv_prints() -> None:
    from loadertop.core.engine.report.export import CSV_COLUMNS

    printed, wrong = set(HEADERS.values()), []
    for where, n, line in lines():
        if where == "docs/stages.md":
            continue  # the stage table's own columns
        csv = set(CSV_COLUMNS) if "CSV" in line else set()
        for names in re.findall(r"((?:`[^`]+`(?:, | and |/)?)+) columns?\b", line):
            named = re.findall(r"`([^`]+)`", names)
            # `wait_ms_p50`/`p95`/`p99`: the CSV's wait_ms_p95 and wait_ms_p99
            named = [f"wait_ms_{name}" if f"wait_ms_{name}" in csv else name for name in named]
            wrong += [f"{where}:{n}: {name}" for name in named if name not in printed | csv]
    assert not wrong, "columns no face prints:\n" + "\n".join(wrong)


def test_docs_architecture_names_every_module_of_loadertop() -> None:
    architecture = (ROOT / "docs" / "architecture.md").read_text()
    modules = {p.name for p in (ROOT / "loadertop").rglob("*.py") if p.name not in ("__init__.py", "__main__.py")}
    assert not {m for m in modules if not re.search(rf"\b{re.escape(m)}\b", architecture)}
