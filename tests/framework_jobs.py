"""Tiny real training jobs for the framework integrations (tests/test_integrations_*.py): a Lightning
`Trainer.fit` and a Hugging Face `Trainer.train`, each on CPU with a 2-worker DataLoader, run as a subprocess that
`open_session` (what `loadertop attach` runs) watches. Nothing is downloaded: the models are built from configs.

TORCHVISION_SHIM: CI installs the `bench` extra beside the test extras, and torchvision's PyPI wheel (a CUDA build)
cannot be imported beside the CPU torch ("operator torchvision::nms does not exist", pytorch/vision 9085/9337).
torchmetrics (Lightning) and transformers import torchvision when it is installed, so the jobs declare the two
operator schemas first, as benchmarks/workloads/tv_imagefolder.py does; a job with a matching torchvision (or none)
imports it as usual.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from live_fakes import kill_tree

from loadertop.core.engine import open_session
from loadertop.core.model.live import LiveSnapshot

ROOT = Path(__file__).resolve().parents[1]

TORCHVISION_SHIM = """
import sys, torch
try:
    import torchvision
except RuntimeError as exc:
    if "torchvision::nms" not in str(exc):
        raise
    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]
    _SHIM = torch.library.Library("torchvision", "FRAGMENT")
    for op in ("nms", "qnms"):
        _SHIM.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
except ImportError:
    pass
torch.set_num_threads(1)
"""


def run_job(script: str, args: list[str], jobs_root: Path, tmp_path: Path, attach: bool) -> dict[str, Any]:
    """Run `script` (stop file, then `args`); with `attach`, watch it with open_session until throughput and
    workers were shown, then ask it to stop. Returns the snapshots, the job's JSON line, its stderr and seconds."""
    stop = tmp_path / "stop"
    env = {**os.environ, "LOADERTOP_JOBS_DIR": str(jobs_root), "PYTHONPATH": str(ROOT)}
    began = time.monotonic()
    job = subprocess.Popen(
        [sys.executable, "-c", TORCHVISION_SHIM + script, str(stop), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    snaps: list[LiveSnapshot] = []
    try:
        deadline = time.monotonic() + 60
        if attach:
            while not (jobs_root / str(job.pid) / "sock").exists():
                if job.poll() is not None or time.monotonic() > deadline:
                    _, err = job.communicate(timeout=10)
                    raise AssertionError(f"the job never became attachable:\n{err[-3000:]}")
                time.sleep(0.05)
            session = open_session(job.pid, interval=1.0)
            for snap in session.snapshots():
                snaps.append(snap)
                seen = [s for s in snaps if s.samples_per_s and any(w.uss_mb for w in s.workers)]
                # A whole epoch too: the checks count one, and a loaded machine showed two intervals before it ended
                whole = any("epoch 0 ended:" in n for s in snaps for n in s.notes)
                if snap.ended or (len(seen) >= 2 and whole) or time.monotonic() > deadline:
                    stop.touch()
                if snap.ended:
                    break
        else:
            while job.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
        out, err = job.communicate(timeout=60)
        assert job.returncode == 0, err[-3000:]
    finally:
        kill_tree(job)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    return {"snaps": snaps, "result": json.loads(lines[-1]), "stderr": err, "seconds": time.monotonic() - began}


LIGHTNING_JOB = """
import json, sys, time
from dataclasses import asdict
from pathlib import Path
import lightning.pytorch as pl
from torch.utils.data import DataLoader, Dataset
from loadertop.integrations.lightning import LoadertopCallback

stop = Path(sys.argv[1])
budget = float(sys.argv[2]) if len(sys.argv) > 2 else None


class Data(Dataset):
    def __len__(self):
        return 960

    def __getitem__(self, i):
        time.sleep(0.001)
        return torch.full((8,), float(i % 7)), torch.ones(1)


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch, i):
        x, y = batch
        time.sleep(0.008)
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-4)


class StopWhenAsked(pl.Callback):
    def on_train_batch_end(self, trainer, *args):
        if stop.exists() or (callback.tuned is not None and callback.tuned.choice is not None):
            trainer.should_stop = True  # asked by the test, or tuning settled: enough


callback = LoadertopCallback(tune_budget_s=budget)
trainer = pl.Trainer(
    max_epochs=8, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
    enable_progress_bar=False, enable_model_summary=False, callbacks=[callback, StopWhenAsked()],
)
trainer.fit(Model(), DataLoader(Data(), batch_size=16, num_workers=2))
choice = callback.tuned.choice if callback.tuned is not None else None
print(json.dumps({"epochs": trainer.current_epoch, "choice": asdict(choice) if choice else None}))
"""


HF_JOB = """
import json, sys, time
from dataclasses import asdict
from pathlib import Path
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainerCallback, TrainingArguments
from loadertop.integrations.huggingface import LoadertopCallback, LoadertopTrainer

stop = Path(sys.argv[1])
out = sys.argv[2]
budget = float(sys.argv[3]) if len(sys.argv) > 3 else None


class Data(Dataset):
    def __len__(self):
        return 960

    def __getitem__(self, i):
        time.sleep(0.001)
        ids = torch.arange(16) % 50 + i % 7
        return {"input_ids": ids, "attention_mask": torch.ones(16, dtype=torch.long), "labels": torch.tensor(i % 2)}


class StopWhenAsked(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        tuned = getattr(kwargs.get("train_dataloader"), "base_dataloader", None)
        settled = getattr(getattr(tuned, "tuned", None), "choice", None) is not None
        if stop.exists() or settled:
            control.should_training_stop = True  # asked by the test, or tuning settled: enough


torch.manual_seed(0)
config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                    max_position_embeddings=32, num_labels=2)
args = TrainingArguments(
    output_dir=out, per_device_train_batch_size=16, num_train_epochs=8, dataloader_num_workers=2,
    report_to="none", use_cpu=True, save_strategy="no", logging_strategy="no", disable_tqdm=True,
)
model = BertForSequenceClassification(config)
if budget is None:
    watcher = LoadertopCallback()
    trainer = Trainer(model=model, args=args, train_dataset=Data(), callbacks=[watcher, StopWhenAsked()])
else:
    trainer = LoadertopTrainer(model=model, args=args, train_dataset=Data(), callbacks=[StopWhenAsked()],
                               loadertop_tune_budget_s=budget)
    watcher = next(cb for cb in trainer.callback_handler.callbacks if isinstance(cb, LoadertopCallback))
trainer.train()
choice = watcher.tuned.choice if watcher.tuned is not None else None
print(json.dumps({"epochs": trainer.state.epoch, "choice": asdict(choice) if choice else None,
                  "line": watcher.arguments_line}))
"""
