"""Every CUDA path of loadertop, through its real code, in one run of at most 8 minutes (issue 21, part 5).

    python benchmarks/gpu_check.py          # on a machine with a GPU: every check must pass
    python benchmarks/gpu_check.py --fake   # no GPU: NVML through a fake pynvml; CUDA checks say "skipped: no CUDA"

Checks: the NVML probes (devices, a utilization sample), attach's choice of the job's GPUs (a child process holding a
CUDA context, found by its pid among each GPU's compute processes), a sweep with --step-ms and the CUDA consumer
(the batch copied to the device, a fixed-length kernel, GPU % measured), pin_memory on and off both measured in that
sweep, and loadertop.tune's pin_memory phase (both ways with CUDA; off only without). Prints one table (check,
result, figure) and exits 1 when any check fails (a skip is not a failure; without --fake, no CUDA is one).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from types import ModuleType, SimpleNamespace
from typing import Any

import loadertop
from loadertop.core.engine import build_settings
from loadertop.core.engine.live.snapshot import job_gpus
from loadertop.core.job.tune_plan import read_machine, tune_settings
from loadertop.core.machine.gpu import MB, GpuProbe
from loadertop.core.model.config import TrialConfig
from loadertop.core.model.results import SweepResult

LIMIT_S = 8 * 60
Row = tuple[str, str, str]  # check, result ("ok", "FAIL: why", "skipped: why"), figure


def fake_nvml(running: dict[int, list[int]]) -> ModuleType:
    """A pynvml stand-in with two GPUs; `running` lists each GPU's compute processes (pids) and may change."""
    mod = ModuleType("fake_pynvml")
    names, util = ["Fake GPU 0", "Fake GPU 1"], [12, 87]

    class NVMLError(Exception):
        pass

    funcs: dict[str, Callable[..., Any]] = {
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetCount": lambda: len(names),
        "nvmlDeviceGetHandleByIndex": lambda i: i,
        "nvmlDeviceGetName": lambda h: names[h],
        "nvmlDeviceGetMemoryInfo": lambda h: SimpleNamespace(total=80 * 1024 * MB, used=(h + 1) * 512 * MB, free=0),
        "nvmlDeviceGetUtilizationRates": lambda h: SimpleNamespace(gpu=util[h], memory=0),
        "nvmlDeviceGetComputeRunningProcesses": lambda h: [SimpleNamespace(pid=p) for p in running.get(h, [])],
    }
    for name, fn in funcs.items():
        setattr(mod, name, fn)
    mod.NVMLError = NVMLError  # type: ignore[attr-defined]
    return mod


def cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def check_nvml(fake: bool) -> Row:
    probe = GpuProbe(fake_nvml({}) if fake else None)
    try:
        devices, samples = probe.devices(), probe.sample()
        if not probe.available or not devices or len(samples) != len(devices):
            return "NVML probes", f"FAIL: {probe.unavailable or 'no devices or no samples'}", ""
        figure = "; ".join(f"{d.index} {d.name} {s.util_percent:.0f}%" for d, s in zip(devices, samples, strict=True))
        return "NVML probes" + (" (fake pynvml)" if fake else ""), "ok", figure
    finally:
        probe.close()


HOLD = "import torch, time; torch.zeros(1, device='cuda'); print('ready', flush=True); time.sleep(60)"


def check_attach_gpus(fake: bool, cuda: bool) -> Row:
    """attach's selection (engine/live/snapshot.job_gpus): the GPUs listing the job's pid, and no other."""
    name = "attach: the job's GPUs" + (" (fake pynvml)" if fake else "")
    if fake:  # a job on GPU 1 only; then on none
        running: dict[int, list[int]] = {0: [os.getpid() + 1], 1: [os.getpid()]}
        probe = GpuProbe(fake_nvml(running))
        found, why = job_gpus(probe, {os.getpid()})
        running[1] = []
        gone, why_gone = job_gpus(probe, {os.getpid()})
        probe.close()
        ok = found == {1} and why is None and not gone and why_gone is not None
        return name, "ok" if ok else f"FAIL: found {found}, then {gone} ({why_gone})", f"pid on GPU 1 → {sorted(found)}"
    if not cuda:
        return name, "FAIL: no CUDA (run with --fake on a machine without a GPU)", ""
    job = subprocess.Popen([sys.executable, "-c", HOLD], stdout=subprocess.PIPE, text=True)
    probe = GpuProbe()
    try:
        assert job.stdout is not None
        job.stdout.readline()  # its CUDA context exists
        found, why = job_gpus(probe, {job.pid})
        ok = bool(found) and why is None
        return name, "ok" if ok else f"FAIL: {why}", f"pid {job.pid} on GPU {sorted(found)}"
    finally:
        probe.close()
        job.kill()
        job.wait()


SWEPT = "synthetic:kb=512,cpu_ms=0.2"  # 512 KB samples: pinning has something to do


def sweep_rows(cuda: bool) -> list[Row]:
    """One sweep through loadertop's real driver: --step-ms with the CUDA consumer, pin_memory on and off."""
    options: dict[str, Any] = {
        "workers": [2], "pin_memory": "on,off", "step_ms": 5.0, "search": "grid", "trial_seconds": 4.0,
    }  # fmt: skip
    if not cuda:  # the same options through the same checks, so the GPU run does not fail on a typo here
        planned = len(build_settings({**options, "dataset": SWEPT}).trial_configs())
        figure = f"{planned} trials planned, not run"
        return [("sweep --step-ms, CUDA consumer", "skipped: no CUDA", figure),
                ("pin_memory on/off measured", "skipped: no CUDA", figure)]  # fmt: skip
    with tempfile.TemporaryDirectory() as out:
        result = loadertop.sweep(SWEPT, out_dir=out, **options)
    return [_step_row(result), _pin_row(result)]


def _step_row(result: SweepResult) -> Row:
    name = "sweep --step-ms, CUDA consumer"
    ok = [t for t in result.trials if t.status == "ok"]
    if len(ok) != len(result.trials) or not ok:
        return name, f"FAIL: {[t.error for t in result.trials if t.status != 'ok']}", ""
    util = [t.gpu_util for t in ok]
    if any(u is None for u in util):
        return name, "FAIL: GPU % not measured during the trials", ""
    ceiling = next((c.samples_per_s for c in result.ceilings if c.samples_per_s), None)
    return name, "ok", f"GPU {', '.join(f'{u:.0f}%' for u in util if u is not None)}; ceiling {ceiling or 0:.0f}/s"


def _pin_row(result: SweepResult) -> Row:
    name = "pin_memory on/off measured"
    rates = {t.config.pin_memory: t.samples_per_s for t in result.trials if t.status == "ok"}
    if set(rates) != {True, False} or None in rates.values():
        return name, f"FAIL: measured {sorted(rates)}", ""
    return name, "ok", f"on {rates[True]:.0f}/s, off {rates[False]:.0f}/s"


def check_tune_pin(cuda: bool) -> Row:
    """tune's pin_memory phase: both ways where CUDA makes it matter, the choice among them; off only without."""
    name = "tune: pin_memory choice"
    user = TrialConfig(num_workers=0, batch_size=32)
    pins = tune_settings(user, read_machine(), 4, 0.05, cuda).pin_memory
    if not cuda:
        ok = pins == (False,)
        return name, ("skipped: no CUDA" if ok else f"FAIL: pins {pins} without CUDA"), f"planned pins {pins}"
    if set(pins) != {True, False}:
        return name, f"FAIL: planned pins {pins} with CUDA", ""
    tuned = _tune_with_cuda()
    tried = {s.config.pin_memory for s in tuned.trace}
    ok = tuned.choice is not None and tried == {True, False}
    figure = f"tried pin {sorted(tried)}, chose {tuned.choice.label() if tuned.choice else None}"
    return name, "ok" if ok else "FAIL: pin_memory not tried both ways or no choice", figure


def _tune_with_cuda(device: str = "cuda", budget_s: float = 40.0) -> Any:
    import torch
    from torch.utils.data import DataLoader

    from loadertop.core.datasets.synthetic import SyntheticDataset

    loader = DataLoader(SyntheticDataset(length=4096, kb=256, cpu_ms=0.2), batch_size=32)
    tuned = loadertop.tune(loader, budget_s=budget_s, max_workers=4)
    for _ in range(200):
        if tuned.choice is not None:
            break
        for batch in tuned:
            data = batch[0] if isinstance(batch, list | tuple) else batch
            data.to(device, non_blocking=True)
            if device == "cuda":
                torch.cuda.synchronize()
    return tuned


def table(rows: list[Row]) -> str:
    widths = [max(len(r[i]) for r in [("check", "result", "figure"), *rows]) for i in range(3)]
    lines = [("check", "result", "figure"), *rows]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fake", action="store_true", help="no GPU: NVML through a fake pynvml, CUDA checks skipped")
    args = ap.parse_args()
    started = time.monotonic()
    cuda = cuda_available()
    if args.fake and cuda:
        print("gpu_check: --fake with CUDA present: the CUDA checks still run", file=sys.stderr)
    rows = [check_nvml(args.fake), check_attach_gpus(args.fake, cuda), *sweep_rows(cuda), check_tune_pin(cuda)]
    if not args.fake:  # a machine said to have a GPU: a check CUDA could not run is a failure, not a skip
        rows = [(c, "FAIL: no CUDA" if r == "skipped: no CUDA" else r, f) for c, r, f in rows]
    wall = time.monotonic() - started
    rows.append(("wall time ≤ 8 min", "ok" if wall <= LIMIT_S else "FAIL: over 8 minutes", f"{wall:.0f} s"))
    print(table(rows))
    failed = [r for r in rows if r[1].startswith("FAIL")]
    print(f"gpu_check: {len(failed)} failed, {sum(r[1].startswith('skipped') for r in rows)} skipped, "
          f"{sum(r[1] == 'ok' for r in rows)} ok (CUDA {'available' if cuda else 'not available'})")  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
