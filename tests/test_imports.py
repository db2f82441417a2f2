"""Where code runs is the folder it lives in: the import-linter contracts in pyproject.toml hold, and (at run time)
the core loads no UI library and loadertop's own process never pays for torch.

The run-time checks import every module in two interpreters, not one each: a meta-path hook names the loadertop
module that was being imported when a forbidden package was first asked for, so one interpreter still says which
module is to blame."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import json
import pkgutil
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

import loadertop.core
from loadertop.core.model.wire import Codec

ROOT = Path(__file__).resolve().parent.parent
CORE_MODULES = sorted(m.name for m in pkgutil.walk_packages(loadertop.core.__path__, "loadertop.core."))
UI_PACKAGES = ["textual", "rich", "plotext", "textual_plotext"]
# The folders whose code runs in loadertop's own process (the engine and the machine probes) and what they share.
OWN_PROCESS = [m for m in CORE_MODULES if m.split(".")[2:3] in (["engine"], ["machine"], ["model"])]

# Run in a fresh interpreter: import each module in turn; the first request for a forbidden top-level package is
# charged to the innermost loadertop module on the stack at that moment.
_PROBE = """
import importlib, json, sys
forbidden, modules = set(sys.argv[1].split(",")), sys.argv[2].split(",")
blamed = {}
class Blame:
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top in forbidden and top not in blamed:
            f = sys._getframe(1)
            while f is not None and not f.f_globals.get("__name__", "").startswith("loadertop"):
                f = f.f_back
            blamed[top] = f.f_globals["__name__"] if f is not None else current
        return None
sys.meta_path.insert(0, Blame())
for current in modules:
    importlib.import_module(current)
print(json.dumps(blamed))
"""


def forbidden_loads(modules: list[str], forbidden: list[str]) -> dict[str, str]:
    """Which forbidden packages importing `modules` loads, each with the loadertop module that asked for it."""
    args = [sys.executable, "-c", _PROBE, ",".join(forbidden), ",".join(modules)]
    done = subprocess.run(args, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_import_contracts_hold() -> None:
    lint = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    done = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


@pytest.mark.unit
def test_core_modules_found() -> None:
    assert "loadertop.core.engine.drive.driver" in OWN_PROCESS and "loadertop.core.trial.runner" in CORE_MODULES
    assert len(OWN_PROCESS) >= 10


def test_core_imports_no_ui_library() -> None:
    assert forbidden_loads(CORE_MODULES, UI_PACKAGES) == {}


def test_own_process_and_cli_import_no_torch() -> None:
    """The engine, the machine probes, the model and the CLI: no torch (1.5 s), and the CLI no textual either;
    matplotlib is imported only when `loadertop report` draws, not by importing the CLI or the report's module."""
    modules = [*OWN_PROCESS, "loadertop.faces.cli", "loadertop.faces.report_file"]
    assert forbidden_loads(modules, ["torch", "textual", "matplotlib"]) == {}


def test_the_probe_names_the_module_to_blame() -> None:
    """The check can fail: a trial module that imports torch at its top is named."""
    trial = [m for m in CORE_MODULES if ".trial." in m]
    eager = next(m for m in trial if "\nimport torch\n" in Path(importlib.util.find_spec(m).origin).read_text())
    assert forbidden_loads([*OWN_PROCESS[:3], eager], ["torch"]) == {"torch": eager}


def placed_on_the_map(tree: str) -> set[tuple[tuple[str, ...], str]]:
    """(folder, module file) for every module the map's tree names. A word ending in "/" (`engine/`, `drive/`,
    `tui/attach/`, `widgets/:`) opens a folder; each `name.py` after it is placed in that folder, unless it carries
    its own (`trial/ceiling.py`)."""
    placed: set[tuple[tuple[str, ...], str]] = set()
    folder: tuple[str, ...] = ()
    for word in re.findall(r"[\w./-]+", tree):
        if word.endswith("/"):
            folder = tuple(part for part in word.split("/") if part)
        elif word.endswith(".py"):
            *own, name = word.split("/")
            placed.add((tuple(own) or folder, name))
    return placed


@pytest.mark.unit
def test_every_module_is_on_the_architecture_map() -> None:
    """docs/architecture.md names every module in its own folder: a module added, or moved, without its place on
    the map fails here (`drive.py` listed under `engine/` while it lives in `engine/drive/` is missing)."""
    tree = (ROOT / "docs" / "architecture.md").read_text().split("```")[1]
    placed = placed_on_the_map(tree)
    modules = [p for p in (ROOT / "loadertop").rglob("*.py") if p.name not in ("__init__.py", "__main__.py")]

    def on_map(path: Path) -> bool:
        where = path.relative_to(ROOT).parent.parts
        return any(name == path.name and where[-len(folder) :] == folder for folder, name in placed if folder)

    missing = [str(p.relative_to(ROOT)) for p in modules if not on_map(p)]
    assert missing == [], f"not in its folder in docs/architecture.md: {missing}"


NUMBERS = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}


def names_not_there(doc: str, root: Path) -> list[str]:
    """What docs/architecture.md names that the tree does not have: a module no folder of its holds, or a count of
    sub-packages ("six sub-packages") that is not the count of the package it describes."""
    tree = doc.split("```")[1]
    files = [p for p in (root / "loadertop").rglob("*.py")]
    wrong = []
    for folder, name in sorted(placed_on_the_map(tree)):
        if not any(p.name == name and p.parent.parts[-len(folder) :] == folder for p in files):
            wrong.append("/".join((*folder, name)))
    for word, package in re.findall(r"(\w+) sub-packages.*?\n\s+(\w+)/", tree, flags=re.S):
        counted = [d for d in (root / "loadertop" / "core" / "engine").iterdir() if (d / "__init__.py").exists()]
        if package == "drive" and NUMBERS.get(word) != len(counted):
            wrong.append(f"{word} sub-packages (the engine has {len(counted)})")
    return wrong


@pytest.mark.unit
def test_the_architecture_map_names_only_what_is_there() -> None:
    """The other way round: every module the map names lives in the folder it names, and the engine's sub-packages
    are as many as it says."""
    assert names_not_there((ROOT / "docs" / "architecture.md").read_text(), ROOT) == []


@pytest.mark.unit
def test_a_module_or_a_count_the_tree_lacks_is_named(tmp_path: Path) -> None:
    doc = (ROOT / "docs" / "architecture.md").read_text()
    stale = doc.replace("six sub-packages", "five sub-packages").replace("opener.py", "opener.py, gone.py")
    assert names_not_there(stale, ROOT) == ["live/gone.py", "five sub-packages (the engine has 6)"]


@pytest.mark.unit
def test_the_map_check_can_fail() -> None:
    """A module named only under another folder is not on the map."""
    placed = placed_on_the_map("core/\n  engine/ one: driver.py\n    live/ session.py, trial/ceiling.py")
    assert placed == {(("engine",), "driver.py"), (("live",), "session.py"), (("trial",), "ceiling.py")}


# JSON written by hand is for files a user keeps (exports, run folders, the attach log) and a settings digest;
# whatever crosses between processes goes through a protocol's codec (model/wire.py), typed and versioned.
FILES_AND_DIGESTS = {
    "loadertop/core/model/wire.py",
    "loadertop/core/engine/report/export.py",
    "loadertop/core/engine/report/runfolder.py",
    "loadertop/core/nodes/join.py",
    "loadertop/faces/headless_attach.py",
    "loadertop/faces/tui/attach/app.py",
}


def json_by_hand(root: Path) -> set[str]:
    return {
        str(path.relative_to(root))
        for path in (root / "loadertop").rglob("*.py")
        if re.search(r"^\s*import json\b|^\s*from json import", path.read_text(), re.MULTILINE)
    }


@pytest.mark.unit
def test_messages_between_processes_go_through_a_codec() -> None:
    assert json_by_hand(ROOT) <= FILES_AND_DIGESTS


def loose_fields(codec: Codec[Any]) -> list[str]:
    """The annotations a codec carries that say nothing of their contents: Any, or a dict of Any."""
    loose = [f"codec {annotation}" for annotation in codec._codecs if "Any" in annotation]
    for kind in codec._by_type.values():
        loose += [f"{kind.__name__}.{f.name}: {f.type}" for f in dataclasses.fields(kind) if "Any" in str(f.type)]
    return loose


@pytest.mark.unit
def test_no_untyped_mapping_crosses_a_process_boundary() -> None:
    """Every protocol between processes (runner, live job, nodes, template, stages) is a codec of typed fields:
    no message field and no record type is `Any` or `dict[str, Any]`, so what one side sends is what the other reads."""
    protocols = sorted(p.stem for p in (ROOT / "loadertop" / "core" / "model").glob("*protocol*.py"))
    assert len(protocols) >= 4, protocols
    for name in protocols:
        codec = importlib.import_module(f"loadertop.core.model.{name}")._CODEC
        assert loose_fields(codec) == [], name


@pytest.mark.unit
def test_a_loose_field_is_found() -> None:
    @dataclasses.dataclass(frozen=True)
    class Loose:
        TYPE: ClassVar[str] = "loose"
        version: int
        extra: dict[str, Any]

    codec = Codec([Loose], hello=Loose, version=1, mismatch="", records={"dict[str, Any]": (dict, dict)})
    assert loose_fields(codec) == ["codec dict[str, Any]", "Loose.extra: dict[str, Any]"]


@pytest.mark.unit
def test_json_by_hand_is_found(tmp_path: Path) -> None:
    (tmp_path / "loadertop").mkdir()
    (tmp_path / "loadertop" / "runner.py").write_text('"""x"""\n\nimport json\n')
    (tmp_path / "loadertop" / "other.py").write_text("import jsonschema\n")
    assert json_by_hand(tmp_path) == {"loadertop/runner.py"}


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module → the loadertop modules it imports, at the top or inside a function alike (`from pkg import sub`
    of a submodule is an edge to the submodule only: the package's __init__ runs anyway, as Python's parent)."""
    modules = {}
    for path in (root / "loadertop").rglob("*.py"):
        name = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        modules[name] = path
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = [f"{node.module}.{alias.name}" for alias in node.names]
                subs = [s for s in subs if s in modules]
                targets = subs if len(subs) == len(node.names) else [node.module, *subs]
            else:
                continue
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


@pytest.mark.unit
def test_no_import_cycles() -> None:
    assert cycles(import_graph(ROOT)) == []


@pytest.mark.unit
def test_an_import_cycle_is_found(tmp_path: Path) -> None:
    package = tmp_path / "loadertop"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("import loadertop.b\n")
    (package / "b.py").write_text("def f():\n    from loadertop import c\n")
    (package / "c.py").write_text("from loadertop.a import x\n")
    (package / "d.py").write_text("from loadertop import a\n")
    assert cycles(import_graph(tmp_path)) == [["loadertop.a", "loadertop.b", "loadertop.c"]]
