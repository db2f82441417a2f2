"""A user's first hour on their own pipeline, end to end with real processes: their ImageFolder-like
JPEG pipeline and loader keywords, their conv-net step as --consumer, the PIL-without-ToTensor mistake, and tune on
their shuffled loader. What the tool says must hold: exit codes, snippets that keep what the user set, reasons the
table does not contradict, memory figures of each trial's own workers, a headless table that reads in a file.
(watch + attach on the same pipeline: tests/test_watch_timing.py, against the job's own perf_counter timing.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from reason_checks import contradictions

from loadertop.core.model.results import SweepResult

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"


def loadertop_cli(*args: str, runs: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": ""}
    command = [sys.executable, "-m", "loadertop", "--headless", "--out", str(runs), *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Imported here, not at collection: the module builds its optimizer on import (torch._dynamo, ~2 s of CPU in
    # every test worker).
    sys.path.insert(0, str(DATA))  # tests/data is not a package
    from first_hour import make_images

    return make_images(tmp_path_factory.mktemp("first_hour") / "images", per_class=40)


def test_the_sweep_keeps_the_users_keywords_and_every_sentence_holds(
    images: Path, runs: Path, tmp_path: Path, no_leftovers: None
) -> None:
    out = tmp_path / "result.json"
    done = loadertop_cli(
        "--dataset", f"{DATA}/first_hour.py:build", "--dataset-arg", f"root={images}",
        "--consumer", f"{DATA}/first_hour.py:convnet_step", "--batch-size", "8",
        "--workers", "0,1,2", "--search", "grid", "--trial-seconds", "2", "--json", str(out), runs=runs,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = SweepResult.from_dict(json.loads(out.read_text()))
    rec = result.recommendation
    assert rec is not None
    # the user's factory set shuffle and drop_last: the line to paste keeps them and changes only what was tuned
    assert "shuffle=True" in rec.snippet and "drop_last=True" in rec.snippet, rec.snippet
    assert "batch_size=8" in rec.snippet, rec.snippet
    assert contradictions(result) == [], contradictions(result)
    for t in result.trials:  # each trial's memory is its own workers', not a neighbour's
        if t.status == "ok":
            assert len(t.worker_uss_mb) <= t.config.num_workers, (t.config, t.worker_uss_mb)
    # piped to a file (no terminal, no COLUMNS): the table fits 100 columns, one line per row
    assert max(len(line) for line in done.stdout.splitlines()) <= 100, done.stdout


def test_a_dataset_of_pil_images_exits_2_in_one_line_and_leaves_no_run_folder(images: Path, runs: Path) -> None:
    done = loadertop_cli(
        "--dataset", f"{DATA}/first_hour.py:pil_only", "--dataset-arg", f"root={images}",
        "--workers", "0,1,2,4", "--trial-seconds", "2", runs=runs,
    )  # fmt: skip
    assert done.returncode == 2, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "ToTensor()" in errors[0], done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert list(runs.iterdir()) == [], "bad input leaves no run folder"


TUNE_JOB = r"""
import json, sys
sys.path.insert(0, sys.argv[2])
from torch.utils.data import DataLoader
import loadertop
from first_hour import Folder, convnet_step

loader = DataLoader(Folder(sys.argv[1]), batch_size=8, shuffle=True, num_workers=1, timeout=30)
tuned = loadertop.tune(loader, budget_s=6, max_workers=2)
seen, epochs = [], 0
while tuned.choice is None and epochs < 200:  # train until tune has settled (its budget spent)
    for x, y in tuned:
        convnet_step((x, y))
        seen.append(len(y))
    epochs += 1
print(json.dumps({"snippet": tuned.snippet, "batches": len(seen), "epochs": epochs, "per_epoch": len(loader)}))
"""


def test_tune_keeps_the_users_loader_arguments(images: Path, tmp_path: Path, no_leftovers: None) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LOADERTOP_JOBS_DIR": str(tmp_path)}
    args = [sys.executable, "-c", TUNE_JOB, str(images), str(DATA)]
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["batches"] == report["epochs"] * report["per_epoch"]  # every epoch whole while tuning
    snippet = report["snippet"]
    assert "batch_size=8" in snippet and "shuffle=True" in snippet, snippet
    # the user's timeout goes with workers only: torch's 0-worker iterator asserts it is 0
    assert ("timeout=30" in snippet) == ("num_workers=" in snippet), snippet
