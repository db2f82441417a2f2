"""The faults of a many-node sweep, measured on localhost: one row per fault, as the issue's closing note shows them.

    python benchmarks/nodes_faults.py            # about a minute on 2 cores; a markdown table on stdout

Two agents per row, each started as its own node would start it (torchrun, or torchrun's / srun's variables set by
hand), each with a marker in its environment so that the processes left afterwards are counted per node (psutil).
Exit codes are the agents' own: under torchrun, from torchrun's failure summary (torchrun itself exits 1).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil

ARGS = ["--headless", "--workers", "0,1", "--trial-seconds", "2", "--no-transport"]
CLEAN = ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")


class Node:
    def __init__(self, folder: Path, rank: int, port: int, args: list[str], extra: dict[str, str], torchrun: bool):
        self.rank, self.mark, self.torchrun = rank, uuid.uuid4().hex, torchrun
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TORCHELASTIC_")) and k not in CLEAN}
        env.update(LOADERTOP_NODE_MARK=self.mark, PYTHONUNBUFFERED="1", **extra)
        argv = [sys.executable, "-m", "loadertop", *args, "--out", str(folder / f"runs{rank}")]
        if torchrun:
            launch = ["--nnodes", "2", "--nproc-per-node", "1", "--node-rank", str(rank), "--master-addr", "127.0.0.1"]
            argv = [sys.executable, "-m", "torch.distributed.run", *launch, "--master-port", str(port), *argv[1:]]
        self.err_path = folder / f"node{rank}.err"
        self.proc = subprocess.Popen(
            argv,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(self.err_path, "wb"),  # noqa: SIM115 (the child holds it)
            start_new_session=True,
            cwd=folder,  # not a checkout: `-m` puts the cwd first on sys.path, and its loadertop.egg-info with it
        )

    def err(self) -> str:
        return self.err_path.read_text(errors="replace")

    def code(self, timeout: float = 60) -> str:
        """The agent's exit code (torchrun's summary names it when the agent failed)."""
        rc = self.proc.wait(timeout)
        said = re.search(r"exitcode\s*:\s*(-?\d+)", self.err())
        if said:
            return f"{said.group(1)} (torchrun {rc})"
        return f"torchrun {rc}" if self.torchrun else str(rc)

    def left(self) -> int:
        count = 0
        for proc in psutil.process_iter():
            try:
                if proc.environ().get("LOADERTOP_NODE_MARK") == self.mark and proc.status() != psutil.STATUS_ZOMBIE:
                    count += 1
            except (psutil.Error, OSError):
                continue
        return count

    def line(self) -> str:
        lines = [x for x in self.err().splitlines() if x.startswith("loadertop: error:")]
        return lines[0] if lines else ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def trials_done(folder: Path, rank: int) -> int:
    return sum(1 for f in folder.glob(f"runs{rank}/*/trials.jsonl") for _ in open(f))


def wait_first_trial(folder: Path, rank: int) -> None:
    deadline = time.monotonic() + 120
    while trials_done(folder, rank) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)


def pieces(rank: int, port: int) -> dict[str, str]:
    return {"RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}


def row(name: str, nodes: list[Node], since: float, stopped: list[float]) -> str:
    codes = " / ".join(n.code() for n in nodes)
    time.sleep(1.0)  # what dies with its parent has gone by now
    left = " / ".join(str(n.left()) for n in nodes)
    said = next((n.line() for n in nodes if n.line()), "")
    times = " / ".join(f"{t - since:.1f} s" for t in stopped)
    return f"| {name} | {codes} | {times} | {left} | {said} |"


def stop_times(nodes: list[Node]) -> list[float]:
    done: dict[int, float] = {}
    deadline = time.monotonic() + 60
    while len(done) < len(nodes) and time.monotonic() < deadline:
        for n in nodes:
            if n.rank not in done and n.proc.poll() is not None:
                done[n.rank] = time.monotonic()
        time.sleep(0.02)
    return [done.get(n.rank, float("nan")) for n in nodes]


def killed(folder: Path) -> str:
    port = free_port()
    nodes = [Node(folder, r, port, ARGS, {}, torchrun=True) for r in (0, 1)]
    wait_first_trial(folder, 0)
    time.sleep(0.5)
    agent = psutil.Process(nodes[1].proc.pid).children()
    since = time.monotonic()
    os.killpg(nodes[1].proc.pid, signal.SIGKILL)  # node 1 goes whole: torchrun and its agent
    for child in agent:
        child.kill()
    return row("node 1 killed mid-trial (torchrun)", nodes, since, stop_times(nodes))


def never_joins(folder: Path) -> str:
    port = free_port()
    srun = {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0", "SLURM_JOB_NODELIST": "localhost",
            "SLURM_JOB_ID": "1", "MASTER_PORT": str(port)}  # fmt: skip
    since = time.monotonic()
    nodes = [Node(folder, 0, port, [*ARGS, "--join-timeout", "5"], srun, torchrun=False)]
    return row("node 1 never joins (srun, --join-timeout 5)", nodes, since, stop_times(nodes))


def version(folder: Path) -> str:
    port = free_port()
    other = folder / "other" / "loadertop-9.9.9.dist-info"
    other.mkdir(parents=True)
    (other / "METADATA").write_text("Metadata-Version: 2.1\nName: loadertop\nVersion: 9.9.9\n")
    path = os.pathsep.join([str(other.parent), os.environ.get("PYTHONPATH", "")])
    since = time.monotonic()
    nodes = [
        Node(folder, 0, port, ARGS, pieces(0, port), torchrun=False),
        Node(folder, 1, port, ARGS, {**pieces(1, port), "PYTHONPATH": path}, torchrun=False),
    ]
    return row("node 1 runs loadertop 9.9.9", nodes, since, stop_times(nodes))


def settings(folder: Path) -> str:
    port = free_port()
    since = time.monotonic()
    nodes = [
        Node(folder, 0, port, ARGS, pieces(0, port), torchrun=False),
        Node(folder, 1, port, [*ARGS, "--batch-size", "64"], pieces(1, port), torchrun=False),
    ]
    return row("node 1 has other settings", nodes, since, stop_times(nodes))


def ctrl_c(folder: Path) -> str:
    port = free_port()
    nodes = [Node(folder, r, port, ARGS, {}, torchrun=True) for r in (0, 1)]
    wait_first_trial(folder, 0)
    since = time.monotonic()
    os.killpg(nodes[0].proc.pid, signal.SIGINT)  # the terminal's Ctrl-C to node 0's torchrun
    return row("Ctrl-C on node 0 (torchrun)", nodes, since, stop_times(nodes))


def ctrl_c_by_hand(folder: Path) -> str:
    port = free_port()
    nodes = [Node(folder, r, port, ARGS, pieces(r, port), torchrun=False) for r in (0, 1)]
    wait_first_trial(folder, 0)
    since = time.monotonic()
    nodes[0].proc.send_signal(signal.SIGINT)
    return row("Ctrl-C on node 0 (by hand, as under srun)", nodes, since, stop_times(nodes))


def node0_lost(folder: Path) -> str:
    port = free_port()
    nodes = [Node(folder, r, port, ARGS, pieces(r, port), torchrun=False) for r in (0, 1)]
    wait_first_trial(folder, 1)
    since = time.monotonic()
    nodes[0].proc.kill()
    return row("node 0 killed (its store goes with it)", nodes, since, stop_times(nodes))


def main() -> None:
    print("| fault | exit code (node 0 / node 1) | stopped after | processes left (node 0 / node 1) | the line |")
    print("|---|---|---|---|---|")
    for fault in (killed, never_joins, version, settings, ctrl_c, ctrl_c_by_hand, node0_lost):
        with tempfile.TemporaryDirectory(prefix="ltnodes") as folder:
            print(fault(Path(folder)), flush=True)


if __name__ == "__main__":
    main()
