"""`loadertop stages`: where a sample's time goes. Real child processes on real datasets (tests/stage_datasets.py:
a transform that spins the CPU, a slow import inside __getitem__) for the measurements; the ceiling arithmetic, the
advice rules, the protocol and the headless face on fixed figures."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

import loadertop
from loadertop.core.engine.verdict import stage_ceilings as arithmetic
from loadertop.core.engine.verdict.stage_advice import Facts, advise
from loadertop.core.engine.verdict.stage_verdict import judge_stages
from loadertop.core.model.stages import LazyImport, Stage, StagesMeasurement, StagesReport
from loadertop.core.model.stages_protocol import StagesReady, decode, encode
from loadertop.core.model.wire import VersionMismatch

DATA = str(Path(__file__).with_name("stage_datasets.py"))
MB = 2**20


def loadertop_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "loadertop", "stages", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)  # fmt: skip


# -- measured, in a real child process ----------------------------------------------------------------------------


def test_a_slow_transform_step_is_the_largest_stage_and_the_stages_add_up(tmp_path: Path, no_leftovers: None) -> None:
    """A Compose of three steps, the middle one spinning 2 ms of CPU: that step is the stage with the largest share,
    and the stages sum to the 0-worker time within 10% or "unattributed" holds the gap. --json has the report."""
    out_json = tmp_path / "stages.json"
    done = loadertop_cli("--dataset", f"{DATA}:slow_step", "--seconds", "1.5", "--json", str(out_json))
    assert done.returncode == 0, done.stderr
    report = json.loads(out_json.read_text())["stages"]
    assert report["version"] == 1
    sample = [row for row in report["rows"] if row["stage"]["part"] == "sample"]
    largest = max(sample, key=lambda row: row["share"] or 0.0)
    assert largest["stage"]["name"] == "SlowStep" and largest["stage"]["kind"] == "transform"
    assert {"Scale", "Shift", "collate"} <= {row["stage"]["name"] for row in sample}
    assert largest["stage"]["cpu_s"] == pytest.approx(0.002, rel=0.25)  # the spin is CPU time, whatever the load
    gap = [row["stage"] for row in sample if row["stage"]["kind"] == "unattributed"]
    reference, total = report["reference_wall_s"], report["stages_wall_s"]
    if abs(reference - total) <= 0.1 * reference:
        assert not gap
    elif reference > total:  # the gap is shown, and then the stages add up
        assert gap and gap[0]["wall_s"] == pytest.approx(reference - total)
    assert "SlowStep" in done.stdout and "ceilings on this machine" in done.stdout


def test_a_lazy_heavy_import_is_reported_and_importing_it_first_spares_the_workers(no_leftovers: None) -> None:
    """The package imported inside __getitem__ is named with its time, and advised against; the suggestion checked
    for real: imported before the workers fork, a fresh worker's first batch no longer pays it."""
    lazy = loadertop.stages(f"{DATA}:lazy", seconds=0.5, samples=50)
    heavy = next(item for item in lazy.measurement.lazy_imports if item.package == "stage_heavy")
    assert heavy.seconds is not None and heavy.seconds >= 0.3
    assert any(a.rule == "lazy_import" and "stage_heavy" in a.text for a in lazy.advice)
    eager = loadertop.stages(f"{DATA}:lazy", dataset_args={"eager": "1"}, seconds=0.5, samples=50)
    assert not any(item.package == "stage_heavy" for item in eager.measurement.lazy_imports)
    assert not any(a.rule == "lazy_import" for a in eager.advice)
    assert lazy.measurement.worker_first_batch_s is not None and eager.measurement.worker_first_batch_s is not None
    assert lazy.measurement.worker_first_batch_s - eager.measurement.worker_first_batch_s > 0.2


@pytest.mark.parametrize(
    ("spec", "needle"),
    [("/nonexistent/data.py:make", "not found"), (f"{DATA}:broken", "the first sample: ValueError: corrupt sample")],
)
def test_a_bad_spec_or_failing_data_is_one_line_and_exit_2(spec: str, needle: str) -> None:
    done = loadertop_cli("--dataset", spec)
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("loadertop stages: error:") and needle in last
    assert "Traceback" not in done.stderr


def command_of(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:  # it ended between the listing and the reading
        return ""


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_or_sigterm_stops_it_and_leaves_no_process(signum: int, code: int, no_leftovers: None) -> None:
    """Whatever the shell gave it: a test process, like a background job, may have SIGINT ignored."""
    cli = subprocess.Popen([sys.executable, "-m", "loadertop", "stages", "--dataset", f"{DATA}:slow_samples",
                            "--seconds", "60", "--samples", "100000"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline, child = time.monotonic() + 60, None
        while child is None and time.monotonic() < deadline:
            kids = psutil.Process(cli.pid).children(recursive=True)
            child = next((p for p in kids if "stages_main" in command_of(p)), None)
            time.sleep(0.2)
        assert child is not None
        time.sleep(3)  # measuring by now (torch imported, the dataset built)
        cli.send_signal(signum)
        assert cli.wait(30) == code, cli.stderr.read().decode()[-2000:] if cli.stderr else ""
        psutil.wait_procs([child], timeout=5)
        assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
    finally:
        cli.kill()
        cli.wait()


# -- fixed figures ------------------------------------------------------------------------------------------------


def measurement(**changes: object) -> StagesMeasurement:
    """An ImageFolder-like pipeline: read+decode 2 ms, a crop 1 ms, Normalize 0.5 ms, collate 0.5 ms; a worker's
    hand-over 0.5 ms, the main process's side 0.1 ms; float32 images of 18 MB a batch."""
    stages = (
        Stage("read+decode (PIL.Image.open/convert)", "read+decode", "sample", 0.002, 0.002),
        Stage("RandomResizedCrop", "transform", "sample", 0.001, 0.001),
        Stage("Normalize", "transform", "sample", 0.0005, 0.0005),
        Stage("collate", "collate", "sample", 0.0005, 0.0005),
        Stage("transfer: worker side", "transfer", "handoff", 0.0005, 0.0005),
        Stage("transfer: main side", "transfer", "main", 0.0001, 0.0001),
        Stage("pin_memory", "pin_memory", "main", None, None, "no GPU"),
        Stage("host to device", "to_device", "main", None, None, "unavailable: no GPU"),
    )
    figures: dict[str, object] = dict(
        spec="x.py:make", dataset="ImageFolder", length=1000, iterable=False, batch_size=32, samples=300,
        elapsed_s=5.0, sample_wall_s=0.0035, sample_cpu_s=0.0035, loader_wall_s=0.0042, loader_cpu_s=0.0042,
        stages=stages, libraries=(), hooks_overhead=0.01, profile_overhead=0.2, batch_bytes=19267840,
        tensors=("float32 32×3×224×224", "int64 32"), float_image_bytes=19267584, decoded_bytes=400_000.0,
        first_sample_s=0.05, worker_first_batch_s=0.5, main_first_batch_s=0.15, lazy_imports=(), cuda=False,
    )  # fmt: skip
    figures.update(changes)
    return StagesMeasurement(**figures)  # type: ignore[arg-type]


def judged(m: StagesMeasurement | None = None, mem_mb: float | None = 8192.0) -> StagesReport:
    return judge_stages(m or measurement(), cpus=2, mem_available_mb=mem_mb)


def rules(report: StagesReport) -> set[str]:
    return {advice.rule for advice in report.advice}


@pytest.mark.unit
def test_the_ceilings_are_the_cpus_over_the_pipelines_cpu_and_one_over_the_main_process() -> None:
    report = judged()
    assert report.pipeline_cpu_s == pytest.approx(0.0046)
    whole, by_cpu, by_main = report.ceilings
    assert by_cpu.samples_per_s == pytest.approx(2 / 0.0046) and by_main.samples_per_s == pytest.approx(1 / 0.0001)
    assert whole.samples_per_s == pytest.approx(2 / 0.0046)
    decode = next(row for row in report.rows if row.stage.kind == "read+decode")
    assert decode.if_free == pytest.approx(2 / 0.0026) and decode.cpu_share == pytest.approx(0.002 / 0.0046)
    assert decode.share == pytest.approx(0.002 / 0.0042)
    main = next(row for row in report.rows if row.stage.name == "transfer: main side")
    assert main.if_free == pytest.approx(2 / 0.0045)  # its CPU out; the main process then does nothing
    assert next(row for row in report.rows if row.stage.kind == "pin_memory").if_free is None


@pytest.mark.unit
def test_a_pipeline_with_nothing_timed_in_the_main_process_has_no_main_process_ceiling() -> None:
    # A torchdata.nodes graph: no hand-over, no main side; its ceiling is the CPUs' alone, not "~– samples/s"
    sample_only = tuple(s for s in measurement().stages if s.part == "sample")
    report = judged(measurement(stages=sample_only))
    names = [c.name for c in report.ceilings if not c.name.startswith("thread workers")]
    assert names == ["the whole pipeline", "the CPUs (workers and main process)"], names
    assert report.ceilings[0].basis == "the one below"
    assert all(c.samples_per_s is not None for c in report.ceilings)


@pytest.mark.unit
def test_the_gap_beyond_ten_percent_is_unattributed() -> None:
    within = judged(measurement(loader_wall_s=0.0042))  # the stages sum to 4.0 ms: 4.8% under
    assert "unattributed" not in {row.stage.kind for row in within.rows} and within.gap == pytest.approx(0.2 / 4.2)
    beyond = judged(measurement(loader_wall_s=0.005, loader_cpu_s=0.0048))
    gap = next(row.stage for row in beyond.rows if row.stage.kind == "unattributed")
    assert gap.wall_s == pytest.approx(0.001) and gap.cpu_s == pytest.approx(0.0008) and gap.part == "sample"
    kinds = [row.stage.part for row in beyond.rows]
    assert kinds.index("handoff") > [row.stage.kind for row in beyond.rows].index("unattributed")
    shares = sum(row.share or 0.0 for row in beyond.rows if row.stage.part == "sample")
    assert shares == pytest.approx(1.0)
    over = judged(measurement(loader_wall_s=0.003))  # the stages exceed the 0-worker time: said, not hidden
    assert "unattributed" not in {row.stage.kind for row in over.rows} and over.gap < -0.1


@pytest.mark.unit
def test_each_advice_rests_on_its_figures_and_names_the_ceiling_beside_them() -> None:
    report = judged()
    assert rules(report) == {"decode", "cache", "uint8"}
    by_rule = {advice.rule: advice for advice in report.advice}
    decode = next(row for row in report.rows if row.stage.kind == "read+decode")
    for rule in ("decode", "cache"):  # the same figures as the row beside it
        assert by_rule[rule].ceiling == decode.if_free and by_rule[rule].share == decode.cpu_share
        assert by_rule[rule].stage == decode.stage.name and "43%" in by_rule[rule].text
    # uint8: the hand-over and the collate keep (19267840 - 19267584 + 4816896) / 19267840 of their cost;
    # Normalize goes to the GPU
    kept = (19267840 - 19267584 + 4816896) / 19267840
    saved = (0.0005 + 0.0005 + 0.0001) * (1 - kept) + 0.0005
    assert by_rule["uint8"].share == pytest.approx(saved / 0.0046)
    assert by_rule["uint8"].ceiling == pytest.approx(2 / (0.0046 - saved))
    assert all(advice.ceiling is None or advice.ceiling > report.ceilings[0].samples_per_s for advice in report.advice)


@pytest.mark.unit
def test_no_advice_without_its_premise() -> None:
    crop_first = measurement(stages=tuple(
        replace(s, wall_s=0.003, cpu_s=0.003) if s.name == "RandomResizedCrop" else s for s in measurement().stages
    ))  # fmt: skip
    assert {"decode", "cache"}.isdisjoint(rules(judged(crop_first)))  # decode is no longer the largest stage
    assert "cache" not in rules(judged(mem_mb=500.0))  # 1000 × 0.4 MB is more than half of 500 MB
    assert "cache" not in rules(judged(measurement(length=None)))  # an iterable: its size is not known
    uint8 = measurement(tensors=("uint8 32×3×224×224", "int64 32"), batch_bytes=4817152, float_image_bytes=0)
    assert "uint8" not in rules(judged(uint8))
    small = measurement(tensors=("float32 32×3×8×8", "int64 32"), batch_bytes=24832, float_image_bytes=24576)
    assert "uint8" not in rules(judged(small))  # 24 KB a batch: its width costs nothing worth a change
    no_transfer = measurement(stages=tuple(s for s in measurement().stages if s.kind != "transfer"))
    assert "uint8" not in rules(judged(no_transfer))  # the hand-over was not measured: no figure to rest on
    assert {"lazy_import", "pin_memory", "main_process"}.isdisjoint(rules(judged()))


@pytest.mark.unit
def test_lazy_import_pin_memory_and_main_process_advice() -> None:
    lazy = measurement(lazy_imports=(LazyImport("librosa", 412, 1.9), LazyImport("tiny", 1, 0.001),
                                     LazyImport("importlib_made", 3, None)))  # fmt: skip
    advice = [a for a in judged(lazy).advice if a.rule == "lazy_import"]
    assert len(advice) == 1 and "librosa" in advice[0].text and "1.90 s" in advice[0].text
    assert advice[0].share == pytest.approx(1.9 / 0.5)
    pinned = measurement(stages=tuple(
        replace(s, wall_s=0.0002, cpu_s=0.0002) if s.kind == "pin_memory" else s for s in measurement().stages
    ))  # fmt: skip
    assert "pin_memory" in rules(judged(pinned))
    assert "pin_memory" not in rules(judged(replace(pinned, cuda=True)))  # with a GPU, pinning is what it is for
    slow_main = measurement(stages=tuple(
        replace(s, wall_s=0.005, cpu_s=0.005) if s.name == "transfer: main side" else s for s in measurement().stages
    ))  # fmt: skip
    report = judged(slow_main)
    main = next(a for a in report.advice if a.rule == "main_process")
    assert main.ceiling == pytest.approx(200.0) == report.ceilings[0].samples_per_s


@pytest.mark.unit
def test_facts_ceiling_is_the_reports() -> None:
    report = judged()
    stages = tuple(row.stage for row in report.rows)
    facts = Facts(report.measurement, stages, report.rows, report.cpus, report.mem_available_mb)
    assert facts.ceiling == report.ceilings[0].samples_per_s and advise(facts) == report.advice
    assert arithmetic.sample_sum(stages) == pytest.approx(0.004)


@pytest.mark.unit
def test_hooks_find_each_step_through_a_subset_and_put_everything_back() -> None:
    import torch
    from stage_datasets import Compose, Scale, Shift, SlowStep, Tensors
    from torch.utils.data import Subset

    from loadertop.core.trial.stage_hooks import Timed, TimedModule, find_hooks

    steps = [Scale(), SlowStep(), Shift()]
    inner = Tensors(Compose(list(steps)))
    inner.target_transform = torch.nn.Sequential(torch.nn.Identity(), torch.nn.ReLU())  # type: ignore[attr-defined]
    hooks = find_hooks(Subset(inner, [0, 1, 2]))
    names = [site.tally.name for site in hooks.sites]
    assert names == ["Scale", "SlowStep", "Shift", "target: Identity", "target: ReLU"]
    hooks.install(record=True)
    assert all(isinstance(step, Timed) for step in inner.transform.transforms)
    assert isinstance(inner.target_transform[1], TimedModule)
    inner[3]
    assert [t.calls for t in hooks.tallies[:3]] == [1, 1, 1] and hooks.tallies[1].cpu_s >= 0.0015
    hooks.restore()
    assert inner.transform.transforms == steps and isinstance(inner.target_transform[1], torch.nn.ReLU)


@pytest.mark.unit
def test_the_profile_splits_a_sample_by_its_direct_callees_and_their_library() -> None:
    """cProfile over a user's __getitem__ (looked through a Subset): its slow helper is the largest callee, named by
    the libraries it spends its time in; torch's calls are torch's."""
    import cProfile
    import time as clock

    from stage_datasets import LazyImport, Tensors
    from torch.utils.data import Subset

    from loadertop.core.trial.stage_profile import split_profile
    from loadertop.core.trial.stage_rounds import Fetcher

    del LazyImport  # only Tensors is profiled here
    fetch = Fetcher(Subset(Tensors(), list(range(64))), iterable=False)
    wall, cpu = cProfile.Profile(), cProfile.Profile(clock.process_time_ns, 1e-9)
    for profile in (wall, cpu):
        profile.enable()
        for _ in range(200):
            fetch()
        profile.disable()
    split = split_profile(wall, cpu, Fetcher.__call__.__code__, set())
    assert split is not None and split.entry.endswith("Tensors.__getitem__")  # Subset's __getitem__ looked through
    names = [call.name for call in split.calls]
    assert "torch.full" in names and "Tensors.__getitem__ (own code)" in names
    assert next(c for c in split.calls if c.name == "torch.full").library == "torch"
    assert "torch" in dict(split.libraries)


@pytest.mark.unit
def test_a_profiled_stage_never_shows_more_cpu_than_time() -> None:
    from loadertop.core.trial.stage_split import capped

    assert capped([0.3, 2.0, 0.1], [0.4, 1.8, 0.1]) == pytest.approx([0.3, 1.9, 0.1])  # the total kept
    assert capped([1.0, 1.0], [3.0, 0.5]) == pytest.approx([1.0, 2.5])  # no room: the total kept all the same


@pytest.mark.unit
def test_the_measurement_round_trips_and_another_version_is_refused() -> None:
    m = measurement(lazy_imports=(LazyImport("librosa", 3, None),))
    assert decode(encode(m)) == m
    hello = encode(StagesReady(1, 42)).replace('"version": 1', '"version": 99')
    with pytest.raises(VersionMismatch, match="protocol 99"):
        decode(hello)


@pytest.mark.unit
def test_the_headless_table_fits_80_columns_and_says_what_was_not_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    from loadertop.core.engine import NONE
    from loadertop.faces.headless_stages import print_stages

    monkeypatch.setenv("COLUMNS", "80")
    out = io.StringIO()
    print_stages(judged(measurement(loader_wall_s=0.005, loader_cpu_s=0.004)), out)
    text = out.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80
    for needle in ("read+decode", "unattributed", "ceilings on this machine", "the whole pipeline: ~435 samples/s",
                   "advice:", "send uint8", "not measured: pin_memory (no GPU)", NONE):  # fmt: skip
        assert needle in text, needle
