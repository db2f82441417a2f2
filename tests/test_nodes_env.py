"""Many nodes: the launch read from torchrun's and SLURM's environment, and each node's usable CPUs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from loadertop.core.engine.nodes.launch import SLURM_PORT_BASE, Launch, detect_launch, first_host
from loadertop.core.machine.facts import usable_cpus
from loadertop.core.model.config import Settings, UsageError
from loadertop.core.trial.world import global_rank, set_rank_environ
from loadertop.faces.cli import main

pytestmark = pytest.mark.unit

# What torchrun --nnodes 2 --nproc-per-node 1 --node-rank 1 gives its worker (read from a real launch).
TORCHRUN_NODE_1 = {
    "RANK": "1", "GROUP_RANK": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "WORLD_SIZE": "2",
    "GROUP_WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29611", "TORCHELASTIC_RUN_ID": "none",
    "TORCHELASTIC_USE_AGENT_STORE": "True",
}  # fmt: skip
SLURM_NODE_2 = {
    "SLURM_PROCID": "2", "SLURM_NTASKS": "4", "SLURM_JOB_NUM_NODES": "4", "SLURM_NODEID": "2",
    "SLURM_JOB_NODELIST": "gpu[07-10]", "SLURM_JOB_ID": "123456", "SLURM_CPUS_PER_TASK": "8", "SLURM_STEP_ID": "0",
}  # fmt: skip


def test_no_launcher_or_one_node_is_the_ordinary_loadertop() -> None:
    assert detect_launch({}) is None
    assert detect_launch({**TORCHRUN_NODE_1, "WORLD_SIZE": "1", "RANK": "0", "GROUP_RANK": "0"}) is None
    assert detect_launch({**SLURM_NODE_2, "SLURM_NTASKS": "1", "SLURM_JOB_NUM_NODES": "1", "SLURM_PROCID": "0"}) is None


def test_the_batch_script_itself_is_no_launch() -> None:
    batch = {k: v for k, v in SLURM_NODE_2.items() if k != "SLURM_STEP_ID"} | {"SLURM_PROCID": "0"}
    assert detect_launch(batch) is None  # a plain `loadertop` in an sbatch script measures its own node


def test_an_srun_step_on_part_of_the_job_uses_the_step() -> None:
    step = {**SLURM_NODE_2, "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_NUM_NODES": "2", "SLURM_PROCID": "1",
            "SLURM_STEP_NODELIST": "gpu[09-10]"}  # fmt: skip
    assert detect_launch(step) == Launch(1, 2, "gpu09", SLURM_PORT_BASE + 456, "slurm")


def test_torchrun_node() -> None:
    assert detect_launch(TORCHRUN_NODE_1) == Launch(1, 2, "10.0.0.1", 29611, "torchrun", agent_store=True)


def test_torchrun_pieces_without_the_agent() -> None:
    env = {"RANK": "0", "WORLD_SIZE": "3", "MASTER_ADDR": "h", "MASTER_PORT": "1234"}
    assert detect_launch(env) == Launch(0, 3, "h", 1234, "torchrun", agent_store=False)


def test_slurm_node_derives_master_from_the_node_list_and_the_job_id() -> None:
    launch = detect_launch(SLURM_NODE_2)
    assert launch == Launch(2, 4, "gpu07", SLURM_PORT_BASE + 456, "slurm")


def test_slurm_exported_master_wins() -> None:
    launch = detect_launch({**SLURM_NODE_2, "MASTER_ADDR": "head", "MASTER_PORT": "4000"})
    assert launch is not None and (launch.master_addr, launch.master_port) == ("head", 4000)


@pytest.mark.parametrize(
    ("nodelist", "host"),
    [("a,b", "a"), ("node[01-04]", "node01"), ("node[3,5-7]", "node3"), ("n[001-002]-ib,m1", "n001-ib"), ("x", "x")],
)
def test_first_host(nodelist: str, host: str) -> None:
    assert first_host(nodelist) == host


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({**TORCHRUN_NODE_1, "LOCAL_WORLD_SIZE": "2"}, "--nproc-per-node 1"),
        ({**TORCHRUN_NODE_1, "WORLD_SIZE": "two"}, "WORLD_SIZE='two' is not a whole number"),
        ({**TORCHRUN_NODE_1, "GROUP_RANK": "5"}, "node rank 5 is not below WORLD_SIZE=2"),
        ({**TORCHRUN_NODE_1, "MASTER_PORT": "99999"}, "MASTER_PORT='99999' is not a port"),
        ({k: v for k, v in TORCHRUN_NODE_1.items() if k != "MASTER_ADDR"}, "MASTER_ADDR is not set"),
        ({**SLURM_NODE_2, "SLURM_JOB_NUM_NODES": "2"}, "--ntasks-per-node 1"),
        ({**SLURM_NODE_2, "SLURM_JOB_NODELIST": "[oops"}, "SLURM_JOB_NODELIST='[oops' cannot be read"),
        ({k: v for k, v in SLURM_NODE_2.items() if k != "SLURM_JOB_ID"}, "SLURM_JOB_ID is not set"),
    ],
)
def test_a_malformed_launch_is_one_line(env: dict[str, str], says: str) -> None:
    with pytest.raises(UsageError) as caught:
        detect_launch(env)
    assert says in str(caught.value)
    assert "\n" not in str(caught.value)


def test_usable_cpus_takes_slurm_cpus_per_task(tmp_path: Path) -> None:
    nothing = tmp_path / "no-cgroup"  # this process's real affinity, no cgroup quota
    affinity = len(os.sched_getaffinity(0))
    assert usable_cpus(nothing, nothing, environ={}) == affinity
    assert usable_cpus(nothing, nothing, environ={"SLURM_CPUS_PER_TASK": "1"}) == 1
    assert usable_cpus(nothing, nothing, environ={"SLURM_CPUS_PER_TASK": str(affinity + 64)}) == affinity
    assert usable_cpus(nothing, nothing, environ={"SLURM_CPUS_PER_TASK": "junk"}) == affinity


def test_a_trial_rank_sees_the_job_not_the_launch() -> None:
    settings = Settings(nodes=3, node_rank=2, ranks=2)
    assert global_rank(settings, 1) == (5, 6)
    env = {**TORCHRUN_NODE_1, "PATH": "/bin"}
    set_rank_environ(settings, 1, 4242, env)
    assert env["RANK"] == "5" and env["WORLD_SIZE"] == "6" and env["LOCAL_RANK"] == "1"
    assert env["LOCAL_WORLD_SIZE"] == "2" and env["GROUP_RANK"] == "2"
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("127.0.0.1", "4242")  # the node-local group's
    assert "TORCHELASTIC_USE_AGENT_STORE" not in env and "TORCHELASTIC_RUN_ID" not in env  # else: a client, no server
    one = {**TORCHRUN_NODE_1}
    set_rank_environ(Settings(nodes=2, node_rank=1), 0, None, one)
    assert (one["RANK"], one["WORLD_SIZE"]) == ("1", "2") and "MASTER_ADDR" not in one


def test_the_cli_says_a_malformed_launch_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for name in ("MASTER_ADDR", "TORCHELASTIC_RUN_ID", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    assert main(["--headless", "--workers", "0", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == "loadertop: error: torchrun launch: MASTER_ADDR is not set\n"
