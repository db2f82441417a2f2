"""Agents of a many-node sweep started on this machine as separate processes, and the check that none survives.

Every process an agent starts (the agent, its runner, trials, workers) inherits a marker in its environment; the
check reads it with psutil. Used by test_nodes.py and test_nodes_tui.py.
"""

from __future__ import annotations

import glob
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil

from loadertop.core.engine.nodes.launch import SLURM_PORT_BASE, SLURM_PORT_SPAN

# Samples that mostly wait (4 ms, 0.2 ms of it CPU): several nodes' real trials at once, on 2 cores, without their
# workers spinning the CPUs the rest of the suite runs on
DATASET = "synthetic:cpu_ms=0.2,io_ms=4"
ARGS = ["--headless", "--workers", "0,1", "--trial-seconds", "1", "--no-transport", "--dataset", DATASET]
LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Nodes:
    """Agents of one many-node sweep on this machine, each in a session of its own (as on its own node)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.mark = uuid.uuid4().hex
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.slurm_job: int | None = None  # srun(): the job id its port is derived from

    def env(self, extra: dict[str, str]) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TORCHELASTIC_"))}
        for name in LAUNCH_VARIABLES:
            env.pop(name, None)
        return {**env, "LOADERTOP_TEST_MARK": self.mark, "PYTHONUNBUFFERED": "1", **extra}

    def torchrun(self, rank: int, args: list[str], nodes: int = 2, extra: dict[str, str] | None = None) -> None:
        """`torchrun --nnodes N --nproc-per-node 1 --node-rank K ... -m loadertop ARGS` (torchrun from the venv)."""
        launch = ["--nnodes", str(nodes), "--nproc-per-node", "1", "--node-rank", str(rank)]
        launch += ["--master-addr", "127.0.0.1", "--master-port", str(self.port), "--monitor-interval", "0.1"]
        argv = [sys.executable, "-m", "torch.distributed.run", *launch, "-m", "loadertop", *args]
        self._start(rank, argv, extra or {})

    def bare(self, rank: int, args: list[str], extra: dict[str, str]) -> None:
        """The agent alone, its launch variables set by hand (torchrun's pieces, or SLURM's)."""
        self._start(rank, [sys.executable, "-m", "loadertop", *args], extra)

    def _start(self, rank: int, argv: list[str], extra: dict[str, str]) -> None:
        out = open(self.folder / f"node{rank}.out", "wb")  # noqa: SIM115 (the child holds it)
        err = open(self.folder / f"node{rank}.err", "wb")  # noqa: SIM115
        self.procs[rank] = subprocess.Popen(
            [*argv, "--out", str(self.folder / f"runs{rank}")],
            env=self.env(extra), stdout=out, stderr=err, start_new_session=True, cwd=self.folder,
        )  # fmt: skip

    def err(self, rank: int) -> str:
        return (self.folder / f"node{rank}.err").read_text(errors="replace")

    def out(self, rank: int) -> str:
        return (self.folder / f"node{rank}.out").read_text(errors="replace")

    def wait(self, rank: int, timeout: float) -> int:
        return self.procs[rank].wait(timeout)

    def trials_done(self, rank: int) -> int:
        files = glob.glob(str(self.folder / f"runs{rank}" / "*" / "trials.jsonl"))
        return sum(1 for f in files for _ in open(f))

    def wait_trials(self, rank: int, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.trials_done(rank) < count:
            assert time.monotonic() < deadline, f"node {rank} finished no trial in {timeout} s:\n{self.err(rank)}"
            time.sleep(0.05)

    def agent_pid(self, rank: int) -> int:
        """Under torchrun: the loadertop agent (torchrun's worker, in a session of its own)."""
        children = psutil.Process(self.procs[rank].pid).children()
        assert children, f"node {rank} has no agent:\n{self.err(rank)}"
        return children[0].pid

    def left(self) -> list[str]:
        """Every live process that carries this sweep's marker (agents, runners, trials, workers, torchrun)."""
        found = []
        for proc in psutil.process_iter(["pid", "cmdline", "status"]):
            try:
                if (
                    proc.info["status"] != psutil.STATUS_ZOMBIE
                    and proc.environ().get("LOADERTOP_TEST_MARK") == self.mark
                ):
                    found.append(f"{proc.pid}: {' '.join(proc.info['cmdline'] or [])[:100]}")
            except (psutil.Error, OSError):
                continue
        return found

    def kill_all(self) -> None:
        for proc in psutil.process_iter():
            try:
                if proc.environ().get("LOADERTOP_TEST_MARK") == self.mark:
                    proc.kill()
            except (psutil.Error, OSError):
                continue


def assert_nothing_left(nodes: Nodes, within: float = 20.0) -> None:
    # A deadline, not a verdict: a runner template still importing torch when its node failed sees its socket closed
    # only after the import (beside other load, past 5 s); a leak never leaves.
    deadline = time.monotonic() + within
    while (left := nodes.left()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left == [], "processes survived:\n" + "\n".join(left)


def pieces(nodes: Nodes, rank: int, count: int = 2) -> dict[str, str]:
    """torchrun's variables for node `rank`, set by hand (no torchrun agent: node 0 serves the store itself)."""
    return {"RANK": str(rank), "WORLD_SIZE": str(count), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(nodes.port)}


def srun(nodes: Nodes, rank: int, count: int) -> dict[str, str]:
    """What `srun --ntasks-per-node 1` gives task `rank` of `count` on hosts "localhost" (no MASTER_ADDR exported:
    node 0's address is the node list's first host, its port derived from the job id). The first call picks a job
    id whose port is free and makes it the sweep's."""
    if nodes.slurm_job is None:
        for job in range(SLURM_PORT_SPAN):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", SLURM_PORT_BASE + job))
                except OSError:
                    continue
            nodes.slurm_job, nodes.port = job, SLURM_PORT_BASE + job
            break
    return {
        "SLURM_PROCID": str(rank), "SLURM_NODEID": str(rank), "SLURM_NTASKS": str(count),
        "SLURM_JOB_NUM_NODES": str(count), "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": str(count),
        "SLURM_JOB_NODELIST": "localhost", "SLURM_JOB_ID": str(nodes.slurm_job),
    }  # fmt: skip
