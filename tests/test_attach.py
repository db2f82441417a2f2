"""`loadertop attach`: a fake job publisher on a real socket (message handling, ending, protocol mismatch, several
viewers), real jobs through psutil (workers found, the job ending mid-view, bad targets) and the headless face."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
from live_fakes import FakeJob, at, kill_tree, loader_job
from test_gpu import CODES, FakeGpu, FakeNvml

from loadertop.core.engine import AttachError, LiveSession, find_jobs, open_session
from loadertop.core.engine.live.target import dataloader_workers, resolve
from loadertop.core.machine.gpu import GpuProbe
from loadertop.core.model.config import TrialConfig
from loadertop.core.model.live_protocol import JobEpoch, JobSteps, JobWorkers, TuneChose, TuneStep
from loadertop.core.model.stages import LIVE_STAGES
from loadertop.faces.cli import main

ROOT = Path(__file__).resolve().parents[1]
CONFIG = TrialConfig(num_workers=2, batch_size=32)


@pytest.fixture
def sleepers() -> Iterator[list[int]]:
    """Two real processes standing in for a watched job's workers."""
    procs = [subprocess.Popen(["sleep", "60"]) for _ in range(2)]
    yield [p.pid for p in procs]
    for p in procs:
        p.kill()
        p.wait()


@pytest.fixture
def fake(jobs_root: Path) -> Iterator[FakeJob]:
    job = FakeJob(jobs_root)
    yield job
    job.close()


def steps(job: FakeJob, batches: int = 10, wait_s: float = 0.1, step_s: float = 0.3, epoch: int = 0) -> JobSteps:
    return JobSteps(
        t=job.now(), span_s=0.2, loader=0, epoch=epoch, batches=batches, samples=batches * 32, wait_s=wait_s,
        step_s=step_s, wait_ms_p50=7.5, wait_ms_p95=20.0, wait_ms_max=20.0,
        waits_ms=(7.5,) * (batches - 2) + (20.0, 20.0),
    )  # fmt: skip


def exec_done(pid: int, word: str, timeout: float = 10.0) -> None:
    """Wait until the process `pid` runs its own program: its command line has `word`."""
    deadline = time.monotonic() + timeout
    while not any(word in part for part in psutil.Process(pid).cmdline()):
        assert time.monotonic() < deadline, f"pid {pid} did not exec {word!r} in {timeout} s"
        time.sleep(0.01)


def no_attach_threads() -> bool:
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        names = [t.name for t in threading.enumerate()]
        if not any(n in ("loadertop-probes", "loadertop-attach-socket") for n in names):
            return True
        time.sleep(0.05)
    return False


def test_watched_job_messages_become_a_snapshot(fake: FakeJob, sleepers: list[int]) -> None:
    session = open_session(fake.pid, interval=0.4)
    try:
        assert session.watched and session.pid == os.getpid() and session.command == "python train.py"
        fake.wait_viewers(1)
        fake.send(at(JobWorkers(t=0, loader=0, pids=tuple(sleepers), config=CONFIG), fake))
        snaps = session.snapshots()
        first = next(snaps)
        assert first.samples_per_s is None and first.missing == ()  # no step yet: no rate, nothing missing
        fake.send(steps(fake, batches=10, wait_s=0.1, step_s=0.3))
        fake.send(steps(fake, batches=10, wait_s=0.1, step_s=0.3))
        fake.send(at(JobEpoch(t=0, loader=0, epoch=0, batches=20, seconds=4.0, first_batch_s=0.5, complete=True), fake))
        fake.send(at(TuneStep(t=0, loader=0, config=CONFIG, batches=20, samples_per_s=900.0, stall_fraction=0.2,
                              wait_ms_p95=4.0, switch_s=0.4, message="w=2 bs=32: 900 samples/s"), fake))  # fmt: skip
        fake.send(at(TuneChose(t=0, loader=0, config=CONFIG, samples_per_s=900.0, reason="fastest",
                               snippet="DataLoader(ds, num_workers=2)", tuning_s=30.0, trials=4), fake))  # fmt: skip
        fake.sent_to(session, 6)  # the workers, two spans of steps, the epoch and tune's two lines
        snap = next(snaps)
    finally:
        session.close()
    assert snap.batches_per_s is not None and snap.samples_per_s == pytest.approx(snap.batches_per_s * 32)
    assert 20 / 3.0 < snap.batches_per_s < 20 / 0.3  # 20 batches over one interval (0.4 s, longer when busy)
    assert snap.stall_fraction == pytest.approx(0.25)  # 0.2 s waited of 0.8 s
    assert snap.wait_ms_p95 == 20.0 and snap.step_ms == pytest.approx(30.0) and snap.epoch == 0
    assert len(snap.epoch_ends) == 1 and 0.0 < snap.epoch_ends[0] <= snap.t
    assert [w.pid for w in snap.workers] == sleepers and all(w.uss_mb and w.uss_mb > 0 for w in snap.workers)
    assert snap.notes[0].startswith("loader 0: epoch 0 ended: 20 batches in 4.0 s")
    assert snap.notes[1] == "tune: w=2 bs=32: 900 samples/s"
    assert snap.notes[2].startswith("tune chose w=2 bs=32") and "DataLoader(ds, num_workers=2)" in snap.notes[2]
    assert no_attach_threads()


def test_history_counts_for_workers_not_for_rates(fake: FakeJob, sleepers: list[int]) -> None:
    """What the job replays to a late viewer names the workers but is not this interval's throughput."""
    past = dataclasses.replace(steps(fake, batches=99), t=fake.now() - 1.0)  # a second before the view attaches
    fake.history = [JobWorkers(t=0.0, loader=0, pids=tuple(sleepers), config=None), past]
    with open_session(fake.pid, interval=0.3) as session:
        snap = next(session.snapshots())
    assert snap.samples_per_s is None and snap.epoch == 0
    assert [w.pid for w in snap.workers] == sleepers


@pytest.mark.unit
def test_a_span_that_arrives_after_its_interval_closed_counts_at_the_jobs_own_rate(fake: FakeJob) -> None:
    """A job (or a viewer) slowed by a loaded machine delivers a span after the snapshot it belonged to was built:
    it counts in the next one, at the rate the job's own clock gives it (its batches over the job's time since
    attach), neither lost as history nor squeezed into the viewer's interval."""
    before = fake.now()  # attach happens between these two, on the job's clock
    with open_session(fake.pid, interval=0.5) as session:
        after = fake.now()
        fake.wait_viewers(1)
        snaps = session.snapshots()
        next(snaps)
        late = replace(steps(fake, batches=12), t=fake.now() - 0.25)  # drained 0.25 s before the interval began
        fake.send(late)
        snap = next(snaps)
    assert snap.batches == 12 and snap.batches_per_s is not None
    # 12 batches over the job's time from attach to the span's end: whenever attach fell between before and after
    assert 12 / (late.t - before) <= snap.batches_per_s * 1.001
    assert late.t <= after or snap.batches_per_s <= 12 / (late.t - after) * 1.001


@pytest.mark.unit
def test_goodbye_ends_the_view_with_a_last_snapshot(fake: FakeJob) -> None:
    session = open_session(fake.pid, interval=0.2)
    fake.wait_viewers(1)
    fake.send(steps(fake))
    fake.bye("interpreter exit")
    snaps = list(session.snapshots())  # ends on its own: no exception
    assert snaps[-1].ended == "the job said goodbye (interpreter exit)"
    assert all(s.ended is None for s in snaps[:-1])
    assert no_attach_threads()
    session.close()  # idempotent


@pytest.mark.unit
@pytest.mark.parametrize("by", ["pid", "folder"])
def test_protocol_mismatch_is_one_line(jobs_root: Path, by: str) -> None:
    job = FakeJob(jobs_root, version=99)
    try:
        with pytest.raises(AttachError) as error:
            open_session(job.pid if by == "pid" else str(job.folder), interval=0.5)
        assert find_jobs() == []  # another loadertop's job is not listed as one this one can watch
        assert job.folder.exists()  # nor removed while it runs
    finally:
        job.close()
    text = str(error.value)
    assert "\n" not in text and "version 99" in text and "loadertop installed in the job's environment" in text
    assert no_attach_threads()


@pytest.mark.unit
def test_a_job_folder_is_read_by_the_live_protocols_codec(tmp_path: Path) -> None:
    from loadertop.core.model.jobs import JOB_FILE, read_job
    from loadertop.core.model.live_protocol import LIVE_PROTOCOL_VERSION, JobHello, encode
    from loadertop.core.model.wire import VersionMismatch

    hello = JobHello(LIVE_PROTOCOL_VERSION, 123, ("python", "train.py"), 1.0, "box", "0.1.0")
    (tmp_path / JOB_FILE).write_text(encode(hello))
    job = read_job(tmp_path)
    assert job is not None and job.hello == hello and job.command == "python train.py"
    (tmp_path / JOB_FILE).write_text(encode(hello).replace('"pid": 123', '"pid": 123, "shell": 1'))
    assert read_job(tmp_path) is None  # a field this version does not know: not a job folder it can read
    (tmp_path / JOB_FILE).write_text(encode(hello).replace(f'"version": {LIVE_PROTOCOL_VERSION}', '"version": 99'))
    with pytest.raises(VersionMismatch, match="version 99"):
        read_job(tmp_path)


@pytest.mark.unit
def test_a_bad_line_mid_stream_stops_the_stream_not_the_view(fake: FakeJob) -> None:
    with open_session(fake.pid, interval=0.2) as session:
        fake.wait_viewers(1)
        fake.send_raw('{"type": "steps", "nonsense": 1}\n')
        snaps = session.snapshots()
        seen = [next(snaps) for _ in range(3)]
    assert all(s.ended is None for s in seen)  # the job still runs (it is this test process)
    assert seen[-1].missing and "cannot read" in seen[-1].missing[0] and not seen[-1].watched


@pytest.mark.unit
def test_several_viewers_at_once(fake: FakeJob) -> None:
    first, second = open_session(fake.pid, interval=0.3), open_session(fake.pid, interval=0.3)
    try:
        fake.wait_viewers(2)
        fake.send(steps(fake, batches=7))
        fake.sent_to(first, 1)
        fake.sent_to(second, 1)
        a, b = next(first.snapshots()), next(second.snapshots())
    finally:
        first.close()
        second.close()
    assert a.batches_per_s and b.batches_per_s and a.stall_fraction == b.stall_fraction == pytest.approx(0.25)


@pytest.mark.unit
def test_close_from_another_thread_ends_the_iterator(fake: FakeJob) -> None:
    session = open_session(fake.pid, interval=30.0)
    threading.Timer(0.3, session.close).start()
    began = time.monotonic()
    assert list(session.snapshots()) == []
    assert time.monotonic() - began < 5
    assert no_attach_threads()


@pytest.mark.unit
def test_targets_by_folder_and_socket_and_the_job_list(fake: FakeJob) -> None:
    for target in (str(fake.folder), str(fake.folder / "sock")):
        with open_session(target, interval=1.0) as session:
            assert session.pid == fake.pid and session.watched
    assert [job.pid for job in find_jobs()] == [fake.pid]
    with open_session(None, interval=1.0) as session:  # the only watchable job
        assert session.pid == fake.pid


def test_real_job_without_watch_then_it_ends(no_leftovers: None) -> None:
    """A real DataLoader with 2 workers and no loadertop.watch: attach finds the workers; killing the job
    mid-view ends the view with a last snapshot, not an exception."""
    with loader_job("numpy") as proc:
        session: LiveSession = open_session(proc.pid, interval=0.5)
        workers = {c.pid for c in psutil.Process(proc.pid).children()}
        snaps = session.snapshots()
        snap = next(snaps)
        assert not session.watched and len(snap.workers) == 2 and {w.pid for w in snap.workers} <= workers
        assert snap.missing == ("throughput and stall: the job does not run loadertop.watch(loader)",)
        assert snap.samples_per_s is None and snap.main_rss_mb and snap.mem_available_mb > 0
        proc.kill()
        proc.wait()
        rest = list(snaps)
    assert rest[-1].ended == "the job exited"
    assert no_attach_threads()


# -- the command line ------------------------------------------------------------------------------------


def attach(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["attach", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_bad_targets_exit_2_with_one_line(capsys: pytest.CaptureFixture[str], jobs_root: Path) -> None:
    sleeper = subprocess.Popen(["sleep", "30"])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        # Until each has exec'd, it is a fork of this Python process, and the target check would read that
        exec_done(sleeper.pid, "sleep")
        exec_done(idle.pid, "time.sleep(30)")
        cases = {
            str(sleeper.pid): f"pid {sleeper.pid} (sleep 30) is not a Python process",
            str(idle.pid): "is a Python process with no DataLoader workers and no loadertop.watch: wrap the loader",
            "999999999": "no such process: pid 999999999",
            "/nonexistent/job": "no such process or job folder",
        }
        for target, expected in cases.items():
            code, out, err = attach(target, "--headless", capsys=capsys)
            assert code == 2 and out == "" and err.count("\n") == 1 and expected in err, err
        code, _, err = attach("1", "--headless", "--interval", "0", capsys=capsys)
        assert code == 2 and "--interval 0: must be more than 0" in err
    finally:
        for proc in (sleeper, idle):
            proc.kill()
            proc.wait()


def as_nobody(target: int) -> tuple[int, str]:
    """`loadertop attach TARGET --headless` run by the user `nobody`: a forked child of this (root) process drops
    to nobody's uid and gid, then runs the CLI in the interpreter it already has (nobody may not be able to exec
    this Python: it lives under /root here). Its exit code and stderr."""
    nobody = pwd.getpwnam("nobody")
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe and never returns
        code, err = 1, io.StringIO()
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            os.environ.update(LOADERTOP_JOBS_DIR="/tmp", HOME="/tmp", XDG_RUNTIME_DIR="/tmp")
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                code = main(["attach", str(target), "--headless"])
        except BaseException as exc:
            err.write(f"the child failed: {exc!r}")
        finally:
            os.write(write, json.dumps([code, err.getvalue()]).encode())
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        code, err = json.loads(pipe.read() or '[1, "no answer"]')
    os.waitpid(child, 0)
    return code, err


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another user (nobody)")
def test_another_users_process_may_not_be_read() -> None:
    """loadertop run as `nobody` attaching to a process of root: refused with one line, exit 2."""
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        code, err = as_nobody(target.pid)
    finally:
        target.kill()
        target.wait()
    assert code == 2, err
    assert err.count("\n") == 1 and "belongs to root: loadertop may not read another user's process" in err, err


def test_headless_lines_and_json(fake: FakeJob, sleepers: list[int], capsys: pytest.CaptureFixture[str]) -> None:
    path = Path(tempfile.mkdtemp(prefix="lt")) / "live.jsonl"
    path.write_text("")  # appended to

    def job() -> None:
        fake.wait_viewers(1)
        fake.send(at(JobWorkers(t=0, loader=0, pids=tuple(sleepers), config=CONFIG), fake))
        for _ in range(6):
            fake.send(steps(fake))
            time.sleep(0.1)
        fake.bye()

    thread = threading.Thread(target=job)
    thread.start()
    code, out, err = attach(str(fake.pid), "--headless", "--interval", "0.2", "--json", str(path), capsys=capsys)
    thread.join()
    assert code == 0, err
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) >= 2 and lines[-1]["ended"]
    keys = {"t", "samples_per_s", "batches_per_s", "stall_fraction", "worker_uss_mb", "worker_uss_slope_mb_per_min",
            "warnings"}  # fmt: skip
    assert all(keys <= set(line) for line in lines)
    assert any(line["samples_per_s"] for line in lines) and len(lines[-2]["worker_uss_mb"]) == 2
    assert out.startswith(f"attached to pid {fake.pid}: python train.py (watched")
    assert out.splitlines()[1] == LIVE_STAGES  # where stages would be: not measured live, and how to get them
    assert "samples/s  stall 25%" in out and "workers USS MB:" in out and "ended: the job said goodbye" in out
    shutil.rmtree(path.parent)


@pytest.mark.unit
def test_headless_without_target_lists_the_jobs(fake: FakeJob, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = attach("--headless", capsys=capsys)
    assert code == 0
    assert out.splitlines()[0].split() == ["PID", "STARTED", "COMMAND"]
    assert out.splitlines()[1].split()[0] == str(fake.pid) and out.rstrip().endswith("python train.py")
    fake.close()
    shutil.rmtree(fake.folder)
    code, out, _ = attach("--headless", capsys=capsys)
    assert code == 0 and out.startswith("no watchable jobs")


def test_access_denied_is_said_as_another_users_process(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The error path alone (psutil refusing to read another user's process), where no other user can be made."""
    target = subprocess.Popen(["sleep", "30"])

    def denied(self: psutil.Process) -> None:
        raise psutil.AccessDenied(self.pid)

    monkeypatch.setattr(psutil.Process, "memory_full_info", denied)
    monkeypatch.setattr(psutil.Process, "uids", lambda self: SimpleNamespace(real=1234, effective=1234, saved=1234))
    monkeypatch.setattr(psutil.Process, "username", lambda self: "alice")
    try:
        code, _, err = attach(str(target.pid), "--headless", capsys=capsys)
    finally:
        target.kill()
        target.wait()
    assert code == 2 and err.count("\n") == 1
    assert "(sleep 30) belongs to alice: loadertop may not read another user's process" in err


@pytest.mark.unit
def test_pid_1_when_it_may_not_be_read(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        psutil.Process(1).exe()
        psutil.Process(1).memory_full_info()
    except psutil.AccessDenied:
        code, out, err = attach("1", "--headless", capsys=capsys)
    else:  # root outside any sandbox reads pid 1: ask as the user nobody, who may not
        if os.geteuid() != 0:
            pytest.skip("pid 1 is readable here and this test cannot become another user")
        (code, err), out = as_nobody(1), ""
    assert code == 2 and out == "" and err.count("\n") == 1 and "may not read" in err, err


@pytest.mark.unit
def test_the_jobs_gpus_are_those_running_its_pid(fake: FakeJob) -> None:
    """NVML through a fake pynvml (no GPU here): the job's GPUs are those listing its pid among their compute
    processes; the others are left out of the mean."""
    state = FakeNvml(gpus=[FakeGpu("A", 1000, util=90), FakeGpu("B", 1000, util=30)])
    nvml = state.module()
    running = {0: [], 1: [fake.pid]}
    nvml.nvmlDeviceGetComputeRunningProcesses = lambda h: [SimpleNamespace(pid=p) for p in running[h]]  # type: ignore[attr-defined]
    with LiveSession(resolve(fake.pid), interval=0.3, gpu=GpuProbe(nvml)) as session:
        snaps = session.snapshots()
        snap = next(snaps)
        assert snap.gpu_util == 30.0 and snap.gpu_unavailable is None
        running[1] = []
        snap = next(snaps)
    assert snap.gpu_util is None and snap.gpu_unavailable and "runs nothing on the GPUs" in snap.gpu_unavailable
    assert "shutdown" in state.calls  # close() shut NVML down


@pytest.mark.unit
def test_without_nvml_the_gpu_is_unavailable_with_a_reason(fake: FakeJob) -> None:
    state = FakeNvml(init_error=CODES["NVML_ERROR_DRIVER_NOT_LOADED"])
    with LiveSession(resolve(fake.pid), interval=0.2, gpu=GpuProbe(state.module())) as session:
        snap = next(session.snapshots())
    assert snap.gpu_util is None and snap.gpu_unavailable == "unavailable: NVIDIA driver not loaded"


POOL_SCRIPT = r"""
import multiprocessing as mp, sys, time
def work(running):
    running.release()
    time.sleep(60)
if __name__ == "__main__":
    ctx = mp.get_context(sys.argv[1])
    running = ctx.Semaphore(0)
    procs = [ctx.Process(target=work, args=(running,), daemon=True) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:  # start() returns before a spawned child has exec'd: until then it is a copy of this process
        running.acquire()
    print(" ".join(str(p.pid) for p in procs), flush=True)
    time.sleep(60)
"""


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_workers_of_each_start_method_are_found(method: str, tmp_path: Path, no_leftovers: None) -> None:
    """Worker processes as DataLoader starts them (multiprocessing, each start method): found by psutil, the
    forkserver and the resource tracker left out."""
    script = tmp_path / "pool.py"
    script.write_text(POOL_SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script), method], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        expected = sorted(int(pid) for pid in proc.stdout.readline().split())
        assert len(expected) == 2
        assert sorted(dataloader_workers(psutil.Process(proc.pid))) == expected
    finally:
        kill_tree(proc)


@pytest.mark.unit
def test_attach_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["attach", "--bogus"])
    assert done.value.code == 2
    assert capsys.readouterr().err == (
        "loadertop attach: error: unrecognized arguments: --bogus (see loadertop attach --help)\n"
    )
