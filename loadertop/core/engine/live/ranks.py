"""Every rank of a launcher's job (`loadertop attach` on torchrun's pid, `loadertop run -- torchrun ...`): one
LiveSession per rank that publishes, driven on one clock, and per interval the lowest live rank's LiveSnapshot with
`ranks` set: each rank's samples/s, stall, data-wait p95/p99 and workers, the job's samples/s (the ranks' summed),
and the slowest rank named by its data wait, as the sweep's nodes view names the rank that paces the job. Ranks
that publish later (or are restarted) are followed from the next interval on."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

import psutil

from loadertop.core.engine.live.session import LiveSession, open_one, paced
from loadertop.core.engine.live.target import AttachError, command_of, publishing_descendants
from loadertop.core.engine.verdict.leak import LeakConfig
from loadertop.core.engine.wording import num, pct
from loadertop.core.model.jobs import JobInfo
from loadertop.core.model.live import JobRanks, LiveSnapshot, RankRow


def _rank_key(rank: str) -> tuple[int, str]:
    return (int(rank), "") if rank.isdigit() else (1 << 30, rank)


def _wait_key(row: RankRow) -> tuple[float, float]:
    return (row.wait_ms_mean or 0.0, row.wait_ms_p95 or 0.0)


def _ms(value: float | None) -> str:
    return num(value, 1, " ms")


def fold_ranks(launcher_pid: int, snaps: Sequence[LiveSnapshot], ended: dict[int, RankRow]) -> JobRanks:
    """The ranks' rows (live ones from this interval's snapshots, ended ones as they last were), the job's
    samples/s, and the slowest rank: the longest mean data wait per batch (then p95; a worker start-up wait weighs
    in once, where it would be a rank's whole p95) among the running ranks
    that measured one (among all of them once every rank ended); none while fewer than two measured one. Rows are
    keyed by pid (`ended` too): ranks started without RANK (mp.spawn) all read "0"."""
    rows = {
        s.pid: RankRow(
            rank=s.rank,
            pid=s.pid,
            samples_per_s=s.samples_per_s,
            stall_fraction=s.stall_fraction,
            wait_ms_mean=s.wait_ms_mean,
            wait_ms_p95=s.wait_ms_p95,
            wait_ms_p99=s.wait_ms_p99,
            workers=len(s.workers),
            slowest=False,
            ended=s.ended,
        )
        for s in snaps
    }
    rows = {**ended, **rows}
    pool = [r for r in rows.values() if r.ended is None] or list(rows.values())  # all ended: their last figures
    measured = [r for r in pool if r.wait_ms_mean is not None]
    slow = max(measured, key=_wait_key) if len(measured) >= 2 else None  # one rank alone is no slower than any
    ordered = tuple(
        replace(r, slowest=slow is not None and r.pid == slow.pid)
        for r in sorted(rows.values(), key=lambda r: (_rank_key(r.rank), r.pid))
    )
    rates = [r.samples_per_s for r in pool if r.samples_per_s is not None]
    return JobRanks(
        launcher_pid=launcher_pid,
        ranks=ordered,
        samples_per_s=sum(rates) if rates else None,
        slowest_rank=None if slow is None else slow.rank,
        pacing=_pacing(slow, measured),
    )


def _stall(row: RankRow) -> str:
    return "" if row.stall_fraction is None else f", stall {pct(row.stall_fraction)}"


def _pacing(slow: RankRow | None, measured: list[RankRow]) -> str:
    if not measured:
        return "no rank took a step in this interval"
    if slow is None:
        (only,) = measured
        return f"only rank {only.rank} took steps in this interval ({_wait(only)}): no other rank to compare"
    fast = min((r for r in measured if r.pid != slow.pid), key=_wait_key)
    return f"rank {slow.rank} waits longest for its data: {_wait(slow)}; the least, rank {fast.rank}: {_wait(fast)}"


def _wait(row: RankRow) -> str:
    return f"{_ms(row.wait_ms_mean)} a batch, p95 {_ms(row.wait_ms_p95)}{_stall(row)}"


class RankSessions:
    """See the module docstring. Offers what a LiveSession offers the faces (pid, command, watched, hostname,
    rank, interval, snapshots(), close()); `pid` is the launcher's."""

    def __init__(
        self,
        launcher_pid: int,
        ranks: Sequence[JobInfo],
        *,
        interval: float = 2.0,
        leak: LeakConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.pid = launcher_pid
        self.interval = interval
        self._leak = leak
        self._clock = clock
        self._t0 = clock()
        try:
            self.command = command_of(psutil.Process(launcher_pid))
        except psutil.Error:
            self.command = f"pid {launcher_pid}"
        self._sessions: dict[int, LiveSession] = {}
        self._seen: set[int] = set()
        self._ended: dict[int, RankRow] = {}
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._add(ranks)
        if not self._sessions:
            raise AttachError(f"pid {launcher_pid}: its ranks exited before loadertop could attach")
        first = self._lead()
        self.hostname = first.hostname
        self.rank = "all"
        self.watched = True

    def _lead(self) -> LiveSession:
        return min(self._sessions.values(), key=lambda s: _rank_key(s.rank))

    def _add(self, ranks: Sequence[JobInfo]) -> None:
        for job in ranks:
            if job.pid in self._seen:
                continue
            self._seen.add(job.pid)
            session = open_one(job, interval=self.interval, leak=self._leak)
            if session is not None:
                with self._lock:
                    if self._closed.is_set():
                        session.close()
                        return
                    self._sessions[job.pid] = session

    def _now(self) -> float:
        return self._clock() - self._t0

    def snapshots(self) -> Iterator[LiveSnapshot]:
        """One snapshot per interval (blocking): the lowest live rank's, with `ranks` set; the last one has `ended`
        set (every rank ended). Returns early after close()."""
        return paced(self.interval, self._closed, self._now, self._pump, self._build, self.close)

    def _pump(self) -> None:
        for session in list(self._sessions.values()):
            session.pump()

    def _build(self) -> LiveSnapshot:
        snaps = {pid: session.build() for pid, session in list(self._sessions.items())}
        for pid, snap in snaps.items():
            if snap.ended is not None:
                self._ended[pid] = fold_ranks(self.pid, [snap], {}).ranks[0]
                with self._lock:
                    session = self._sessions.pop(pid)
                session.close()
        self._add(publishing_descendants(self.pid))  # ranks that published since (they show from the next one)
        live = [s for s in snaps.values() if s.ended is None]
        view = fold_ranks(self.pid, live, self._ended)
        shown = min(live or list(snaps.values()), key=lambda s: _rank_key(s.rank))
        ended = None if self._sessions else "every rank exited"
        return replace(shown, ranks=view, ended=ended)

    def close(self) -> None:
        """Idempotent and thread-safe: closes every rank's session."""
        with self._lock:
            if self._closed.is_set():
                return
            self._closed.set()
            sessions = list(self._sessions.values())
        for session in sessions:
            session.close()

    def __enter__(self) -> RankSessions:
        return self

    def __exit__(self, *_exc_info: object) -> None:
        self.close()
