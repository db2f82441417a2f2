"""Many nodes on localhost: separate agents joined over torch.distributed's store, as torchrun or srun start them.

Every process an agent starts (the agent, its runner, trials, workers) inherits a marker in its environment; the
check that none survives reads it with psutil. The sweeps are the cheapest real ones: synthetic samples that mostly
wait, 1 s trials.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from nodes_procs import ARGS, Nodes, assert_nothing_left, free_port, pieces, srun

from loadertop.core.model.config import Settings
from loadertop.core.nodes.join import comparable, difference, hello


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[Nodes]:
    launched = Nodes(tmp_path)
    yield launched
    launched.kill_all()  # a failed test leaves nothing running either


def test_two_torchrun_nodes_measure_each_trial_together(nodes: Nodes, tmp_path: Path) -> None:
    result = tmp_path / "result.json"
    args = [*ARGS, "--ranks", "2"]  # each node's two ranks have a gloo group of their own, not torchrun's store
    nodes.torchrun(1, args, extra={"SLURM_CPUS_PER_TASK": "1"})  # its own CPU count: 1, whatever the machine has
    nodes.torchrun(0, [*args, "--json", str(result)])
    assert nodes.wait(0, 90) == 0, nodes.err(0)
    assert nodes.wait(1, 30) == 0, nodes.err(1)
    data = json.loads(result.read_text())
    assert [n["node_rank"] for n in data["nodes"]] == [0, 1]
    assert all(n["mem_total_mb"] > 0 and n["hostname"] and n["ranks"] == 2 for n in data["nodes"])
    assert [n["usable_cpus"] for n in data["nodes"]] == [len(os.sched_getaffinity(0)), 1]
    assert len(data["trials"]) == 2
    for trial in data["trials"]:
        assert trial["status"] == "ok", trial
        assert len(trial["node_samples_per_s"]) == 2 and all(r > 0 for r in trial["node_samples_per_s"])
        assert len(trial["rank_samples_per_s"]) == 4 and trial["ranks"] == 4
        assert trial["slowest_rank"].startswith(("node 0", "node 1")) and trial["slowest_rank"].endswith(("0", "1"))
    assert list(tmp_path.glob("runs1/*/result.json")), "node 1 keeps its own run folder"
    assert "wrote" not in nodes.err(1)  # node 0 writes --json
    assert_nothing_left(nodes)


def test_a_node_killed_mid_trial_stops_every_node(nodes: Nodes) -> None:
    args = [*ARGS, "--trial-seconds", "2"]
    nodes.torchrun(1, args)
    nodes.torchrun(0, args)
    nodes.wait_trials(0, 1, 90)
    time.sleep(0.5)  # into the second trial
    agent = nodes.agent_pid(1)
    killed = time.monotonic()
    # The whole node, the agent first: killed after torchrun, it had the moment between to hear of torchrun's end
    # and say bye (node 0 then, truly, says it left rather than that it was lost)
    os.kill(agent, signal.SIGKILL)
    os.killpg(nodes.procs[1].pid, signal.SIGKILL)  # torchrun (the runner follows the agent)
    code = nodes.wait(0, 20)
    stopped = time.monotonic() - killed
    assert code != 0
    assert stopped < 10, f"node 0 took {stopped:.1f} s to stop"
    assert "loadertop: error: node 1 (" in nodes.err(0) and "lost" in nodes.err(0), nodes.err(0)
    assert_nothing_left(nodes)


def test_ctrl_c_on_node_0_stops_every_node(nodes: Nodes) -> None:
    args = [*ARGS, "--trial-seconds", "2"]
    nodes.torchrun(1, args)
    nodes.torchrun(0, args)
    nodes.wait_trials(0, 1, 90)
    interrupted = time.monotonic()
    os.killpg(nodes.procs[0].pid, signal.SIGINT)  # what the terminal sends torchrun's group on Ctrl-C
    assert nodes.wait(0, 20) != 0
    assert nodes.wait(1, 20) != 0
    assert time.monotonic() - interrupted < 10
    assert "Interrupted: " in nodes.out(0)  # the headless face's exit 130 (torchrun itself says 1)
    assert "exitcode  : 130" in nodes.err(1) and "node 0 (" in nodes.err(1) and "stopped the sweep" in nodes.err(1)
    assert_nothing_left(nodes)


def test_a_node_that_never_joins_is_one_line_and_exit_2(nodes: Nodes) -> None:
    slurm = {
        "SLURM_PROCID": "0",
        "SLURM_NTASKS": "2",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_JOB_NODELIST": "localhost",
        "SLURM_STEP_ID": "0",
        "SLURM_JOB_ID": "7",
        "MASTER_PORT": str(nodes.port),
    }  # what srun gives node 0; node 1 never starts
    alone = {**pieces(nodes, 1), "MASTER_PORT": str(free_port())}  # a node 1 whose node 0 never starts
    started = time.monotonic()
    nodes.bare(0, [*ARGS, "--join-timeout", "3"], slurm)
    nodes.bare(1, [*ARGS, "--join-timeout", "3"], alone)
    assert nodes.wait(0, 30) == 2
    assert nodes.wait(1, 30) == 2
    # The 3 s asked for, not the 60 s default: Python's and torch's start on a busy machine take the rest
    assert time.monotonic() - started < Settings().join_timeout / 2
    assert nodes.err(0).strip().splitlines() == ["loadertop: error: node 1 of 2 did not join within 3 s"]
    lines = nodes.err(1).strip().splitlines()  # one line: not torch's log of every try
    assert len(lines) == 1 and lines[0].startswith("loadertop: error: node 1 of 2 could not reach the sweep's store")
    assert_nothing_left(nodes)


def test_different_settings_are_refused_on_every_node(nodes: Nodes) -> None:
    nodes.bare(0, ARGS, pieces(nodes, 0))
    nodes.bare(1, [*ARGS, "--batch-size", "64"], pieces(nodes, 1))
    assert nodes.wait(0, 60) == 2
    assert nodes.wait(1, 30) == 2
    for rank in (0, 1):
        lines = nodes.err(rank).strip().splitlines()
        assert len(lines) == 1, lines
        assert lines[0].startswith("loadertop: error: node 1 (") and "--batch-size 64 (node 0: 32)" in lines[0]
    assert_nothing_left(nodes)


def test_another_loadertop_version_is_refused(nodes: Nodes, tmp_path: Path) -> None:
    other = tmp_path / "other-install"  # node 1's installed loadertop says 9.9.9 (its metadata comes first)
    (other / "loadertop-9.9.9.dist-info").mkdir(parents=True)
    (other / "loadertop-9.9.9.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: loadertop\nVersion: 9.9.9\n"
    )
    path = os.pathsep.join([str(other), os.environ.get("PYTHONPATH", "")])
    nodes.bare(0, ARGS, pieces(nodes, 0))
    nodes.bare(1, ARGS, {**pieces(nodes, 1), "PYTHONPATH": path})
    assert nodes.wait(0, 60) == 2
    assert nodes.wait(1, 30) == 2
    for rank in (0, 1):
        lines = nodes.err(rank).strip().splitlines()
        assert len(lines) == 1 and "node 1 (" in lines[0] and "runs loadertop 9.9.9" in lines[0], lines
    assert_nothing_left(nodes)


def test_a_node_that_fails_its_own_checks_leaves_at_once(nodes: Nodes) -> None:
    nodes.bare(0, ARGS, pieces(nodes, 0))
    nodes.bare(1, [*ARGS, "--compare", str(nodes.folder / "no-such-run")], pieces(nodes, 1))
    assert nodes.wait(1, 60) == 2
    joined, said = nodes.err(1).strip().splitlines()  # it joined, then its own check failed
    assert joined.startswith("loadertop: node 1 of 2 (torchrun): all joined (node 0 ")
    assert said == f"loadertop: error: --compare {nodes.folder}/no-such-run: no such run folder or result file"
    assert nodes.wait(0, 20) == 1
    assert "loadertop: error: node 1 (" in nodes.err(0) and "left the sweep" in nodes.err(0)
    assert_nothing_left(nodes)


def test_node_0_lost_stops_the_other_two(nodes: Nodes) -> None:
    args = [*ARGS, "--workers", "0,1", "--trial-seconds", "2"]
    for rank in (0, 1, 2):
        nodes.bare(rank, args, srun(nodes, rank, 3))  # as srun starts them: node 0 serves the store itself
    nodes.wait_trials(1, 1, 90)
    killed = time.monotonic()
    nodes.procs[0].kill()  # node 0's agent, and the store it serves (its runner dies with it)
    assert nodes.wait(1, 20) == 1
    assert nodes.wait(2, 20) == 1
    assert time.monotonic() - killed < 8
    for rank in (1, 2):
        assert "loadertop: error: node 0 (" in nodes.err(rank) and "lost" in nodes.err(rank), nodes.err(rank)
    assert_nothing_left(nodes)


def test_three_nodes_by_hand(nodes: Nodes, tmp_path: Path) -> None:
    result = tmp_path / "result.json"
    for rank in (2, 1, 0):
        nodes.bare(rank, [*ARGS, "--json", str(result)], pieces(nodes, rank, 3))
    assert [nodes.wait(rank, 120) for rank in (0, 1, 2)] == [0, 0, 0], nodes.err(0)
    data = json.loads(result.read_text())
    assert [n["node_rank"] for n in data["nodes"]] == [0, 1, 2]
    assert all(len(t["node_samples_per_s"]) == 3 for t in data["trials"])
    assert len(list(tmp_path.glob("runs[12]/*/result.json"))) == 2 and "wrote" not in nodes.err(1) + nodes.err(2)
    assert_nothing_left(nodes)


@pytest.mark.unit
def test_hellos_that_differ_name_what_differs() -> None:
    settings = Settings()
    mine = hello(settings, 0)
    other = hello(Settings(trial_seconds=9.0), 1)
    assert difference(mine, hello(settings, 1)) is None  # node_rank is not compared
    assert "--trial-seconds 9.0 (node 0: 8.0)" in (difference(mine, other) or "")
    older = dataclasses.replace(hello(settings, 1), loadertop="0.0.1")
    said = difference(mine, older) or ""
    assert said.startswith("node 1 (") and "runs loadertop 0.0.1" in said and "install the same loadertop" in said
    assert mine.info.node_rank == 0 and comparable(mine.settings) == comparable(other.settings) | {"trial_seconds": 8.0}
