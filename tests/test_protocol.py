"""The runner protocol: every message kind round-trips, bad lines are refused with a reason, a runner of another
protocol version is refused by the driver, and the driver's per-trial watch turns messages into events and one
TrialResult. No torch here: this is the driver's side (the runner is faked by a tiny script)."""

from __future__ import annotations

import dataclasses
import json
import queue
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadertop.core.engine.drive.ceiling_requests import measure_ceilings
from loadertop.core.engine.drive.runner_link import start_runner
from loadertop.core.engine.drive.trial_watch import TrialWatch
from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.events import Event, Notice, TrialLaunched, TrialProgress, TrialStarted
from loadertop.core.model.protocol import (
    KINDS,
    PROTOCOL_VERSION,
    Block,
    CeilingMeasured,
    CeilingRequest,
    Checked,
    CheckRequest,
    Epoch,
    Exited,
    Failed,
    Finished,
    Forked,
    Measuring,
    Message,
    ProtocolError,
    Ready,
    Reply,
    Request,
    Started,
    TransportMeasured,
    TrialNotice,
    TrialRequest,
    Workers,
    decode,
    decode_reply,
    encode,
)

CONFIG = TrialConfig(2, 32, 2, start_method="fork")
SETTINGS = Settings(dataset="synthetic:cpu_ms=1", dataset_args=(("kb", "16"),), workers=(0, 2), ranks=2)
FINISHED = Finished(
    batches_per_s=20.0, samples_per_s=640.0, spread=0.03, first_batch_s=0.4, stall_fraction=0.25, blocks=6,
    measured_s=2.5, warmup_batches=6, stable=True, epoch_batches=None, warnings=("same samples",), ranks=2,
    rank_samples_per_s=(330.0, 310.0),
)  # fmt: skip
EXAMPLES: list[Message] = [
    CheckRequest(SETTINGS, ("fork", "spawn")),
    TrialRequest(3, CONFIG, SETTINGS),
    CeilingRequest(-1, SETTINGS),
    Ready(PROTOCOL_VERSION, 4242),
    Checked(True, None, "Synthetic", 1000, False, ("collate_fn",), "dataset Synthetic, 1000 samples"),
    Checked(False, error="dataset spec 'x' not found"),
    Forked(3, 4343),
    Exited(3, 9, None),
    Exited(3, None, 0),
    Workers((11, 12), (21,)),
    Started((11, 12), 0.75, 1.5, (21,)),
    Measuring(),
    Block(4, 30, 960, 0.31, 96.8, 3097.0, 0.2, 2.1, None),
    Block(5, 30, 960, 0.3, 100.0, 3200.0, 0.2, 2.4, 0.04),
    FINISHED,
    Epoch(0.12),
    Epoch(None),
    TrialNotice("rank 1: workers yield the same samples"),
    Failed("ValueError: bad sample 7"),
    CeilingMeasured(32, 5000.0, "consumer alone on a cached batch: no CUDA: sleep 5 ms per batch", 0.01),
    CeilingMeasured(64, None, "the consumer does no work"),
    TransportMeasured(32, 2, False, 150.0, 4800.0, 18.4, 2, True, "null dataset: 2 tensors", 0.02),
]


@pytest.mark.unit
@pytest.mark.parametrize("message", EXAMPLES, ids=lambda m: type(m).__name__)
def test_every_example_round_trips_as_one_tagged_json_line(message: Message) -> None:
    line = encode(message)
    assert line.endswith("\n") and "\n" not in line[:-1]
    assert json.loads(line)["type"] == type(message).TYPE
    assert decode(line) == message and decode(line.encode()) == message


@pytest.mark.unit
def test_the_examples_cover_every_kind_and_the_tags_are_unique() -> None:
    assert {type(m) for m in EXAMPLES} == set(KINDS)
    assert len({kind.TYPE for kind in KINDS}) == len(KINDS)


# -- every kind, with generated values --------------------------------------------------------------------------------

_floats = st.floats(allow_nan=False)  # NaN is never equal to itself; infinities do round-trip
_text = st.text(max_size=20)
_FIELDS = {
    "int": st.integers(),
    "float": _floats,
    "str": _text,
    "bool": st.booleans(),
    "int | None": st.none() | st.integers(),
    "float | None": st.none() | _floats,
    "str | None": st.none() | _text,
    "tuple[int, ...]": st.lists(st.integers(), max_size=4).map(tuple),
    "tuple[float, ...]": st.lists(_floats, max_size=4).map(tuple),
    "tuple[str, ...]": st.lists(_text, max_size=4).map(tuple),
    "TrialConfig": st.builds(
        TrialConfig,
        num_workers=st.integers(0, 64),
        batch_size=st.integers(1, 4096),
        prefetch_factor=st.none() | st.integers(1, 8),
        pin_memory=st.booleans(),
        start_method=st.sampled_from([None, "fork", "spawn", "forkserver"]),
        in_order=st.booleans(),
    ),
    "Settings": st.builds(
        Settings,
        dataset=_text,
        dataset_args=st.lists(st.tuples(_text, _text), max_size=3).map(tuple),
        workers=st.lists(st.integers(0, 64), min_size=1, max_size=4).map(tuple),
        step_ms=_floats,
        consumer=_text,
        ranks=st.integers(1, 8),
        trial_seconds=_floats,
        skip_warmup=st.booleans(),
    ),
}


def _message(kind: type) -> st.SearchStrategy[Message]:
    fields = {f.name: _FIELDS[str(f.type)] for f in dataclasses.fields(kind)}
    if kind is Ready:
        fields["version"] = st.just(PROTOCOL_VERSION)
    return st.builds(kind, **fields)


@pytest.mark.unit
@settings(max_examples=300, deadline=None)
@given(st.sampled_from(KINDS).flatmap(_message))
def test_any_message_of_any_kind_round_trips(message: Message) -> None:
    assert decode(encode(message)) == message


# -- bad lines ------------------------------------------------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize(
    ("line", "says"),
    [
        ('{"type": "started", "worker_pids": [1]', "not a JSON line"),
        ("Traceback (most recent call last):", "not a JSON line"),
        ("[1, 2]", "not a JSON object"),
        ('{"type": "teleport", "index": 1}', "unknown message type 'teleport'"),
        ('{"index": 1, "pid": 2}', "unknown message type None"),
        ('{"type": "forked", "index": 1, "pid": "12"}', "forked.pid: expected an integer, got '12'"),
        ('{"type": "forked", "index": true, "pid": 12}', "forked.index: expected an integer, got True"),
        ('{"type": "workers", "worker_pids": 7}', "workers.worker_pids: expected a list, got 7"),
        ('{"type": "forked", "index": 1, "pid": 2, "colour": "red"}', "forked: unknown fields colour"),
        ('{"type": "trial", "index": 1, "config": [], "settings": {}}', "trial.config: expected an object"),
    ],
)
def test_a_bad_line_is_refused_with_what_is_wrong(line: str, says: str) -> None:
    with pytest.raises(ProtocolError) as refused:
        decode(line)
    assert says in str(refused.value)


@pytest.mark.unit
def test_a_missing_field_is_named() -> None:
    with pytest.raises(ProtocolError, match=r"forked: .*missing 1 required positional argument: 'pid'"):
        decode('{"type": "forked", "index": 1}')


@pytest.mark.unit
def test_a_ready_of_another_version_is_refused_before_its_fields_are_read() -> None:
    line = json.dumps({"type": "ready", "version": PROTOCOL_VERSION + 1, "pid": 1, "features": ["new"]})
    with pytest.raises(ProtocolError, match=f"protocol version {PROTOCOL_VERSION + 1}, this loadertop speaks 1"):
        decode(line)


@pytest.mark.unit
def test_the_driver_reads_replies_only_a_request_from_the_runner_is_refused() -> None:
    assert decode_reply(encode(Forked(1, 2))) == Forked(1, 2)
    request = next(m for m in EXAMPLES if isinstance(m, CheckRequest))
    with pytest.raises(ProtocolError, match="a check request from the runner, which sends replies only"):
        decode_reply(encode(request))


def _fake_runner(tmp_path: Path, *lines: str) -> list[str]:
    """argv for a 'runner' that prints these lines and then waits for its stdin to close, as the runner does."""
    script = "import sys\n" + "".join(f"print({line!r}, flush=True)\n" for line in lines) + "sys.stdin.read()\n"
    path = tmp_path / "fake_runner.py"
    path.write_text(script)
    return [sys.executable, str(path)]


def test_the_driver_refuses_a_runner_of_another_protocol_version(tmp_path: Path) -> None:
    argv = _fake_runner(tmp_path, json.dumps({"type": "ready", "version": 99, "pid": 1}))
    with pytest.raises(RuntimeError, match="protocol version 99, this loadertop speaks 1") as refused:
        start_runner(tmp_path / "runner.log", threading.Event(), argv)
    assert "another loadertop install" in str(refused.value)


def test_the_driver_takes_a_runner_that_says_ready_in_its_version(tmp_path: Path) -> None:
    argv = _fake_runner(tmp_path, encode(Ready(PROTOCOL_VERSION, 7)).strip(), "a stray line")
    runner = start_runner(tmp_path / "runner.log", threading.Event(), argv)
    try:  # the next line is not a message: the sweep would stop with the decoder's reason
        with pytest.raises(RuntimeError, match=r"cannot read: not a JSON line .*a stray line"):
            runner.next(10, "say something", threading.Event())
    finally:
        runner.close()


# -- the ceiling path and the per-trial watch read the same types ----------------------------------------------------


@pytest.mark.unit
def test_ceilings_are_read_from_decoded_messages_and_a_failure_leaves_its_reason() -> None:
    sent: list[Request] = []
    lines = iter(
        encode(m)
        for m in [Forked(-1, 5), CeilingMeasured(32, 5000.0, "alone", 0.01), Failed("CUDA error"), Exited(-1, None, 1)]
    )
    ceilings = measure_ceilings(sent.append, lambda limit, doing: decode(next(lines)), Settings(batch_sizes=(32, 64)))
    assert sent == [CeilingRequest(-1, Settings(batch_sizes=(32, 64)))]
    assert [(c.batch_size, c.samples_per_s, c.note) for c in ceilings] == [
        (32, 5000.0, "alone"),
        (64, None, "not measured (CUDA error)"),
    ]


class FakeHost:
    """The sweep's side of a trial, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, ...]] = []
        self.window: bool = False

    def launched(self, index: int, config: TrialConfig, pid: int) -> None:
        self.calls.append(("launched", index, pid))

    def follow(self, index: int, pid: int | None, pids: tuple[int, ...]) -> None:
        self.calls.append(("follow", pid, pids))

    def note_batch(self, batch_mb: float) -> None:
        self.calls.append(("batch", batch_mb))

    def window_open(self) -> bool:
        return self.window

    def open_window(self) -> None:
        self.window = True
        self.calls.append(("open",))

    def freeze_window(self) -> None:
        self.calls.append(("freeze",))


def _watch(messages: list[Reply]) -> tuple[TrialWatch, FakeHost, list[Event]]:
    host, events = FakeHost(), []
    watch = TrialWatch(host, events.append, 2, 5, CONFIG)
    for message in messages:
        watch.handle(decode(encode(message)))  # type: ignore[arg-type]
    return watch, host, events


@pytest.mark.unit
def test_a_trial_is_followed_from_its_fork_and_its_result_is_built_from_finished() -> None:
    watch, host, events = _watch(
        [
            Forked(2, 100), Workers((101, 102), (103,)), Started((101, 102), 0.4, 1.5, (103,)),
            Block(1, 30, 960, 0.3, 100.0, 3200.0, 0.2, 1.0, None), TrialNotice("rank 1: same samples"), FINISHED,
            Epoch(0.2), Exited(2, None, 0),
        ]
    )  # fmt: skip
    assert events[0] == TrialLaunched(2, 5, CONFIG, 100)
    assert events[1] == TrialStarted(2, 5, CONFIG, 100, (101, 102), 0.4)
    assert events[2] == TrialProgress(2, 1, 100.0, 3200.0, 0.2, 1.0, None, 3200.0)
    assert events[3] == Notice("warning", "rank 1: same samples", 2)
    assert host.calls[:4] == [("launched", 2, 100), ("follow", 100, (103, 101, 102)), ("follow", 100, (103, 101, 102)),
                              ("batch", 1.5)]  # fmt: skip
    assert host.calls[4:] == [("open",), ("freeze",)]  # the first block opened the window, Finished froze it
    assert watch.exited and watch.error is None
    result = watch.result(None, [])
    assert result.status == "ok" and (result.index, result.config) == (2, CONFIG)
    assert (result.samples_per_s, result.blocks, result.ranks) == (640.0, 6, 2)
    assert result.epoch_restart_s == 0.2  # from the Epoch message, measured after the window
    assert result.rank_samples_per_s == (330.0, 310.0) and result.warnings == ("same samples",)


@pytest.mark.unit
def test_the_running_median_is_the_engines_and_starts_over_with_the_blocks() -> None:
    """TrialProgress carries the median block so far (what the TUI's throughput pane quotes while the trial runs);
    a trial that starts its blocks over (blocks of whole epochs) starts the median over too."""
    rates = (3000.0, 3400.0, 3100.0, 900.0)
    blocks = [Block(n, 30, 960, 0.3, r / 32, r, 0.2, float(n), None) for n, r in enumerate(rates[:3], 1)]
    _, _, events = _watch([Forked(2, 100), *blocks, Block(1, 30, 960, 0.3, 28.0, rates[3], 0.2, 4.0, None)])
    progress = [e for e in events if isinstance(e, TrialProgress)]
    assert [e.median_samples_per_s for e in progress] == [3000.0, 3200.0, 3100.0, 900.0]


@pytest.mark.unit
@pytest.mark.parametrize(
    ("messages", "error"),
    [
        ([Forked(2, 100), Exited(2, 9, None)], "trial process killed by SIGKILL (not by loadertop"),
        ([Forked(2, 100), Exited(2, None, 3)], "trial process exited with code 3"),
        ([Forked(2, 100), Failed("ValueError: bad sample"), Exited(2, None, 1)], "ValueError: bad sample"),
    ],
)
def test_a_trial_without_finished_fails_with_the_most_telling_reason(messages: list[Reply], error: str) -> None:
    watch, _, _ = _watch(messages)
    result = watch.result(None, [])
    assert result.status == "failed" and (result.error or "").startswith(error)


@pytest.mark.unit
def test_a_silent_trial_is_hung_once_and_a_paused_one_is_not() -> None:
    watch, _, _ = _watch([Forked(2, 100), Workers((101,))])
    assert not watch.hung(60.0)
    watch.last_activity -= 61
    watch.touch()  # paused: the clock restarts
    assert not watch.hung(60.0)
    watch.last_activity -= 61
    assert watch.hung(60.0) and not watch.hung(60.0)
    assert watch.error == "no batch for 60 s (last: started 1 workers)"


class SilentRunner:
    """A runner link that has said all it will: every get() times out, like a runner stuck after the trial's kill."""

    def get(self, timeout: float) -> Reply | None:
        time.sleep(timeout)
        raise queue.Empty

    def drain_until_exit(self) -> None:
        raise AssertionError("not cancelled")


def _follow_silent(watch: TrialWatch, monkeypatch: pytest.MonkeyPatch) -> tuple[bool, int, float]:
    """Follow `watch` on a silent runner (--trial-timeout 0.2 s, a grace of 0.3 s after the kill): whether follow
    returned, the kills it asked for, and how long it took."""
    from loadertop.core.engine.drive import trial_watch

    monkeypatch.setattr(trial_watch, "EXIT_GRACE_S", 0.3)
    kills: list[None] = []
    running, cancelled = threading.Event(), threading.Event()
    running.set()
    watch.touch()
    start = time.monotonic()
    done = watch.follow(SilentRunner(), 0.2, cancelled, running, lambda: kills.append(None))  # type: ignore[arg-type]
    return done, len(kills), time.monotonic() - start


@pytest.mark.unit
def test_a_killed_trial_whose_exit_never_comes_is_given_up_not_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """CI hung here for 300 s: the trial went silent, was killed, and the runner never said it exited."""
    watch, _, _ = _watch([Forked(2, 100), Workers((101,)), Started((101,), 0.4, 1.5)])
    done, kills, took = _follow_silent(watch, monkeypatch)
    assert done and watch.abandoned and kills == 1  # killed once, then given up, not looped on
    assert 0.5 <= took < 30  # the timeout, then the grace
    assert watch.error == (
        "no batch for 0 s (last: got the first batch); the runner did not report its exit 0 s after SIGKILL"
    )  # the figures are whole seconds (0.2 and 0.3 here)
    assert watch.result(None, []).status == "failed"


@pytest.mark.unit
def test_a_trial_that_said_it_failed_and_never_exits_is_killed_with_its_own_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its Failed set the error first; that must not exempt it from the hang check (it did: hung() looked at the
    error, so such a trial was never killed)."""
    watch, _, _ = _watch([Forked(2, 100), Workers((101,)), Failed("RuntimeError: worker killed by signal: Bus error.")])
    done, kills, _ = _follow_silent(watch, monkeypatch)
    assert done and watch.abandoned and kills == 1
    assert (watch.error or "").startswith("RuntimeError: worker killed by signal: Bus error.; the runner did not")


@pytest.mark.unit
def test_the_runners_temporary_folder_leaves_room_for_multiprocessings_sockets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loadertop.core.engine.drive.runner_link import SOCKET_PATH_MAX, SOCKET_TAIL, runner_tmp

    for base in (tmp_path, tmp_path / ("x" * 80)):  # a short TMPDIR is kept; one too long for a socket is not
        base.mkdir(exist_ok=True)
        monkeypatch.setattr(tempfile, "tempdir", str(base))
        folder = runner_tmp()
        assert len(str(folder)) + SOCKET_TAIL - len("/ltxxxxxxxx") <= SOCKET_PATH_MAX
        assert (folder.parent == base) == (len(str(base)) + SOCKET_TAIL <= SOCKET_PATH_MAX)
        folder.rmdir()
