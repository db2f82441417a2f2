"""Dataset and consumer specs: every form loads, every bad one is one line and exit code 2 through the real CLI."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import psutil
import pytest
import torch

from loadertop.core.datasets.errors import SpecError, one_line
from loadertop.core.datasets.spec import check_dataset, load_callable, load_dataset, split_callable
from loadertop.core.engine.drive.runner_start import template_pid

DATA = Path(__file__).parent / "data"
Run = tuple[int, str, str]  # exit code, stdout, stderr


@pytest.mark.unit
def test_file_spec_with_collate_fn_and_drop_last() -> None:
    dataset, extra = load_dataset(f"{DATA}/collate_ds.py:build", {"length": "10", "features": "4"})
    assert len(dataset) == 10
    assert set(extra) == {"collate_fn", "drop_last"}
    batch = extra["collate_fn"]([dataset[0], dataset[1]])
    assert batch["x"].shape == (2, 4) and batch["ids"] == ["rec-000000", "rec-000001"]
    # The file's folder is on sys.path, so spawn workers can import what it defines by name.
    assert str(DATA) in sys.path
    assert type(dataset).__module__ == "collate_ds"


@pytest.mark.unit
def test_package_module_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(DATA))
    dataset, extra = load_dataset("pkgds.tabular:make", {"rows": "5", "width": "8"})
    x, y = dataset[3]
    assert len(dataset) == 5 and x.shape == (8,) and y == 0 and extra == {}


@pytest.mark.unit
def test_synthetic_and_imagefolder_specs(tmp_path: Path) -> None:
    from loadertop.core.datasets.imagefolder import make_image_folder

    dataset, extra = load_dataset("synthetic:length=7,kb=1")
    assert len(dataset) == 7 and extra == {}
    make_image_folder(tmp_path / "imgs", count=4, classes=2, min_side=40, max_side=60)
    dataset, _ = load_dataset(f"imagefolder:{tmp_path / 'imgs'}:size=32")
    assert len(dataset) == 4 and dataset[0][0].shape == (3, 32, 32)


@pytest.mark.unit
@pytest.mark.parametrize(
    ("spec", "kwargs", "needle"),
    [
        (f"{DATA}/missing.py:build", {}, "not found"),
        (f"{DATA}/collate_ds.py:nope", {}, "has no attribute 'nope'"),
        (f"{DATA}/broken_import.py:make", {}, "No module named 'nonexistent_dependency_xyz'"),
        ("no_such_pkg_xyz.mod:make", {}, "cannot import 'no_such_pkg_xyz.mod'"),
        (f"{DATA}/bad_specs.py:raises", {}, "raised FileNotFoundError: /data/train/labels.csv"),
        (f"{DATA}/bad_specs.py:not_a_dataset", {}, "returned dict_items, not a Dataset"),
        (f"{DATA}/bad_specs.py:empty", {}, "empty dataset"),
        (f"{DATA}/bad_specs.py:empty_loader", {}, "bad_specs.py:empty_loader returned an empty dataset"),
        (f"{DATA}/bad_specs.py:fixes_batch_size", {}, "fixes batch_size, which loadertop sweeps"),
        (f"{DATA}/collate_ds.py:build", {"bogus": "1"}, "unexpected keyword argument 'bogus'"),
        ("nocolon", {}, "expected synthetic"),
        ("imagefolder:/nonexistent/folder", {}, "folder not found"),
    ],
)
def test_bad_specs_raise_one_line(spec: str, kwargs: dict[str, str], needle: str) -> None:
    with pytest.raises(SpecError) as caught:
        load_dataset(spec, kwargs)
    message = str(caught.value)
    assert needle in message and "\n" not in message


@pytest.mark.unit
def test_what_counts_as_a_dataset() -> None:
    assert check_dataset([torch.zeros(2), torch.ones(2)], "x:y")[0][1].sum() == 2  # a list of samples works
    for wrong in ("a string", b"bytes", 42, None):
        with pytest.raises(SpecError, match="not a Dataset"):
            check_dataset(wrong, "x:y")
    with pytest.raises(SpecError, match="without a 'dataset' key"):
        check_dataset({"collate_fn": print}, "x:y")
    with pytest.raises(SpecError, match="colate_fn, which DataLoader does not take"):
        check_dataset({"dataset": [1], "colate_fn": print}, "x:y")


@pytest.mark.unit
def test_multi_line_messages_become_one_line() -> None:
    assert one_line("first\n  second\tthird ") == "first second third"
    assert "\n" not in str(SpecError("a\nb"))


@pytest.mark.unit
def test_consumer_specs() -> None:
    step = load_callable(f"{DATA}/steps.py:matmul_step", "consumer")
    step(torch.zeros(4, 300))
    with pytest.raises(SpecError, match="is not callable"):
        load_callable(f"{DATA}/steps.py:not_callable", "consumer")
    with pytest.raises(SpecError, match="consumer spec 'steps'"):
        split_callable("steps", "consumer")


# -- through the real CLI: one line on stderr, exit code 2, no traceback, nothing left running ------------------


def _tagged(tag: str) -> list[psutil.Process]:
    """Processes (any parent) that inherited this test's environment tag: what a run left behind."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid == template_pid():  # the runner template stays for the next sweep, by design
                continue
            if proc.environ().get("LOADERTOP_TEST_TAG") == tag and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


BAD = [
    (["--dataset", f"{DATA}/missing.py:build"], "file '", "not found"),
    (["--dataset", f"{DATA}/collate_ds.py:nope"], "has no attribute 'nope'", ""),
    (["--dataset", f"{DATA}/broken_import.py:make"], "importing broken_import.py raised ModuleNotFoundError", ""),
    (["--dataset", "no_such_pkg_xyz.mod:make"], "cannot import 'no_such_pkg_xyz.mod'", ""),
    (["--dataset", f"{DATA}/bad_specs.py:raises"], "raised FileNotFoundError", "labels.csv"),
    (["--dataset", f"{DATA}/bad_specs.py:not_a_dataset"], "not a Dataset", ""),
    (["--dataset", f"{DATA}/bad_specs.py:empty"], "empty dataset", ""),
    (["--dataset", f"{DATA}/bad_specs.py:empty_loader"], "empty dataset", ""),
    (["--dataset", f"{DATA}/bad_specs.py:own_loader"], "a OwnLoader with a trial's arguments", "TypeError"),
    (["--dataset", f"{DATA}/iterables.py:empty_stream"], "IterableDataset that yields nothing", ""),
    (["--dataset", f"{DATA}/bad_specs.py:unpicklable", "--start-method", "spawn"], "cannot be pickled", "spawn"),
    (["--dataset", f"{DATA}/bad_specs.py:lambda_collate", "--start-method", "forkserver"], "collate_fn (a", "function"),
    (["--dataset", "imagefolder:/nonexistent/folder"], "imagefolder '/nonexistent/folder': folder not found", ""),
    (["--consumer", f"{DATA}/steps.py:not_callable"], "--consumer: ", "is not callable"),
    (["--consumer", f"{DATA}/steps.py:matmul_step", "--step-ms", "5"], "drop --step-ms", ""),
    (["--ranks", "0"], "--ranks 0", ""),
]


def _run_all(cases: list[list[str]], tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> list[Run]:
    """Each case through the CLI's main() in this process: its runners are forked from one template (a process
    each would import torch again), its one line and exit code exactly what `loadertop` prints and returns."""
    from loadertop.faces.cli import main

    results: list[Run] = []
    for args in cases:
        try:
            code = main(["--headless", "--workers", "0,1", "--out", str(tmp_path), *args])
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code if isinstance(exc.code, int) else 1
        out, err = capfd.readouterr()
        results.append((code, out, err))
    return results


def test_every_bad_spec_is_one_line_exit_2_and_leaves_nothing(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, no_leftovers: None
) -> None:
    # Left behind: a process below this one (no_leftovers), or an exec'd one anywhere with the tag (a runner forked
    # from the template shows the template's environment in /proc, so the tag alone would miss it).
    tag = uuid.uuid4().hex
    monkeypatch.setenv("LOADERTOP_TEST_TAG", tag)  # in every process a case starts
    results = _run_all([args for args, _, _ in BAD], tmp_path, capfd)
    for (args, needle, also), (code, out, err) in zip(BAD, results, strict=True):
        lines = err.strip().splitlines()
        assert code == 2, (args, err)
        assert len(lines) == 1 and lines[0].startswith("loadertop: error: "), (args, err)
        assert needle in lines[0] and also in lines[0], (args, lines[0])
        assert "Traceback" not in err and out == "", (args, err)
    assert not _tagged(tag), "a bad spec left processes behind"
