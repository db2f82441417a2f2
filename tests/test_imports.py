"""Where code runs is the folder it lives in: the import-linter contracts in pyproject.toml hold, and (at run time)
the core loads no UI library and loadertop's own process never pays for torch."""

from __future__ import annotations

import pkgutil
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import loadertop.core

ROOT = Path(__file__).resolve().parent.parent
CORE_MODULES = sorted(m.name for m in pkgutil.walk_packages(loadertop.core.__path__, "loadertop.core."))
UI_PACKAGES = {"textual", "rich", "plotext", "textual_plotext"}
# The folders whose code runs in loadertop's own process (the engine and the machine probes) and what they share.
OWN_PROCESS = [m for m in CORE_MODULES if m.split(".")[2:3] in (["engine"], ["machine"], ["model"])]


def loaded_after_import(module: str) -> set[str]:
    code = f"import sys, {module}; print('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return {name.split(".")[0] for name in out.split()}


def test_import_contracts_hold() -> None:
    lint = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    done = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_core_modules_found() -> None:
    assert "loadertop.core.engine.driver" in OWN_PROCESS and "loadertop.core.trial.runner" in CORE_MODULES
    assert len(OWN_PROCESS) >= 10


@pytest.mark.parametrize("module", CORE_MODULES)
def test_core_imports_no_ui_library(module: str) -> None:
    loaded = loaded_after_import(module)
    assert not loaded & UI_PACKAGES, f"{module} pulls in {sorted(loaded & UI_PACKAGES)}"


@pytest.mark.parametrize("module", OWN_PROCESS)
def test_own_process_does_not_import_torch(module: str) -> None:
    assert "torch" not in loaded_after_import(module)


def test_cli_imports_neither_torch_nor_textual() -> None:
    loaded = loaded_after_import("loadertop.cli")
    assert "torch" not in loaded and "textual" not in loaded
