"""The core is plain Python (no UI libraries), and the driver side never pays for torch."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import pytest

import loadertop.core

CORE_MODULES = sorted(f"loadertop.core.{m.name}" for m in pkgutil.iter_modules(loadertop.core.__path__))
UI_PACKAGES = ("textual", "rich", "plotext", "textual_plotext")
# Modules that run in the loadertop process (CLI, TUI, driver): importing torch there costs seconds.
DRIVER_SIDE = ("config", "events", "results", "driver", "probes", "gpu", "machine", "analysis", "runfolder", "export")


def loaded_after_import(module: str) -> set[str]:
    code = f"import sys, {module}; print('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return {name.split(".")[0] for name in out.split()}


def test_core_modules_found() -> None:
    assert "loadertop.core.driver" in CORE_MODULES and len(CORE_MODULES) >= 10


@pytest.mark.parametrize("module", CORE_MODULES)
def test_core_imports_no_ui_library(module: str) -> None:
    loaded = loaded_after_import(module)
    assert not loaded & set(UI_PACKAGES), f"{module} pulls in {sorted(loaded & set(UI_PACKAGES))}"


@pytest.mark.parametrize("name", DRIVER_SIDE)
def test_driver_side_does_not_import_torch(name: str) -> None:
    assert "torch" not in loaded_after_import(f"loadertop.core.{name}")


def test_cli_imports_neither_torch_nor_textual() -> None:
    loaded = loaded_after_import("loadertop.cli")
    assert "torch" not in loaded and "textual" not in loaded
