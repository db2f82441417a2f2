"""One node against two on a shared store: how much a node's throughput measured alone overstates what it gets when
another node reads the same store, and whether the recommended worker count moves.

    python benchmarks/nodes_bench.py [--mb-per-s 24] [--workers 0,1,2,4] [--trial-seconds 3] [--only-single]

Starts tests/shard_server.py (one bandwidth cap for every connection) over generated files, then runs
(a) `loadertop --headless --json` on one node and (b) two agents on this machine, node ranks 0 and 1, as
`torchrun --nnodes 2 --nproc-per-node 1 --node-rank K --master-addr 127.0.0.1 --master-port P -m loadertop ...`,
every one reading from the server through examples/http_dataset.py. Prints a Markdown table (per-node samples/s
per worker count, the recommended workers alone vs two nodes and the throughput change, the slowest rank).
Results go in benchmarks/NODES.md by hand. `--only-single` runs (a) only (before many nodes were merged).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from shard_server import capped_server, make_shards  # noqa: E402 (tests/ is not a package)

DATASET = f"{ROOT / 'examples' / 'http_dataset.py'}:build"
TIMEOUT_S = 900


def sweep_args(url: str, args: argparse.Namespace, json_path: Path) -> list[str]:
    return [
        "--headless", "--json", str(json_path), "--search", "grid", "--workers", args.workers,
        "--trial-seconds", str(args.trial_seconds), "--dataset", DATASET, "--dataset-arg", f"url={url}",
        "--dataset-arg", f"samples={args.samples}", "--step-ms", "0", "--no-transport", "--mem-floor", "0",
        "--batch-size", "8", "--join-timeout", "60", "--out", str(json_path.parent / "runs"),
    ]  # fmt: skip


def run_single(url: str, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    path = folder / "single.json"
    cmd = [sys.executable, "-m", "loadertop", *sweep_args(url, args, path)]
    subprocess.run(cmd, check=True, timeout=TIMEOUT_S, stdout=subprocess.DEVNULL, env=_env())
    return json.loads(path.read_text())


def run_two_nodes(url: str, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    port = _free_port()
    procs = []
    for rank in (0, 1):
        path = folder / f"node{rank}.json"
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1"]
        torchrun += ["--node-rank", str(rank), "--master-addr", "127.0.0.1", "--master-port", str(port)]
        cmd = [*torchrun, "-m", "loadertop", *sweep_args(url, args, path)]
        log = (folder / f"node{rank}.log").open("w")
        procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=_env(), start_new_session=True))
    deadline = time.monotonic() + TIMEOUT_S
    try:
        codes = [p.wait(timeout=max(1.0, deadline - time.monotonic())) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
    if codes[0] != 0:
        tail = (folder / "node0.log").read_text()[-2000:]
        raise SystemExit(f"nodes_bench: node 0 exited {codes[0]}:\n{tail}")
    return json.loads((folder / "node0.json").read_text())


def by_workers(result: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """The last finished trial per worker count (grid: one each)."""
    return {t["config"]["num_workers"]: t for t in result["trials"] if t["status"] == "ok"}


def table(single: dict[str, Any], many: dict[str, Any] | None) -> str:
    one = by_workers(single)
    two = by_workers(many) if many else {}
    hosts = [f"node {n['node_rank']} ({n['hostname']})" for n in (many or {}).get("nodes", [])]
    head = ["workers", "one node alone", *[f"{h}, 2 nodes" for h in hosts], "job (2 nodes, DDP)", "slowest rank"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for w in sorted(set(one) | set(two)):
        t = two.get(w, {})
        cells = [str(w), _n(one.get(w, {}).get("samples_per_s"))]
        cells += [_n(v) for v in t.get("node_samples_per_s", [None] * len(hosts))]
        cells += [_n(t.get("samples_per_s")), t.get("slowest_rank") or "–"]
        lines.append("| " + " | ".join(cells) + " |")
    out = "\n".join(lines) + "\n\n" + _verdict(single, many)
    return out


def _verdict(single: dict[str, Any], many: dict[str, Any] | None) -> str:
    rec1 = single.get("recommendation") or {}
    parts = [f"- one node alone recommends {_w(rec1)} workers at {_n(rec1.get('samples_per_s'))} samples/s"]
    if many:
        rec2 = many.get("recommendation") or {}
        per_node = by_workers(many).get((rec2.get("config") or {}).get("num_workers", -1), {})
        parts.append(
            f"- two nodes recommend {_w(rec2)} workers at {_n(rec2.get('samples_per_s'))} samples/s for the job "
            f"(per node {' / '.join(_n(v) for v in per_node.get('node_samples_per_s', []))}); slowest rank "
            f"{per_node.get('slowest_rank') or '–'}"
        )
        w1 = (rec1.get("config") or {}).get("num_workers", -1)
        alone = by_workers(single).get(w1, {}).get("samples_per_s")
        shared = (by_workers(many).get(w1, {}).get("node_samples_per_s") or [None])[0]
        if alone and shared:  # the same worker count: what a second node reading the store takes from node 0
            more = f"{alone / shared - 1:.0%}"
            parts.append(f"- at {w1} workers node 0 alone loads {more} more than it gets beside node 1")
    return "\n".join(parts) + "\n"


def _w(rec: dict[str, Any]) -> str:
    return str((rec.get("config") or {}).get("num_workers", "–"))


def _n(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb-per-s", type=float, default=24.0, help="the store's cap, shared by every reader")
    parser.add_argument("--files", type=int, default=64)
    parser.add_argument("--file-kb", type=int, default=256)
    parser.add_argument("--samples", type=int, default=100000)
    parser.add_argument("--workers", default="0,1,2,4")
    parser.add_argument("--trial-seconds", type=float, default=3.0)
    parser.add_argument("--only-single", action="store_true", help="run the one-node sweep only")
    parser.add_argument("--keep", type=Path, help="keep the JSON results and each node's output in this folder")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ltnodes") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        make_shards(folder / "store", args.files, args.file_kb * 1024)
        with capped_server(folder / "store", args.mb_per_s * 1e6) as url:
            print(f"store: {args.files} × {args.file_kb} KiB at {url}, {args.mb_per_s:g} MB/s shared", file=sys.stderr)
            single = run_single(url, args, folder)
            many = None if args.only_single else run_two_nodes(url, args, folder)
    print(table(single, many))


if __name__ == "__main__":
    main()
