"""The stages inside a sweep: the decision to measure them, the sweep's consumer and transport ceilings beside the
stages' own, a CPU-bound recommendation citing the stage that dominates, the result's JSON and the headless section
on fixed figures; a cancel that kills the child; one short sweep with a real process."""

from __future__ import annotations

import dataclasses
import io
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from reason_checks import contradictions
from test_reason_truth import IO_WAITING, PLAIN, SATURATING, machine, trial
from test_stages import DATA, judged, measurement

from loadertop.core.engine.drive.stages_child import StagesCancelled, exchange, kill_group
from loadertop.core.engine.verdict import stage_ceilings as arithmetic
from loadertop.core.engine.verdict.outcome import conclude
from loadertop.core.engine.verdict.stage_plan import COLD_START_S, START_S, plan_stages, sample_seconds
from loadertop.core.engine.verdict.stage_verdict import judge_stages
from loadertop.core.model.results import Ceiling, SweepResult
from loadertop.core.model.stages import Replay, Stage, StagesReport
from loadertop.core.model.stages_protocol import decode, encode
from loadertop.faces.cli import build_parser, settings_from_args
from loadertop.faces.headless import Reporter

unit = pytest.mark.unit  # no subprocess, no DataLoader workers


def decode_heavy() -> StagesReport:
    """read+decode 8 ms of a 10.6 CPU ms pipeline (75% of its CPU): the stage that dominates."""
    m = measurement()
    stages = (Stage("read+decode (PIL.Image.open/convert)", "read+decode", "sample", 0.008, 0.008), *m.stages[1:])
    return judge_stages(dataclasses.replace(m, stages=stages, loader_wall_s=0.0102), 2, 8192.0)


# -- whether to measure them ----------------------------------------------------------------------------------------


@unit
def test_by_default_the_stages_run_only_when_they_cost_at_most_5_percent_of_the_sweep() -> None:
    trials = [trial(0, 0, 100.0, 100.0, 100.0, 0.6)]  # 10 ms a sample at 0 workers: 0.32 s a batch
    cost = START_S + 4 * 0.32 + 2 * 0.32  # the forked child's start, two rounds of every way, two first batches
    costly = plan_stages("auto", trials, 70.0, 1.0, 32, warm=True)  # 3.92 s of 70 s
    assert not costly.run and "more than 5%" in costly.why and "--stages" in costly.why
    short = plan_stages("auto", trials, 50.0, None, 32, warm=True)  # 2.92 s of 50 s, but a short sweep
    assert not short.run and "less than 60 s" in short.why
    long = plan_stages("auto", trials, 80.0, None, 32, warm=True)
    assert long.run and long.timeout_s == pytest.approx(2 * cost + COLD_START_S) and "4% of the sweep's" in long.why
    cold = plan_stages("auto", trials, 80.0, None, 32, warm=False)  # a fresh process imports torch first
    assert not cold.run
    built = plan_stages("auto", trials, 80.0, 5.0, 32, warm=True)  # a dataset that takes 5 s to build costs 5 s more
    assert not built.run


@unit
def test_no_stages_never_runs_them_and_stages_always_does() -> None:
    assert not plan_stages("off", [], 1000.0, None, 32, warm=True).run
    assert plan_stages("on", [], 1.0, None, 64, warm=False).run
    assert plan_stages("on", [], 1.0, None, 64, warm=False).batch_size == 64
    failed = [dataclasses.replace(trial(0, 0, 100.0, 100.0, 100.0, 0.6), status="failed", samples_per_s=None)]
    unknown = plan_stages("auto", failed, 1000.0, None, 32, warm=True)  # nothing says what a sample costs: not guessed
    assert not unknown.run and "no trial finished" in unknown.why


@unit
def test_a_samples_time_is_the_fastest_trials_workers_over_its_rate() -> None:
    trials = [trial(0, 0, 100.0, 100.0, 100.0, 0.6), trial(1, 4, 800.0, 190.0, 20.0, 0.3)]
    assert sample_seconds(trials) == pytest.approx(4 / 800)
    assert sample_seconds([]) is None


# -- the sweep's ceilings beside the stages' own --------------------------------------------------------------------


SWEEP_CEILINGS = (
    Ceiling(32, 150.0),
    Ceiling(64, 90.0),  # another batch size: not the stages'
    *(Ceiling(32, sps, kind="transport", num_workers=n, pin_memory=False) for n, sps in ((0, 9e4), (1, 2e3), (4, 5e3))),
    Ceiling(32, 8e3, kind="transport", num_workers=4, pin_memory=True),  # pinned: the stages pin nothing
)


@unit
def test_the_sweeps_consumer_and_transport_ceilings_stand_beside_the_stages_own() -> None:
    beside = arithmetic.beside_of(SWEEP_CEILINGS, 32)
    assert (beside.consumer, beside.transport) == (150.0, 5e3)  # the hand-over's best with workers, unpinned
    assert "at 4 workers, of 2 worker counts measured" in beside.transport_basis
    report = judge_stages(measurement(), 2, 8192.0, beside)
    by_name = {c.name: c.samples_per_s for c in report.ceilings}
    assert by_name[arithmetic.CONSUMER] == 150.0 and by_name[arithmetic.TRANSPORT] == 5e3
    assert by_name["the whole pipeline"] == 150.0  # the lowest of them all
    assert all(r.if_free is None or r.if_free <= 150.0 for r in report.rows)  # no stage moves the consumer
    assert {c.name for c in judged().ceilings}.isdisjoint({arithmetic.CONSUMER, arithmetic.TRANSPORT})


@unit
def test_the_consumer_rule_rests_on_the_measured_consumer_ceiling() -> None:
    loader = 2 / 0.0046  # 2 CPUs over the pipeline's 4.6 CPU ms: ~435 samples/s, the main process's far above
    slow = judge_stages(measurement(), 2, 8192.0, arithmetic.Beside(150.0, "alone on a cached batch of 32"))
    advice = next(a for a in slow.advice if a.rule == "consumer")
    assert advice.ceiling == 150.0 and "~150 samples/s" in advice.text and f"~{loader:.0f}" in advice.text
    assert "more workers will not help" in advice.text
    fast = judge_stages(measurement(), 2, 8192.0, arithmetic.Beside(1000.0, "alone on a cached batch of 32"))
    assert "consumer" not in {a.rule for a in fast.advice}
    assert "consumer" not in {a.rule for a in judged().advice}  # `loadertop stages` alone measures no consumer


@unit
def test_the_largest_stage_replayed_for_real_stands_beside_its_predicted_ceiling() -> None:
    replay = Replay("read+decode (PIL.Image.open/convert)", 64, 0.0022, 0.0021)
    m = measurement(replay=replay)
    assert decode(encode(m)) == m  # the child's answer carries it
    report = judge_stages(m, 2, 8192.0)
    replayed = next(c for c in report.ceilings if "replayed for real" in c.name)
    assert replayed.samples_per_s == pytest.approx(2 / (0.0021 + 0.0005 + 0.0001))  # + the hand-over, the main's
    predicted = next(r.if_free for r in report.rows if r.stage.name == replay.stage)
    assert f"predicted were it free: ~{predicted:.0f}" in replayed.basis and "over 64 samples" in replayed.basis
    gone = measurement(replay=dataclasses.replace(replay, stage="no such stage"))
    assert not any("replayed" in c.name for c in judge_stages(gone, 2, 8192.0).ceilings)


# -- the reason citing them -----------------------------------------------------------------------------------------


@unit
def test_a_cpu_bound_recommendation_cites_the_stage_that_dominates_the_cpu() -> None:
    stages = decode_heavy()
    result = conclude(SATURATING, PLAIN, machine(), stages=stages).result
    assert result.stages == stages and result.recommendation is not None
    share = next(r.cpu_share for r in stages.rows if r.stage.kind == "read+decode")
    assert share is not None
    clause = f"where the CPU goes: read+decode (PIL.Image.open/convert) is {share:.0%} of the CPU time per sample"
    reason = result.recommendation.reason
    assert reason.startswith("CPU-bound: workers use") and f"; {clause} (the stages); " in reason
    assert contradictions(result) == []


@unit
def test_no_stage_is_cited_when_none_dominates_or_the_cpus_are_not_the_bound() -> None:
    even = conclude(SATURATING, PLAIN, machine(), stages=judged()).result  # read+decode 39%: none dominates
    waiting = conclude(IO_WAITING, PLAIN, machine(8), stages=decode_heavy()).result
    for result in (even, waiting):
        assert result.recommendation is not None and "where the CPU goes" not in result.recommendation.reason
    assert waiting.recommendation is not None and waiting.recommendation.reason.startswith("I/O-bound")


@unit
def test_a_citation_the_stages_do_not_hold_is_a_contradiction() -> None:
    result = conclude(SATURATING, PLAIN, machine(), stages=decode_heavy()).result
    assert result.recommendation is not None
    wrong = result.recommendation.reason.replace("is 75%", "is 95%")
    assert wrong != result.recommendation.reason
    forged = dataclasses.replace(result, recommendation=dataclasses.replace(result.recommendation, reason=wrong))
    assert any("cites 'read+decode" in found for found in contradictions(forged))


# -- kept, read back, shown -----------------------------------------------------------------------------------------


@unit
def test_the_result_keeps_its_stages_through_json_and_older_results_still_read() -> None:
    result = dataclasses.replace(conclude(SATURATING, PLAIN, machine(), stages=decode_heavy()).result,
                                 stages_note="measured in 4.0 s")  # fmt: skip
    data = json.loads(json.dumps(result.to_dict()))
    assert data["stages"]["version"] == 1 and data["stages_note"] == "measured in 4.0 s"
    again = SweepResult.from_dict(data)
    assert again.stages == result.stages and again.recommendation == result.recommendation
    older = {k: v for k, v in data.items() if k not in ("stages", "stages_note")}
    assert SweepResult.from_dict(older).stages is None
    other = SweepResult.from_dict({**data, "stages": {**data["stages"], "version": 99}})
    assert other.stages is None and "stages version 99" in other.stages_note and other.trials == result.trials


@unit
def test_the_headless_summary_shows_the_largest_stages_the_ceilings_and_the_advice() -> None:
    stages = judge_stages(decode_heavy().measurement, 2, 8192.0, arithmetic.beside_of(SWEEP_CEILINGS, 32))
    result = conclude(SATURATING, PLAIN, machine(), stages=stages).result
    out = io.StringIO()
    Reporter(out, io.StringIO()).summary(result)
    text = " ".join(out.getvalue().split())
    assert "Where the time goes (ImageFolder, batch 32, 0 workers" in text
    assert "read+decode (PIL.Image.open/convert): 8.00 ms, 8.00 CPU ms per sample, 75% of the CPU" in text
    assert "the consumer (the training step alone, measured by the sweep): ~150 samples/s" in text
    assert "the consumer is the ceiling" in text and text.index("Why:") < text.index("Where the time goes")
    bare = io.StringIO()
    Reporter(bare, io.StringIO()).summary(conclude(SATURATING, PLAIN, machine()).result)
    assert "Where the time goes" not in bare.getvalue()


@unit
def test_the_flags_force_or_skip_the_stages() -> None:
    parse = build_parser().parse_args
    assert [settings_from_args(parse(a)).stages for a in ([], ["--stages"], ["--no-stages"])] == ["auto", "on", "off"]


# -- real processes -------------------------------------------------------------------------------------------------


def test_a_cancel_kills_the_stages_child_at_once() -> None:
    """The sweep's Ctrl-C sets its cancel event: the wait ends within a poll, and the child's group is killed."""
    child = subprocess.Popen([sys.executable, "-c", "import sys, time; sys.stdin.read(); time.sleep(60)"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)  # fmt: skip
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    begun = time.monotonic()
    try:
        with pytest.raises(StagesCancelled):
            exchange(child, b"request\n", 60.0, cancel)
        assert time.monotonic() - begun < 30  # not the child's 60 s
    finally:
        kill_group(child)
    assert child.returncode is not None


def test_a_sweep_with_stages_keeps_them_in_its_json_and_prints_them(tmp_path: Path, no_leftovers: None) -> None:
    out_json = tmp_path / "result.json"
    done = subprocess.run(
        [sys.executable, "-m", "loadertop", "--dataset", f"{DATA}:slow_step", "--workers", "0-1",
         "--trial-seconds", "1", "--no-transport", "--stages", "--json", str(out_json), "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(out_json.read_text())
    stages = data["stages"]
    assert stages["version"] == 1 and stages["measurement"]["dataset"] == "Tensors"
    assert stages["measurement"]["replay"]["stage"] == "SlowStep"  # the largest stage, a hooked one, replayed
    assert stages["rows"] and stages["ceilings"][0]["name"] == "the whole pipeline"
    assert data["stages_note"].startswith("measured in")
    kept = json.loads((Path(data["run_dir"]) / "result.json").read_text())
    assert kept["stages"] == stages
    assert "Where the time goes (Tensors, batch 32" in done.stdout and "replayed for real" in done.stdout
    assert "stages: measuring where a sample's time goes (--stages)" in done.stderr
