"""The benchmark's real workloads (benchmarks/workloads/): each factory builds through loadertop's dataset spec
path and yields tensors, in the main process and in a real worker, and a short headless sweep at --workers 0,1
measures it. Small data in a temporary cache. Skipped only when the `bench` extra (torchvision, tokenizers,
soundfile, librosa) is not installed. Also the independent ruler (benchmarks/ruler.py) on a real loader, and the
pure scoring of search_repro.py's report against it."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from loadertop.core.datasets.spec import load_dataset
from loadertop.core.model.config import TrialConfig

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = ROOT / "benchmarks" / "workloads"
sys.path.insert(0, str(ROOT / "benchmarks"))

needs_torchvision = pytest.mark.skipif(
    importlib.util.find_spec("torchvision") is None, reason="torchvision not installed (pip install -e '.[bench]')"
)
needs_tokenizers = pytest.mark.skipif(
    importlib.util.find_spec("tokenizers") is None, reason="tokenizers not installed (pip install -e '.[bench]')"
)
needs_audio = pytest.mark.skipif(
    importlib.util.find_spec("librosa") is None or importlib.util.find_spec("soundfile") is None,
    reason="soundfile and librosa not installed (pip install -e '.[bench]')",
)
CASES = [
    pytest.param("tv_imagefolder.py:imagefolder", {"images": "12"}, marks=needs_torchvision, id="torchvision"),
    pytest.param("text_tokens.py:text", {"lines": "64", "length": "32"}, marks=needs_tokenizers, id="tokenizers"),
    pytest.param("decode_float.py:decode", {"images": "12"}, id="decode"),
    pytest.param("audio_logmel.py:audio", {"clips": "12"}, marks=needs_audio, id="audio"),
]
SHAPES = {"decode_float.py:decode": (4, 3, 160, 160), "audio_logmel.py:audio": (4, 64, 201)}


def tensors_of(batch: object) -> list:
    import torch

    items = batch.values() if isinstance(batch, dict) else batch
    return [x for x in items if isinstance(x, torch.Tensor)]  # type: ignore[union-attr]


@pytest.mark.parametrize(("target", "args"), CASES)
def test_factory_yields_tensors_in_a_real_worker(target: str, args: dict[str, str], tmp_path: Path) -> None:
    import torch
    from torch.utils.data import DataLoader

    dataset, extra = load_dataset(f"{WORKLOADS / target}", {**args, "cache": str(tmp_path)})
    own = target in SHAPES  # a user's own factories: they shuffle and drop the last short batch
    assert extra == ({"shuffle": True, "drop_last": True} if own else {})
    assert len(dataset) == int(args.get("images", args.get("lines", args.get("clips", 0))))
    for workers in (0, 1):
        batch = next(iter(DataLoader(dataset, batch_size=4, num_workers=workers, **extra)))
        tensors = tensors_of(batch)
        assert tensors and all(t.shape[0] == 4 for t in tensors)
        if own:  # float tensors of the pipeline's shape: [0, 1] pixels, or a masked log-mel (some zeros)
            assert tensors[0].shape == SHAPES[target] and tensors[0].dtype == torch.float32
            assert torch.isfinite(tensors[0]).all() and tensors[0].std() > 0
        elif "images" in args:  # RandomResizedCrop(224) + ToTensor + Normalize: floats around 0, 3×224×224
            assert tensors[0].shape == (4, 3, 224, 224) and tensors[0].dtype == torch.float32
            assert tensors[0].min() < 0 < tensors[0].max()
        else:  # padded or truncated to `length`, [CLS] first, a real mask
            ids, mask = batch["input_ids"], batch["attention_mask"]
            assert ids.shape == mask.shape == (4, 32) and ids.dtype == torch.int64
            assert (ids[:, 0] == dataset.tokenizer.token_to_id("[CLS]")).all() and mask.sum() > 0
    made = sorted(p.name for p in tmp_path.iterdir())
    assert len(made) == 1 and not made[0].startswith(".")  # the data, whole, and no half-made temporary left


@pytest.mark.parametrize(("target", "args"), CASES)
def test_headless_sweep_measures_the_workload(target: str, args: dict[str, str], tmp_path: Path) -> None:
    pairs = {**args, "cache": str(tmp_path / "cache")}
    arg_flags = [flag for k, v in pairs.items() for flag in ("--dataset-arg", f"{k}={v}")]
    out = subprocess.run(
        [sys.executable, "-m", "loadertop", "--headless", "--workers", "0,1", "--batch-size", "4",
         "--trial-seconds", "1", "--no-transport", "--dataset", str(WORKLOADS / target), *arg_flags,
         "--out", str(tmp_path / "runs"), "--json", str(tmp_path / "out.json")],
        capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    trials = json.loads((tmp_path / "out.json").read_text())["trials"]
    # 0 and 1 workers, and a persistent twin of 1 where its epochs restart at a cost (engine/search/persist.py)
    assert [t["config"]["num_workers"] for t in trials if not t["config"]["persistent_workers"]] == [0, 1]
    assert all(t["config"]["num_workers"] == 1 for t in trials if t["config"]["persistent_workers"])
    assert all(t["status"] == "ok" and t["samples_per_s"] > 0 for t in trials)


def _search(pick: int, equivalent: list[int], segment: int, trials: list[tuple[int, float]], wall: float) -> dict:
    """A search's record as search_repro.py keeps it (a real SweepResult's dict)."""
    from loadertop.core.model.config import Settings
    from loadertop.core.model.results import Recommendation, SweepResult, TrialResult

    def config(n: int) -> TrialConfig:
        return TrialConfig(num_workers=n, batch_size=32)

    done = tuple(TrialResult(i, config(n), "ok", samples_per_s=x) for i, (n, x) in enumerate(trials))
    rec = Recommendation(config(pick), dict(trials)[pick], "", "", 0, equivalent=tuple(config(n) for n in equivalent))
    from test_analysis import machine

    result = SweepResult(machine=machine(), settings=Settings(), trials=done, knee=None, recommendation=rec)
    return {"result": result.to_dict(), "wall_s": wall, "segment": segment, "load": [0.0, 0.0]}


def _entry() -> dict:
    """Two ruler passes around one search, and three around two: the machine 10% faster by the third."""
    walls, when = {"0": 11.0, "2": 11.0, "4": 13.0}, {"at": "12:00", "wall_s": 35.0, "load": [1.0, 1.0]}
    passes = [
        {"runs": {"0": [100.0], "2": [200.0], "4": [210.0]}, "run_wall_s": walls, **when},
        {"runs": {"0": [100.0], "2": [190.0], "4": [200.0]}, "run_wall_s": walls, **when},
        {"runs": {"0": [110.0], "2": [220.0], "4": [230.0]}, "run_wall_s": walls, **when},
    ]
    return {
        "passes": passes,
        "searches": [
            _search(2, [2, 4], 0, [(0, 100.0), (2, 195.0), (4, 205.0)], 40.0),
            _search(4, [2, 4], 1, [(0, 105.0), (2, 200.0), (4, 230.0)], 30.0),
        ],
        "exhaustive_wall_s": 200.0,
    }


@pytest.mark.unit
def test_the_repro_report_compares_each_figure_with_the_ruler_in_the_same_minutes() -> None:
    import repro_report as rr

    entry = _entry()
    ref = rr.reference(entry)
    assert ref[2][0] == pytest.approx((200 + 190 + 220) / 3) and ref[4][0] == pytest.approx(640 / 3)
    assert rr.bracket(entry, 0, 2) == pytest.approx(195.0) and rr.bracket(entry, 1, 2) == pytest.approx(205.0)
    by = {(source, n): r for source, n, _, r in rr.ratios(entry)}
    assert by[("search 1", 2)] == pytest.approx(1.0) and by[("search 2", 4)] == pytest.approx(230 / 215)
    assert by[("search 2 pick", 4)] == pytest.approx(230 / 215)
    assert rr.accuracy(entry, 2) == pytest.approx((610 / 3) / (640 / 3)) and rr.accuracy(entry, 16) is None
    grid, plain = rr.cost(entry, entry["searches"][0])
    assert grid == pytest.approx(40 / 200) and plain == pytest.approx(40 / (11 * 3 + 12 + 13 * 29))
    assert rr.mutual(entry)
    entry["searches"][1] = _search(4, [4], 1, [(2, 200.0), (4, 230.0)], 30.0)  # run 2's set lacks run 1's pick
    assert not rr.mutual(entry)
    assert "| 2 | 200, 190, 220 |" in rr.render({"workloads": {"w": {**entry, "title": "w", "spec": "s",
                                                                    "batch_size": 32, "why": "y"}}})  # fmt: skip


def test_the_ruler_times_a_plain_loop_and_imports_no_measurement_code(tmp_path: Path) -> None:
    import ast

    source = (ROOT / "benchmarks" / "ruler.py").read_text()
    imported = {n.module for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ImportFrom) and n.module}
    imported |= {a.name for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Import) for a in n.names}
    assert {m for m in imported if m.startswith("loadertop")} == {"loadertop.core.datasets.spec"}  # the workload
    out = tmp_path / "ruler.json"
    subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "ruler.py"), "--dataset", "synthetic:cpu_ms=0,io_ms=2,kb=1",
         "--batch-size", "8", "--workers", "0,2", "--runs", "2", "--seconds", "0.5", "--json", str(out)],
        check=True, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    record = json.loads(out.read_text())
    for n in ("0", "2"):
        runs = record["configs"][n]["runs"]
        assert len(runs) == 2 and all(r["seconds"] >= 0.5 and r["batches"] >= 10 for r in runs)
        # 8 samples a batch, 2 ms each: at most 500 samples/s a loader process, measured from a plain loop
        assert all(0 < r["samples_per_s"] <= 500.0 * max(1, int(n)) * 1.1 for r in runs)
    assert record["configs"]["2"]["mean"] > 1.3 * record["configs"]["0"]["mean"]  # two workers sleep side by side
