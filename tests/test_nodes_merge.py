"""merge_nodes: every node's TrialResult of one configuration → the trial as the job (DDP) sees it; and OneNode, the
link of a sweep on one node."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadertop.core.engine.nodes.merge import merge_nodes
from loadertop.core.engine.nodes.node_link import NodeLink, OneNode
from loadertop.core.model.config import TrialConfig
from loadertop.core.model.nodes import NodeInfo
from loadertop.core.model.results import TrialResult

pytestmark = pytest.mark.unit

CONFIG = TrialConfig(num_workers=4, batch_size=32, prefetch_factor=2)


def node(k: int, ranks: int = 1) -> NodeInfo:
    return NodeInfo(k, f"host-{'abcd'[k]}", usable_cpus=8, mem_total_mb=16000, mem_available_mb=9000, ranks=ranks)


def trial(rates: tuple[float, ...], **kw: object) -> TrialResult:
    fields: dict[str, object] = dict(
        samples_per_s=sum(rates),
        ranks=len(rates),
        rank_samples_per_s=rates if len(rates) > 1 else (),
        stall_fraction=0.1,
        wait_ms_p50=1.0,
        wait_ms_p95=2.0,
        wait_ms_p99=3.0,
        spread=0.02,
        stable=True,
        total_pss_mb=500.0,
    )
    fields.update(kw)
    return TrialResult(7, CONFIG, "ok", **fields)  # type: ignore[arg-type]


def test_the_job_goes_at_its_slowest_rank() -> None:
    fast = trial((1000.0,), stall_fraction=0.05)
    slow = trial((820.0,), stall_fraction=0.3, wait_ms_p50=4.0, wait_ms_p95=9.0, wait_ms_p99=20.0, spread=0.04)
    merged = merge_nodes([fast, slow], [node(0), node(1)])
    assert merged.status == "ok" and merged.index == 7 and merged.config == CONFIG
    assert merged.samples_per_s == pytest.approx(2 * 820.0)  # not 1820: DDP steps both at the slow one's pace
    assert merged.batches_per_s == pytest.approx(2 * 820.0 / 32)
    assert merged.node_samples_per_s == (1000.0, 820.0)
    assert merged.rank_samples_per_s == (1000.0, 820.0)
    assert merged.slowest_rank == "node 1 (host-b) rank 0"
    assert merged.ranks == 2
    # the worst node's stall and waits; node 0's probes
    assert merged.stall_fraction == 0.3
    assert (merged.wait_ms_p50, merged.wait_ms_p95, merged.wait_ms_p99) == (4.0, 9.0, 20.0)
    assert merged.spread == 0.04 and merged.total_pss_mb == 500.0
    assert [n.node_rank for n in merged.node_trials] == [0, 1]
    assert merged.node_trials[1].samples_per_s == 820.0 and merged.node_trials[1].stall_fraction == 0.3


def test_local_ranks_in_global_rank_order() -> None:
    a = trial((400.0, 390.0), rank_wait_ms_p99=(2.0, 3.0))
    b = trial((410.0, 300.0), rank_wait_ms_p99=(2.5, 12.0))
    merged = merge_nodes([a, b], [node(0, 2), node(1, 2)])
    assert merged.rank_samples_per_s == (400.0, 390.0, 410.0, 300.0)
    assert merged.rank_wait_ms_p99 == (2.0, 3.0, 2.5, 12.0)
    assert merged.samples_per_s == pytest.approx(4 * 300.0)
    assert merged.ranks == 4
    assert merged.node_samples_per_s == (790.0, 710.0)
    assert merged.slowest_rank == "node 1 (host-b) rank 1"


def test_a_failed_node_fails_the_trial_with_its_name() -> None:
    ok = trial((1000.0,))
    bad = TrialResult(7, CONFIG, "failed", error="worker killed by signal 9")
    merged = merge_nodes([ok, ok, bad], [node(0), node(1), node(2)])
    assert merged.status == "failed"
    assert merged.error == "node 2 (host-c): worker killed by signal 9"
    assert merged.samples_per_s is None and merged.slowest_rank is None and merged.node_samples_per_s == ()
    assert [n.status for n in merged.node_trials] == ["ok", "ok", "failed"]


def test_a_failure_wins_over_a_skip() -> None:
    skipped = TrialResult(7, CONFIG, "skipped", error="memory guard")
    failed = TrialResult(7, CONFIG, "failed", error="boom")
    merged = merge_nodes([trial((5.0,)), skipped, failed], [node(0), node(1), node(2)])
    assert (merged.status, merged.error) == ("failed", "node 2 (host-c): boom")


def test_warnings_union_names_the_node_when_not_everywhere() -> None:
    shared = "3 shards for 8 readers: 5 workers idle"
    a = trial((10.0,), warnings=(shared,))
    b = trial((10.0,), warnings=(shared, "persistent_workers with set_epoch repeats the order"))
    merged = merge_nodes([a, b], [node(0), node(1)])
    assert merged.warnings == (shared, "node 1: persistent_workers with set_epoch repeats the order")


def test_mismatched_lengths_are_a_bug_said_plainly() -> None:
    with pytest.raises(ValueError, match="2 trials for 1 nodes"):
        merge_nodes([trial((1.0,)), trial((1.0,))], [node(0)])


def test_the_merge_survives_the_result_json() -> None:
    merged = merge_nodes([trial((100.0, 90.0)), trial((80.0, 95.0))], [node(0, 2), node(1, 2)])
    again = TrialResult.from_dict(json.loads(json.dumps(merged.to_dict())))
    assert again == merged


rate = st.floats(min_value=0.5, max_value=1e5, allow_nan=False)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.lists(rate, min_size=1, max_size=3), min_size=1, max_size=4), st.data())
def test_merge_properties(per_node: list[list[float]], data: st.DataObject) -> None:
    ranks = len(per_node[0])
    per_node = [(r * ranks)[:ranks] for r in per_node]  # every node runs the same --ranks
    trials = [trial(tuple(r)) for r in per_node]
    merged = merge_nodes(trials, [node(k, ranks) for k in range(len(trials))])
    every = [r for rates in per_node for r in rates]
    assert merged.ranks == len(every)
    assert merged.samples_per_s == pytest.approx(len(every) * min(every))
    # never more than the nodes summed, never less than one rank's share of it
    assert merged.samples_per_s <= sum(merged.node_samples_per_s) * (1 + 1e-9)
    assert merged.node_samples_per_s == pytest.approx([sum(r) for r in per_node])
    slow_node = int(merged.slowest_rank.split()[1])  # type: ignore[union-attr]
    slow_local = int(merged.slowest_rank.rsplit(" ", 1)[1])  # type: ignore[union-attr]
    assert per_node[slow_node][slow_local] == min(every)
    # one node failing fails it, whichever node
    k = data.draw(st.integers(0, len(trials) - 1))
    trials[k] = TrialResult(7, CONFIG, "failed", error="gone")
    broken = merge_nodes(trials, [node(j, ranks) for j in range(len(trials))])
    assert broken.status == "failed" and broken.error is not None and broken.error.startswith(f"node {k} ")


def test_one_node_is_the_null_link() -> None:
    """A sweep on one node plans its own trials, keeps its results as they are, names no nodes and never breaks:
    the driver talks to it as to any link."""
    link: NodeLink = OneNode()
    one = trial((100.0,))
    assert link.next_config(lambda: CONFIG) is CONFIG and link.next_config(lambda: None) is None
    assert link.combine(one) is one and link.nodes() == () and (link.node_rank, link.many) == (0, False)
    link.on_break(pytest.fail)
    link.stop()
    link.close()
