"""`--openmetrics HOST:PORT` (on `loadertop attach PID` and `loadertop run`): the live job's figures on
http://HOST:PORT/metrics in the OpenMetrics text format, for Prometheus and Grafana beside dcgm-exporter's GPU
figures. A face: every figure is the engine's LiveSnapshot of the last interval, only renamed into the metric's base
unit (bytes, seconds); prometheus-client writes the text (the `metrics` extra: `pip install "loadertop[metrics]"`).

Every metric is labelled job (the job's script or command), pid, hostname and rank (RANK, else LOCAL_RANK, in the
job's environment). A figure the interval did not measure is left out rather than written as 0.

Attached to a launcher (torchrun's pid), samples/s, stall, the data-wait quantiles and mean and the workers count
carry one series per rank (its pid and rank), loadertop_rank_slowest is 1 on the rank the engine named slowest by its
mean data wait, loadertop_job_samples_per_second is the ranks' sum (rank "all", the launcher's pid), and the memory
figures are the lowest rank's (the one the view shows).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from loadertop.core.model.config import UsageError
from loadertop.core.model.live import JobRanks, LiveSnapshot

DEFAULT_HOST = "127.0.0.1"
MIB = 1024 * 1024  # loadertop's MB is MiB
LABELS = ("job", "pid", "hostname", "rank")
MISSING = 'the OpenMetrics export needs prometheus-client: pip install "loadertop[metrics]" (or prometheus-client)'


def parse_address(text: str) -> tuple[str, int]:
    """HOST:PORT, [IPv6]:PORT or PORT alone (on 127.0.0.1); UsageError naming what is wrong."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = DEFAULT_HOST, text
    host = host.strip("[]") or DEFAULT_HOST
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UsageError(f"--openmetrics {text}: give HOST:PORT (a port from 0 to 65535), e.g. 127.0.0.1:9464")
    return host, int(port)


def job_label(command: str) -> str:
    """The job's name for a label: its script (python train.py → train.py), else its program."""
    words = command.split()
    if not words:
        return "job"
    if "python" in Path(words[0]).name:
        scripts = [w for w in words[1:] if w.endswith(".py")]
        if len(words) > 2 and words[1] == "-m":
            return words[2]
        if scripts:
            return Path(scripts[0]).name
    return Path(words[0]).name


class MetricsServer:
    """Serves the last snapshot given to update() on /metrics. Bound when built: a busy port or a missing
    prometheus-client is a UsageError before any face starts."""

    def __init__(self, address: str) -> None:
        try:
            from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST, generate_latest
            from prometheus_client.registry import CollectorRegistry
        except ImportError:
            raise UsageError(MISSING) from None
        host, port = parse_address(address)
        self._lock = threading.Lock()
        self._snapshot: LiveSnapshot | None = None
        self._labels: dict[str, str] = {}
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)

        def body() -> bytes:
            data: bytes = generate_latest(registry)  # type: ignore[no-untyped-call]  # prometheus_client leaves generate_latest unannotated
            return data

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if urlsplit(self.path).path not in ("/metrics", "/metrics/"):
                    self.send_error(404, "only /metrics is served here")
                    return
                data = body()
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE_LATEST)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # a scrape every 15 s must not write over the face

        try:
            self._server = ThreadingHTTPServer((host, port), Handler)
        except OSError as exc:
            raise UsageError(f"--openmetrics {address}: cannot listen there ({exc.strerror or exc})") from None
        self._server.daemon_threads = True
        self.host, self.port = host, int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="loadertop-openmetrics", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def set_job(self, *, pid: int, command: str, hostname: str, rank: str) -> None:
        with self._lock:
            self._labels = {"job": job_label(command), "pid": str(pid), "hostname": hostname, "rank": rank}

    def update(self, snapshot: LiveSnapshot) -> None:
        with self._lock:
            self._snapshot = snapshot

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # -- prometheus-client's collector -------------------------------------------------------------------------

    def collect(self) -> Iterator[Any]:
        from prometheus_client.metrics_core import GaugeMetricFamily, Metric

        with self._lock:
            snap, labels = self._snapshot, dict(self._labels)
        names = list(labels)
        job_labels = dict(labels)
        if snap is not None and snap.ranks is not None:  # the memory figures are the shown rank's
            labels = {**labels, "pid": str(snap.pid), "rank": snap.rank}
        values = list(labels.values())

        def gauge(name: str, doc: str, value: float | None, unit: str = "") -> GaugeMetricFamily:
            family = GaugeMetricFamily(name, doc, labels=names, unit=unit)
            if value is not None:
                family.add_metric(values, value)
            return family

        yield gauge("loadertop_job_up", "1 while the job runs, 0 once it ended", None if snap is None
                    else float(snap.ended is None))  # fmt: skip
        if snap is None:
            return
        if snap.ranks is not None:
            yield from _rank_families(snap.ranks, job_labels)
        else:
            yield gauge("loadertop_samples_per_second", "samples the training loop took per second, last interval",
                        snap.samples_per_s)  # fmt: skip
        yield gauge("loadertop_batches_per_second", "batches the training loop took per second, last interval",
                    snap.batches_per_s)  # fmt: skip
        if snap.ranks is None:
            yield gauge("loadertop_stall_fraction", "share of the loop's time spent waiting in next(loader), last "
                        "interval", snap.stall_fraction)  # fmt: skip
        yield gauge("loadertop_step_seconds", "mean training step (batch handed out to the next next()), last interval",
                    _seconds(snap.step_ms), "seconds")  # fmt: skip
        if snap.ranks is None:
            wait = Metric("loadertop_data_wait_seconds", WAIT_DOC, "summary", unit="seconds")
            for quantile, ms in (("0.5", snap.wait_ms_p50), ("0.95", snap.wait_ms_p95), ("0.99", snap.wait_ms_p99),
                                 ("1.0", snap.wait_ms_max)):  # fmt: skip
                if ms is not None:
                    wait.add_sample("loadertop_data_wait_seconds", {**labels, "quantile": quantile}, ms / 1000.0)
            yield wait
        yield from _worker_families(snap, names, values)
        if snap.ranks is None:
            yield gauge("loadertop_data_wait_mean_seconds", "mean wait for a batch in next(loader), last interval",
                        _seconds(snap.wait_ms_mean), "seconds")  # fmt: skip
            yield gauge("loadertop_workers", "DataLoader workers of the job", float(len(snap.workers)))
        yield gauge("loadertop_leak_warning", "1 while the workers' memory grows steadily (the leak warning)",
                    float(snap.leak is not None))  # fmt: skip
        yield gauge("loadertop_total_pss_bytes", "PSS of the job and its workers", _bytes(snap.total_pss_mb), "bytes")
        yield gauge("loadertop_memory_available_bytes", "what the job can still take (MemAvailable or its cgroup's)",
                    snap.mem_available_mb * MIB, "bytes")  # fmt: skip
        yield gauge("loadertop_gpu_utilization_ratio", "NVML utilization of the job's GPUs, mean over the interval",
                    None if snap.gpu_util is None else snap.gpu_util / 100.0, "ratio")  # fmt: skip


WAIT_DOC = "wait for a batch in next(loader), quantiles over the last interval (1: the longest)"


def _worker_families(snap: LiveSnapshot, names: list[str], values: list[str]) -> Iterator[Any]:
    """Each worker's USS and its growth, labelled with the worker's index and pid."""
    from prometheus_client.metrics_core import GaugeMetricFamily

    uss = GaugeMetricFamily("loadertop_worker_uss_bytes", "a DataLoader worker's USS (memory only it holds)",
                            labels=[*names, "worker", "worker_pid"], unit="bytes")  # fmt: skip
    growth = GaugeMetricFamily("loadertop_worker_uss_slope_bytes_per_second", "a worker's USS growth over the "
                               "leak window (least squares)", labels=[*names, "worker", "worker_pid"],
                               unit="bytes_per_second")  # fmt: skip
    for index, worker in enumerate(snap.workers):
        which = [*values, str(index), str(worker.pid)]
        if worker.uss_mb is not None:
            uss.add_metric(which, worker.uss_mb * MIB)
        if worker.uss_slope_mb_per_min is not None:
            growth.add_metric(which, worker.uss_slope_mb_per_min * MIB / 60.0)
    yield uss
    yield growth


def _rank_families(view: JobRanks, labels: dict[str, str]) -> Iterator[Any]:
    """The per-rank series of a launcher's job (see the module docstring)."""
    from prometheus_client.metrics_core import GaugeMetricFamily, Metric

    names = list(labels)
    rate = GaugeMetricFamily("loadertop_samples_per_second", "samples the training loop took per second, last "
                             "interval", labels=names)  # fmt: skip
    stall = GaugeMetricFamily("loadertop_stall_fraction", "share of the loop's time spent waiting in next(loader), "
                              "last interval", labels=names)  # fmt: skip
    workers = GaugeMetricFamily("loadertop_workers", "DataLoader workers of the job", labels=names)
    slowest = GaugeMetricFamily("loadertop_rank_slowest", "1 on the rank that waits longest for its data (mean)",
                                labels=names)  # fmt: skip
    mean = GaugeMetricFamily("loadertop_data_wait_mean_seconds", "mean wait for a batch in next(loader), last "
                             "interval", labels=names, unit="seconds")  # fmt: skip
    wait = Metric("loadertop_data_wait_seconds", WAIT_DOC, "summary", unit="seconds")
    for row in view.ranks:
        if row.ended is not None:
            continue
        own = {**labels, "pid": str(row.pid), "rank": row.rank}
        values = list(own.values())
        if row.samples_per_s is not None:
            rate.add_metric(values, row.samples_per_s)
        if row.stall_fraction is not None:
            stall.add_metric(values, row.stall_fraction)
        workers.add_metric(values, float(row.workers))
        slowest.add_metric(values, float(row.slowest))
        if row.wait_ms_mean is not None:
            mean.add_metric(values, row.wait_ms_mean / 1000.0)
        for quantile, ms in (("0.95", row.wait_ms_p95), ("0.99", row.wait_ms_p99)):
            if ms is not None:
                wait.add_sample("loadertop_data_wait_seconds", {**own, "quantile": quantile}, ms / 1000.0)
    total = GaugeMetricFamily("loadertop_job_samples_per_second", "the job's samples per second: its ranks' summed",
                              labels=names)  # fmt: skip
    if view.samples_per_s is not None:
        total.add_metric(list({**labels, "rank": "all"}.values()), view.samples_per_s)
    yield from (rate, stall, wait, mean, workers, slowest, total)


def _seconds(ms: float | None) -> float | None:
    return None if ms is None else ms / 1000.0


def _bytes(mb: float | None) -> float | None:
    return None if mb is None else mb * MIB
