"""Two real agents (torchrun, node ranks 0 and 1, on localhost) reading one capped store: what node 0 reports.

The store's cap is shared by both nodes' readers, so the nodes' own rates together stay under it; node 0's result
JSON carries the contract (`nodes`, per trial `node_samples_per_s` and `slowest_rank`, the job's rate = ranks × the
slowest rank's), and its headless output the per-node table and the pacing line. Needs the agents
(loadertop/core/nodes/); the coordination and its faults are tests/test_nodes.py's."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from shard_server import capped_server, make_shards

pytest.importorskip("loadertop.core.nodes", reason="the many-node agents are not in this tree")

ROOT = Path(__file__).resolve().parent.parent
FILE = 64 * 1024
RATE = 4e6  # bytes/s for every reader together: 61 files/s
CAP = RATE / FILE


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def agent(rank: int, port: int, url: str, folder: Path, jobs: str) -> subprocess.Popen[str]:
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1"]
    torchrun += ["--node-rank", str(rank), "--master-addr", "127.0.0.1", "--master-port", str(port)]
    args = ["--headless", "--json", str(folder / f"node{rank}.json"), "--search", "grid", "--workers", "0,2"]
    args += ["--trial-seconds", "1.5", "--dataset", f"{ROOT / 'examples' / 'http_dataset.py'}:build"]
    args += ["--dataset-arg", f"url={url}", "--dataset-arg", "samples=100000", "--batch-size", "4"]
    args += ["--step-ms", "0", "--no-transport", "--mem-floor", "0", "--out", str(folder / "runs")]
    args += ["--join-timeout", "60"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LOADERTOP_JOBS_DIR": jobs}
    return subprocess.Popen(
        [*torchrun, "-m", "loadertop", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )


# ~12 s, out of the default run: the cap is tested in test_shard_server.py, two agents in test_nodes.py
def test_two_nodes_on_one_capped_store(tmp_path: Path) -> None:
    make_shards(tmp_path / "store", 16, FILE)
    # a short jobs folder: Unix socket paths are limited to 107 bytes
    with capped_server(tmp_path / "store", RATE) as url, tempfile.TemporaryDirectory(prefix="lt", dir="/tmp") as jobs:
        port = free_port()
        procs = [agent(rank, port, url, tmp_path, jobs) for rank in (0, 1)]
        try:
            outs = [p.communicate(timeout=150) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
    codes = [p.returncode for p in procs]
    assert codes == [0, 0], f"exit codes {codes}; node 0 stderr: {outs[0][1][-2000:]}"
    result = json.loads((tmp_path / "node0.json").read_text())
    assert [n["node_rank"] for n in result["nodes"]] == [0, 1]
    ok = [t for t in result["trials"] if t["status"] == "ok"]
    assert {t["config"]["num_workers"] for t in ok} == {0, 2}
    for t in ok:
        rates = t["node_samples_per_s"]
        assert len(rates) == 2 and all(r > 0 for r in rates)
        assert t["samples_per_s"] == pytest.approx(2 * min(t["rank_samples_per_s"]))
        assert re.fullmatch(r"node [01] \(.+\) rank 0", t["slowest_rank"])
        # one store for both: the nodes' rates together stay under its cap (each alone could take all of it)
        assert sum(rates) <= 1.25 * CAP
    stdout = outs[0][0]
    assert "per node: " in stdout and "◀" in stdout
    flat = " ".join(stdout.split())
    assert re.search(r"node [01] \(.+?\) paces the job|the nodes load alike", flat)
    assert "per node" in outs[0][1]  # each trial line on stderr names the nodes' rates
