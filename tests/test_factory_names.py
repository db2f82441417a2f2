"""A mistyped factory file or name fails in loadertop's own process, before a runner starts or torch is imported,
in one line that names the close names."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from loadertop.core.datasets.errors import SpecError
from loadertop.core.datasets.names import check_factory_spec, top_level_names
from loadertop.core.engine import build_settings
from loadertop.core.model.config import UsageError

pytestmark = pytest.mark.unit

TRAIN = """\
import os
from typing import Any as _Any

SIZE = 224

def build(root: str = "/data") -> list[int]:
    helper = 1
    return [helper]

class Images:
    def rebuild(self) -> None: ...

try:
    from fast_decode import decode
except ImportError:
    decode = None
"""


@pytest.fixture
def train(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(TRAIN)
    return path


def test_the_top_level_names_are_read_from_the_source_without_importing_it(train: Path) -> None:
    names = top_level_names(train)
    assert names == {"os", "_Any", "SIZE", "build", "Images", "decode"}
    assert "fast_decode" not in sys.modules and "train" not in sys.modules


def test_a_mistyped_callable_is_refused_by_the_settings_with_the_close_name(train: Path) -> None:
    with pytest.raises(UsageError) as raised:
        build_settings({"dataset": f"{train}:biuld", "workers": "0"})
    assert str(raised.value) == f"{train} has no attribute 'biuld'; did you mean 'build'?"


def test_a_mistyped_file_is_refused_with_the_files_beside_it(train: Path) -> None:
    with pytest.raises(UsageError) as raised:
        build_settings({"dataset": f"{train.parent}/trian.py:build", "workers": "0"})
    assert str(raised.value) == f"file '{train.parent}/trian.py' not found; did you mean '{train}'?"


def test_a_mistyped_consumer_names_the_flag(train: Path) -> None:
    with pytest.raises(UsageError, match=r"^--consumer: .* has no attribute 'buid'; did you mean 'build'\?$"):
        build_settings({"consumer": f"{train}:buid", "workers": "0"})


def test_a_module_spec_is_found_without_running_the_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("raise RuntimeError('a package that must not run here')\n")
    (package / "data.py").write_text("def make():\n    return [1]\n")
    monkeypatch.chdir(tmp_path)  # the runner puts the current folder on the path, and so does the check
    check_factory_spec("mypkg.data:make")
    with pytest.raises(SpecError, match=r"^mypkg.data has no attribute 'mkae'; did you mean 'make'\?$"):
        check_factory_spec("mypkg.data:mkae")
    with pytest.raises(SpecError, match=r"^cannot import 'mypgk.data': no module named 'mypgk'$"):
        check_factory_spec("mypgk.data:make")


@pytest.mark.parametrize(
    "source",
    [
        "from helpers import *\n",
        "def __getattr__(name):\n    return name\n",
        "globals()['build'] = list\n",
        "def f():\n    global build\n    build = list\n",
        "def broken(:\n",
    ],
)
def test_a_module_that_makes_names_at_run_time_is_left_to_the_runner(tmp_path: Path, source: str) -> None:
    path = tmp_path / "dynamic.py"
    path.write_text(source)
    check_factory_spec(f"{path}:build")  # no refusal: only the import can say


def test_built_in_forms_and_the_api_s_pickles_are_not_looked_up() -> None:
    for spec in ("synthetic", "synthetic:cpu_ms=1", "imagefolder:/x", "hf:/x", "webdataset:/x/{0..1}.tar", "pickle:/x"):
        check_factory_spec(spec)
