"""`--openmetrics HOST:PORT`: the live job's figures on /metrics in the OpenMetrics text format, parsed back with
prometheus-client's own parser. In-process for the exporter; end to end (a real watched job, a real
`loadertop attach --openmetrics` process, scraped over HTTP) for the rest."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from loadertop.core.model.config import UsageError
from loadertop.faces.cli import main
from loadertop.faces.openmetrics import MIB, MetricsServer, job_label, parse_address
from loadertop.faces.tui.attach.demo import demo_snapshot

ROOT = Path(__file__).resolve().parents[1]
CLI = "import sys; from loadertop.faces.cli import main; sys.exit(main())"
REQUIRED = {
    "loadertop_samples_per_second",
    "loadertop_stall_fraction",
    "loadertop_data_wait_seconds",
    "loadertop_worker_uss_bytes",
    "loadertop_worker_uss_slope_bytes_per_second",
    "loadertop_leak_warning",
}


def scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.headers["Content-Type"].startswith("application/openmetrics-text")
        text = response.read().decode()
    assert text.rstrip().endswith("# EOF")
    return {
        family.name: [(dict(s.labels), s.value) for s in family.samples]
        for family in text_string_to_metric_families(text)
    }


@pytest.mark.unit
def test_the_exporter_serves_the_snapshot_in_openmetrics() -> None:
    server = MetricsServer("127.0.0.1:0")
    try:
        server.set_job(pid=42, command="python train.py --lr 0.1", hostname="node7", rank="3")
        snap = demo_snapshot(5)
        server.update(snap)
        families = scrape(server.url)
    finally:
        server.close()
    assert set(families) >= REQUIRED
    labels = {"job": "train.py", "pid": "42", "hostname": "node7", "rank": "3"}
    ((got, value),) = families["loadertop_samples_per_second"]
    assert got == labels and value == pytest.approx(snap.samples_per_s)
    uss = families["loadertop_worker_uss_bytes"]
    assert [v for _, v in uss] == pytest.approx([w.uss_mb * MIB for w in snap.workers if w.uss_mb is not None])
    assert [g["worker"] for g, _ in uss] == [str(i) for i in range(len(snap.workers))]
    quantiles = {g["quantile"]: v for g, v in families["loadertop_data_wait_seconds"]}
    assert quantiles["0.95"] == pytest.approx(snap.wait_ms_p95 / 1000)
    assert families["loadertop_leak_warning"] == [(labels, float(snap.leak is not None))]


@pytest.mark.unit
def test_addresses_labels_and_a_missing_client() -> None:
    assert parse_address("9464") == ("127.0.0.1", 9464)
    assert parse_address(":9464") == ("127.0.0.1", 9464)
    assert parse_address("0.0.0.0:80") == ("0.0.0.0", 80)
    assert parse_address("[::1]:9000") == ("::1", 9000)
    with pytest.raises(UsageError, match="HOST:PORT"):
        parse_address("localhost:http")
    assert job_label("/usr/bin/python3 -u train.py --x") == "train.py"
    assert job_label("python -m pkg.train") == "pkg.train"
    assert job_label("torchrun --nproc-per-node 2 t.py") == "torchrun"


@pytest.mark.unit
def test_without_prometheus_client_the_flag_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in [m for m in sys.modules if m.startswith("prometheus_client")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import fails, as when it is not installed
    monkeypatch.setitem(sys.modules, "prometheus_client.openmetrics.exposition", None)
    assert main(["attach", str(os.getpid()), "--headless", "--openmetrics", "127.0.0.1:0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "prometheus-client" in err[0] and "loadertop[metrics]" in err[0]
    # run checks it before it starts the job (nothing is started here: the unit tier would refuse it)
    assert main(["run", "--headless", "--openmetrics", "9464", "--", sys.executable, "-c", "pass"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("loadertop run: error:") and "prometheus-client" in err[0]


JOB = r"""
import time, torch
from torch.utils.data import DataLoader, Dataset
import loadertop

class Slow(Dataset):
    def __len__(self): return 400
    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.tensor([float(i)])

loader = DataLoader(Slow(), batch_size=8, num_workers=2, persistent_workers=True)
end = time.monotonic() + 20
while time.monotonic() < end:
    for batch in loadertop.watch(loader):
        time.sleep(0.004)
"""


def test_a_live_attach_serves_metrics_that_parse(jobs_root: Path) -> None:
    env = {**os.environ, "LOADERTOP_JOBS_DIR": str(jobs_root), "PYTHONPATH": str(ROOT)}
    job = subprocess.Popen([sys.executable, "-c", JOB], env={**env, "RANK": "1"})
    attach = None
    try:
        deadline = time.monotonic() + 30
        while not (jobs_root / str(job.pid) / "sock").exists():
            assert job.poll() is None and time.monotonic() < deadline, "the job never became watchable"
            time.sleep(0.1)
        command = [sys.executable, "-c", CLI, "attach", str(job.pid), "--headless", "--interval", "0.5",
                   "--openmetrics", "127.0.0.1:0"]  # fmt: skip
        attach = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert attach.stderr is not None
        line = attach.stderr.readline()
        assert "OpenMetrics on http://127.0.0.1:" in line, line
        url = line.split(" on ")[1].strip()
        families: dict[str, list[tuple[dict[str, str], float]]] = {}
        while time.monotonic() < deadline:
            families = scrape(url)
            workers = families.get("loadertop_worker_uss_bytes", [])
            if families.get("loadertop_samples_per_second") and len(workers) == 2:
                break
            time.sleep(0.25)
    finally:
        if attach is not None:
            attach.kill()
            attach.wait()
        job.kill()
        job.wait()
    assert set(families) >= REQUIRED, sorted(families)
    ((labels, rate),) = families["loadertop_samples_per_second"]
    assert labels["pid"] == str(job.pid) and labels["rank"] == "1" and labels["hostname"] and labels["job"]
    # 2 workers that sleep 2 ms a sample, batches of 8 and a 4 ms step: far from zero, far below 8/0.004 = 2000/s
    assert 50 < rate < 2000
    ((_, stall),) = families["loadertop_stall_fraction"]
    assert 0.0 <= stall <= 1.0
    waits = {g["quantile"]: v for g, v in families["loadertop_data_wait_seconds"]}
    assert set(waits) == {"0.5", "0.95", "0.99", "1.0"}
    assert 0 <= waits["0.5"] <= waits["0.95"] <= waits["0.99"] <= waits["1.0"] < 5
    uss = families["loadertop_worker_uss_bytes"]
    assert sorted(g["worker"] for g, _ in uss) == ["0", "1"] and all(1 * MIB < v < 4096 * MIB for _, v in uss)
    assert families["loadertop_leak_warning"] == [(labels, 0.0)]
