"""What a many-node trial shows per node, and the sentence that says which rank paces the job and what it costs.

Computed once here from the merged trial (engine/nodes/merge.py) and carried on the report's rows (report/rows.py prints
them), so the headless table, the Markdown, the CSV and the TUI's nodes pane show the same figures."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from loadertop.core.engine.wording import pct
from loadertop.core.model.nodes import NodeInfo, NodeTrial
from loadertop.core.model.results import TrialResult

EVEN = 0.02  # per-rank rates within this (or the trial's spread, if wider) of the fastest node's: the nodes load alike

# (key, header) of the per-node table, in order
NODE_COLUMNS = (
    ("node", "node"),
    ("host", "host"),
    ("samples/s", "samples/s"),
    ("per rank", "per rank"),
    ("behind", "vs fastest"),
    ("stall", "stall"),
    ("p99", "p99 ms"),
    ("uss", "USS/wkr MB"),
    ("pss", "PSS MB"),
    ("cpu", "CPU"),
    ("status", "status"),
)
NODE_HEADERS = dict(NODE_COLUMNS)


@dataclass(frozen=True)
class NodeRow:
    """One node's share of one trial (its local ranks summed), as every face shows it."""

    node_rank: int
    hostname: str
    status: str
    error: str | None
    samples_per_s: float | None
    rank_samples_per_s: tuple[float, ...]
    behind: float | None  # how much slower its ranks load than the fastest node's (0 for the fastest)
    paces: bool  # the job's slowest rank is on this node
    stall_fraction: float | None
    wait_ms_p99: float | None
    uss_per_worker_mb: float | None
    pss_mb: float | None
    cpu_percent: float | None


def node_rows(trial: TrialResult, nodes: Sequence[NodeInfo] = ()) -> tuple[NodeRow, ...]:
    """Each node's row of a merged trial, in node rank order; () for a one-node trial."""
    shares = trial.node_trials
    if not shares:
        return ()
    hosts = {n.node_rank: n.hostname for n in nodes}
    best = max((_per_rank(s) or 0.0 for s in shares), default=0.0)
    slow = _slow_node(trial)
    return tuple(
        NodeRow(
            node_rank=s.node_rank,
            hostname=hosts.get(s.node_rank, ""),
            status=s.status,
            error=s.error,
            samples_per_s=s.samples_per_s,
            rank_samples_per_s=s.rank_samples_per_s,
            behind=None if _per_rank(s) is None or not best else 1.0 - (_per_rank(s) or 0.0) / best,
            paces=s.node_rank == slow,
            stall_fraction=s.stall_fraction,
            wait_ms_p99=s.wait_ms_p99,
            uss_per_worker_mb=max(s.worker_uss_mb) if s.worker_uss_mb else None,
            pss_mb=s.total_pss_mb,
            cpu_percent=s.cpu_percent,
        )
        for s in shares
    )


def pacing(trial: TrialResult, nodes: Sequence[NodeInfo] = ()) -> str:
    """Which rank paces the job and what it costs, e.g. 'node 1 (host-b) paces the job: its ranks load 18% slower
    than node 0's (slowest: rank 0); in lockstep the job gets 2 ranks × 820 = 1640 samples/s, 10% below the 1820
    its nodes load together'. Empty when the trial is not a finished many-node one."""
    rows = node_rows(trial, nodes)
    if len(rows) < 2 or trial.status != "ok" or not trial.samples_per_s or not trial.rank_samples_per_s:
        return ""
    slowest = min(trial.rank_samples_per_s)
    summed = sum(r.samples_per_s or 0.0 for r in rows)
    cost = 1.0 - trial.samples_per_s / summed if summed else 0.0
    lockstep = (
        f"in lockstep the job gets {len(trial.rank_samples_per_s)} ranks × {slowest:.0f} = "
        f"{trial.samples_per_s:.0f} samples/s, {pct(cost)} below the {summed:.0f} its nodes load together"
    )
    slow = next((r for r in rows if r.paces), None)
    if slow is None:
        return ""
    fast = min(rows, key=lambda r: r.behind if r.behind is not None else 1.0)
    even = max(EVEN, trial.spread or 0.0)  # a gap inside the trial's own spread is noise, not a slow node
    if slow.behind is None or slow.behind < even:
        return f"the nodes load alike (within {pct(even)}); the slowest rank is {trial.slowest_rank}; {lockstep}"
    hostname = slow.hostname or _host_in(trial.slowest_rank, slow.node_rank)  # the merge named it: no `nodes` needed
    host = f" ({hostname})" if hostname else ""
    return (
        f"node {slow.node_rank}{host} paces the job: its ranks load {pct(slow.behind)} slower than node "
        f"{fast.node_rank}'s{_its_rank(trial.slowest_rank, slow.node_rank)}; {lockstep}"
    )


def _its_rank(name: str | None, node_rank: int) -> str:
    """' (slowest: rank 0)' when the merge named a rank of that node, else the merge's name as it is."""
    if not name:
        return ""
    head, _, local = name.rpartition(" rank ")
    return f" (slowest: rank {local})" if head.startswith(f"node {node_rank} ") else f" (slowest: {name})"


def _host_in(name: str | None, node_rank: int) -> str:
    """'host-b' from 'node 1 (host-b) rank 0' when it names that node, else ''."""
    prefix = f"node {node_rank} ("
    if not name or not name.startswith(prefix) or ") rank " not in name:
        return ""
    return name[len(prefix) : name.rindex(") rank ")]


def _slow_node(trial: TrialResult) -> int | None:
    """The node of the job's slowest rank: from the merge's name, else the node with the slowest rank."""
    name = trial.slowest_rank or ""
    if name.startswith("node ") and name.split()[1].isdigit():
        return int(name.split()[1])
    rated = [(min(s.rank_samples_per_s), s.node_rank) for s in trial.node_trials if s.rank_samples_per_s]
    return min(rated)[1] if rated else None


def _per_rank(share: NodeTrial) -> float | None:
    if share.status != "ok" or share.samples_per_s is None:
        return None
    return share.samples_per_s / max(1, len(share.rank_samples_per_s))
