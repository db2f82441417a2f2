"""The benchmark's real workloads (benchmarks/workloads/): each factory builds through loadertop's dataset spec
path and yields tensors, in the main process and in a real worker, and a short headless sweep at --workers 0,1
measures it. Small data in a temporary cache. Skipped only when the `bench` extra (torchvision, tokenizers) is
not installed. Also the pure scoring of search_repro.py's repeated runs (mutual equivalence)."""

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
CASES = [
    pytest.param("tv_imagefolder.py:imagefolder", {"images": "12"}, marks=needs_torchvision, id="torchvision"),
    pytest.param("text_tokens.py:text", {"lines": "64", "length": "32"}, marks=needs_tokenizers, id="tokenizers"),
]


def tensors_of(batch: object) -> list:
    import torch

    items = batch.values() if isinstance(batch, dict) else batch
    return [x for x in items if isinstance(x, torch.Tensor)]  # type: ignore[union-attr]


@pytest.mark.parametrize(("target", "args"), CASES)
def test_factory_yields_tensors_in_a_real_worker(target: str, args: dict[str, str], tmp_path: Path) -> None:
    import torch
    from torch.utils.data import DataLoader

    dataset, extra = load_dataset(f"{WORKLOADS / target}", {**args, "cache": str(tmp_path)})
    assert extra == {} and len(dataset) == int(args.get("images", args.get("lines", 0)))
    for workers in (0, 1):
        batch = next(iter(DataLoader(dataset, batch_size=4, num_workers=workers, **extra)))
        tensors = tensors_of(batch)
        assert tensors and all(t.shape[0] == 4 for t in tensors)
        if "images" in args:  # RandomResizedCrop(224) + ToTensor + Normalize: floats around 0, 3×224×224
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
    assert [t["config"]["num_workers"] for t in trials] == [0, 1]
    assert all(t["status"] == "ok" and t["samples_per_s"] > 0 for t in trials)


def _sweep(pick: int, equivalent: list[int]) -> object:
    from loadertop.core.model.results import Recommendation

    def config(n: int) -> TrialConfig:
        return TrialConfig(num_workers=n, batch_size=32)

    rec = Recommendation(config(pick), 100.0, "", "", 0, equivalent=tuple(config(n) for n in equivalent))
    return type("Result", (), {"recommendation": rec})()


@pytest.mark.unit
def test_mutual_equivalence_needs_every_pick_in_every_set() -> None:
    from repro_score import mutual

    assert mutual([_sweep(2, [2, 3]), _sweep(3, [2, 3]), _sweep(2, [2])]) == {"mutual": False, "misses": [[1, 2]]}
    assert mutual([_sweep(2, [2, 4]), _sweep(4, [2, 4]), _sweep(2, [2, 4])])["mutual"]
    assert mutual([_sweep(8, []), _sweep(8, [])])["mutual"]  # the same pick, no set recorded: itself counts
    assert not mutual([_sweep(16, [16]), _sweep(2, [2])])["mutual"]  # issue 18's 16 then 2
    assert not mutual([])["mutual"]


@pytest.mark.unit
def test_accuracy_from_the_reference_or_a_top_up() -> None:
    from repro_score import reference_accuracy, topup_accuracy

    def row(n: int, mean: float | None) -> dict:
        return {"config": TrialConfig(num_workers=n, batch_size=32).to_dict(), "mean": mean}

    ref = {"candidates": [row(2, 760.0), row(4, 800.0), row(8, None)], "best": 800.0}
    assert reference_accuracy(ref, TrialConfig(num_workers=2, batch_size=32)) == pytest.approx(0.95)
    assert reference_accuracy(ref, TrialConfig(num_workers=8, batch_size=32)) is None  # measured, none finished
    assert reference_accuracy(ref, TrialConfig(num_workers=16, batch_size=32)) is None  # not a candidate
    assert topup_accuracy({"pick_mean": 485.0, "best_mean": 500.0}) == pytest.approx(0.97)
    assert topup_accuracy({"pick_mean": 520.0, "best_mean": 500.0}) == 1.0  # read faster than the best: 1.00
    assert topup_accuracy({"pick_mean": None, "best_mean": 500.0}) is None
