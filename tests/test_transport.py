"""The transport ceiling: a null dataset with the dataset's own batch structure through real DataLoaders, measured
before the first trial, in the result JSON, in the reasons and the search's stop."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from loadertop.core.engine.verdict.transport_bound import (
    transport_at,
    transport_phrase,
    transport_reason,
    transport_stop,
)
from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.protocol import TransportMeasured, decode, encode
from loadertop.core.model.results import Ceiling, SweepResult, TrialResult
from loadertop.core.trial.transport import NullDataset, tensors_of, unbatch

DATA = Path(__file__).parent / "data"


def _roundtrip(samples: list[Any], batch_size: int = 4) -> tuple[Any, Any]:
    """A real batch of `samples`, and the batch a null dataset of its first sample makes with 2 workers."""
    batch = next(iter(DataLoader(samples, batch_size=batch_size)))
    null = NullDataset(unbatch(batch, batch_size), 100)
    again = next(iter(DataLoader(null, batch_size=batch_size, num_workers=2, multiprocessing_context="fork")))
    return batch, again


def _structure(batch: Any) -> list[tuple[tuple[int, ...], torch.dtype]]:
    return [(tuple(t.shape), t.dtype) for t in tensors_of(batch)]


@pytest.mark.parametrize(
    "sample",
    [
        {"image": torch.rand(3, 8, 8), "label": 3, "mask": torch.zeros(8, 8, dtype=torch.uint8)},
        (torch.rand(5), torch.tensor(2, dtype=torch.int64)),
        tuple(torch.rand(2, i + 1) for i in range(20)),
    ],
    ids=["dict", "tuple", "many-small"],
)
def test_the_null_dataset_reproduces_the_batch_structure(sample: Any) -> None:
    batch, again = _roundtrip([sample] * 8)
    assert _structure(again) == _structure(batch) and len(_structure(batch)) >= 2
    assert type(again) is type(batch)


@pytest.mark.unit
def test_a_batch_that_is_not_rows_of_samples_is_refused() -> None:
    with pytest.raises(ValueError, match="not 4 rows"):
        unbatch((torch.zeros(4, 3), torch.zeros(5)), 4)


@pytest.mark.unit
def test_the_message_round_trips() -> None:
    m = TransportMeasured(32, 2, False, 150.0, 4800.0, 18.4, 2, True, "null dataset", 0.03)
    assert decode(encode(m)) == m


@pytest.mark.unit
def test_old_result_json_without_kind_loads_as_consumer_ceilings() -> None:
    data = json.loads((DATA / "recorded_result.json").read_text())
    for c in data.get("ceilings") or []:
        c.pop("kind", None)
    data["ceilings"] = data.get("ceilings") or [{"batch_size": 32, "samples_per_s": 500.0, "note": "old"}]
    result = SweepResult.from_dict(data)
    assert result.ceilings and all(c.kind == "consumer" and c.num_workers is None for c in result.ceilings)


def _trial(n: int, sps: float, bs: int = 32) -> TrialResult:
    return TrialResult(n, TrialConfig(n, bs), "ok", samples_per_s=sps, batches_per_s=sps / bs, spread=0.01)


def _transport(n: int, bps: float, mb: float = 18.4, tensors: int = 2, images: bool = True) -> Ceiling:
    return Ceiling(32, bps * 32, "null", None, "transport", n, False, bps, bps * mb / 1024, mb, tensors, images)


CEILINGS = (_transport(0, 900.0), _transport(1, 95.0), _transport(2, 150.0), _transport(4, 155.0))


@pytest.mark.unit
def test_a_trial_at_the_transport_ceiling_is_transport_bound_and_named_with_its_fixes() -> None:
    zero, two = _trial(0, 800 * 32), _trial(2, 140 * 32)
    phrase = transport_phrase(two, CEILINGS, [zero, two])
    assert phrase.startswith("transport-bound: 93% of the 2.7 GiB/s this machine hands over from workers")
    assert "the main process alone makes these batches faster: 0 workers" in phrase
    reason = transport_reason(zero, [zero, two], CEILINGS, 0.05)
    assert "uint8 samples normalised on the GPU" in reason and "a larger batch" in reason
    assert "fewer, larger tensors" not in reason
    # Far below the ceiling: not transport-bound, nothing said.
    assert transport_phrase(_trial(2, 60 * 32), CEILINGS, [zero]) == ""


@pytest.mark.unit
def test_the_climb_stops_where_no_rung_above_hands_over_more() -> None:
    stop = transport_stop(CEILINGS, _trial(0, 800 * 32), 0.05, "0 workers")
    assert stop is not None and "transport ceiling" in stop
    assert transport_stop(CEILINGS, _trial(1, 90 * 32), 0.05, "1 worker") is None  # 2 and 4 hand over more
    assert transport_stop(CEILINGS, _trial(2, 149 * 32), 0.05, "2 workers") is not None  # 4: 155, within noise


def test_a_float32_image_datasets_transport_ceilings_are_measured_and_found(runs: Path, no_leftovers: None) -> None:
    from loadertop.core.engine.drive.driver import Sweep

    s = Settings(
        dataset=f"{DATA}/transport_shapes.py:f32_224",
        workers=(0, 2),
        batch_sizes=(32,),
        trial_seconds=4.0,  # the transport ceiling gets its full 0.5 s per worker count (2 s trials halve it)
        block_seconds=0.15,
        interval=0.2,
        start_methods=("fork",),
        search="grid",
        transport=True,
    )
    sweep = Sweep(s, out_dir=runs)
    list(sweep.events())
    result = sweep.result
    assert result is not None
    saved = json.loads((Path(result.run_dir or "") / "result.json").read_text())
    kinds = {c["kind"] for c in saved["ceilings"]}
    assert kinds == {"consumer", "transport"}
    transport = [c for c in saved["ceilings"] if c["kind"] == "transport"]
    assert sorted(c["num_workers"] for c in transport) == [0, 1, 2]
    assert all(c["gib_per_s"] > 0 and c["batches_per_s"] > 0 and c["tensors"] == 2 for c in transport)
    assert all(c["float_images"] and abs(c["batch_mb"] - 32 * 3 * 224 * 224 * 4 / 2**20) < 0.01 for c in transport)
    # The ceilings reach the verdict: each trial with workers finds its own. Which label the trials then get (here
    # transport-bound, or CPU-bound when the 2 CPUs read busier) is a verdict on measured speeds: the unit tests
    # above check it on fixed figures, where it cannot depend on how busy the machine is.
    saved_ceilings = SweepResult.from_dict(saved).ceilings
    two = next(t for t in result.trials if t.config.num_workers == 2)
    found = transport_at(saved_ceilings, two.config)
    assert found is not None and found.num_workers == 2 and found.float_images
    assert result.recommendation is not None and result.recommendation.reason


def test_transport_is_measured_only_when_asked(runs: Path, no_leftovers: None) -> None:
    from loadertop.core.engine.drive.driver import Sweep

    s = Settings(dataset="synthetic", workers=(0,), trial_seconds=1.0, block_seconds=0.1, search="grid")
    sweep = Sweep(s, out_dir=runs)
    list(sweep.events())
    assert sweep.result is not None
    assert [c.kind for c in sweep.result.ceilings] == ["consumer"]
