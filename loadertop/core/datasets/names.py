"""A factory spec checked before anything is imported: the file exists and defines the name, or the module can be
found and defines it, read from its source with `ast`. A typo (`train.py:biuld`) fails in the parent in a few
milliseconds, with the close names, instead of after a runner has started and imported torch.

Only what the source says for sure is refused: a module that makes names at run time (`from x import *`, a module
`__getattr__`, `globals()`), one without readable source, or one that does not parse is left to the runner, which
imports it and says what it finds."""

from __future__ import annotations

import ast
import difflib
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from loadertop.core.datasets.errors import SpecError

BUILT_IN_FORMS = ("synthetic", "imagefolder", "webdataset", "hf", "pickle")


def check_factory_spec(spec: str, what: str = "dataset") -> None:
    """SpecError (one line, with "did you mean") when a `file.py:name` or `module:name` spec surely names nothing."""
    if what == "dataset" and spec.partition(":")[0] in BUILT_IN_FORMS:
        return
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        return  # the runner's split_callable says what the forms are
    if target.endswith(".py"):
        if not Path(target).is_file():
            raise SpecError(f"file {target!r} not found{_close_files(Path(target))}")
        source: Path | None = Path(target)
    else:
        source = _module_source(target)
    if source is None:
        return
    defined = top_level_names(source)
    first = attr.split(".")[0]
    if defined is not None and first not in defined:
        raise SpecError(f"{target} has no attribute {first!r}{did_you_mean(first, defined)}")


def did_you_mean(name: str, names: set[str]) -> str:
    public = sorted(n for n in names if not n.startswith("_") or name.startswith("_"))
    close = difflib.get_close_matches(name, public, n=3, cutoff=0.6)
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def _close_files(path: Path) -> str:
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        return ""
    close = difflib.get_close_matches(path.name, [p.name for p in folder.glob("*.py")], n=3, cutoff=0.6)
    return f"; did you mean {' or '.join(repr(str(path.parent / c)) for c in close)}?" if close else ""


def _module_source(target: str) -> Path | None:
    """The source file of `pkg.mod`, found as the runner will find it (the current folder first) but without running
    any package's code; SpecError when its top-level package is nowhere on the path; None when unsure."""
    parts = target.split(".")
    if parts[0] in sys.modules or parts[0] in sys.builtin_module_names:
        return None
    search: list[str] | None = [os.getcwd(), *sys.path]
    found = None
    for depth, part in enumerate(parts):
        found = importlib.machinery.PathFinder.find_spec(part, search)
        if found is None and depth == 0:
            found = importlib.util.find_spec(part)  # an editable install's finder, say: finding runs no code
        if found is None:
            if depth == 0:
                raise SpecError(f"cannot import {target!r}: no module named {part!r}")
            return None  # a package that makes its submodules at run time: the runner knows
        search = list(found.submodule_search_locations or []) or None
        if search is None and depth < len(parts) - 1:
            return None
    origin = found.origin if found is not None else None
    return Path(origin) if origin and origin.endswith(".py") else None


def top_level_names(path: Path) -> set[str] | None:
    """Every name the module's top level binds; None when its names cannot be known from its source."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return None
    names: set[str] = set()
    for node in _module_scope(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                if alias.name == "*":
                    return None
                names.add(alias.asname or alias.name.split(".")[0])
    if "__getattr__" in names or _dynamic(tree):
        return None
    return names


def _module_scope(tree: ast.Module) -> Iterator[ast.AST]:
    """The module's statements and expressions, not the bodies of its functions and classes (their names only)."""
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        todo.extend(ast.iter_child_nodes(node))


def _dynamic(tree: ast.Module) -> bool:
    """A module that binds names where its source does not show them: `global` in a function, `globals()`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("globals", "vars"):
            return True
    return False
