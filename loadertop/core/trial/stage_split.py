"""The sample's stages from the rounds: the hooked stages as their hooks timed them, the rest of the sample's time
split over the profile's callees in the profile's proportions, all scaled to the plain (unhooked) time, then the
collate.

The hooks' own cost (a few µs a call, read on the CPU clock) is taken out of the stages in proportion; the profile
gives shares, never totals, so its overhead (reported) does not inflate a stage.
"""

from __future__ import annotations

from loadertop.core.model.stages import LibraryShare, Stage
from loadertop.core.trial.stage_hooks import HookSet
from loadertop.core.trial.stage_profile import Call, Split
from loadertop.core.trial.stage_rounds import Rounds

MIN_SHARE = 0.03  # a callee under this share of the sample's time is folded into "other calls"
MIN_LIBRARY_SHARE = 0.01


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator > 0 else 1.0


def hooked_stages(rounds: Rounds, hooks: HookSet) -> list[Stage]:
    """Each hook's time per sample, over the samples timed through the hooks."""
    samples = max(1, rounds.totals["hooked"].samples)
    return [
        Stage(t.name, t.kind, "sample", t.wall_s / samples, t.cpu_s / samples, f"{t.calls} calls timed by a hook")
        for t in hooks.tallies
        if t.calls
    ]


def capped(walls: list[float], cpus: list[float]) -> list[float]:
    """Each stage's CPU at most its wall time (one thread: torch runs one, as in a worker), what is over handed to
    the stages under their wall time in proportion to their room. The CPU clock's profile costs more per call than
    the wall clock's, so it leans further towards call-heavy Python code: this keeps that lean from showing a stage
    using more CPU than time."""
    for _ in range(len(cpus)):
        over = sum(max(0.0, c - w) for c, w in zip(cpus, walls, strict=True))
        room = [max(0.0, w - c) for c, w in zip(cpus, walls, strict=True)]
        if over <= 1e-12 or sum(room) <= 0:
            break
        cpus = [min(c, w) + over * r / sum(room) for c, w, r in zip(cpus, walls, room, strict=True)]
    return cpus


def profiled_stages(split: Split | None, rest_wall: float, rest_cpu: float, whole: float) -> list[Stage]:
    """The sample's time outside the hooks, split over the entry's callees by the profile's shares; callees under
    MIN_SHARE of the `whole` sample's time folded into one "other calls" stage."""
    if split is None:
        return [Stage("dataset[i] (built-in: not profiled)", "call", "sample", rest_wall, rest_cpu)]
    wall_total = sum(c.wall_s for c in split.calls)
    cpu_total = sum(c.cpu_s for c in split.calls)
    walls = [rest_wall * _share(c.wall_s, wall_total) for c in split.calls]
    shares = [_share(c.cpu_s, cpu_total) if cpu_total > 0 else _share(c.wall_s, wall_total) for c in split.calls]
    cpus = capped(walls, [rest_cpu * share for share in shares])
    kept: list[Stage] = []
    folded: list[tuple[Call, float, float]] = []
    for call, wall, cpu in zip(split.calls, walls, cpus, strict=True):
        if _ratio(wall, whole) < MIN_SHARE and call.kind != "own":
            folded.append((call, wall, cpu))
        else:
            kept.append(Stage(call.name, call.kind, "sample", wall, cpu, f"profiled: {call.library}"))
    if folded:
        libraries = ", ".join(dict.fromkeys(call.library for call, _, _ in folded))
        kept.append(Stage(f"other calls ({len(folded)})", "call", "sample", sum(w for _, w, _ in folded),
                          sum(c for _, _, c in folded), f"profiled: {libraries}"))  # fmt: skip
    return kept


def _share(part: float, total: float) -> float:
    return part / total if total > 0 else 0.0


def sample_stages(rounds: Rounds, hooks: HookSet, split: Split | None) -> list[Stage]:
    """Every stage inside the 0-worker time: hooked, profiled, collate; per sample, the hooks' cost taken out."""
    plain_cpu = rounds.totals["plain"].per_sample()[1]
    hooked_wall, hooked_cpu = rounds.totals["hooked"].per_sample()
    hooked = hooked_stages(rounds, hooks)
    rest_wall = max(0.0, hooked_wall - sum(s.wall_s or 0.0 for s in hooked))
    rest_cpu = max(0.0, hooked_cpu - sum(s.cpu_s or 0.0 for s in hooked))
    stages = hooked + profiled_stages(split, rest_wall, rest_cpu, hooked_wall)
    # The hooks' cost is CPU work, read on the CPU clock (the wall clock of a busy machine is too noisy for a few
    # µs a call); it can only slow a sample down.
    scale = min(1.0, _ratio(plain_cpu, hooked_cpu))
    scaled = [
        Stage(s.name, s.kind, s.part, (s.wall_s or 0.0) * scale, (s.cpu_s or 0.0) * scale, s.note) for s in stages
    ]
    collate_wall, collate_cpu = rounds.totals["collate"].per_sample()
    if rounds.totals["collate"].samples:
        scaled.append(Stage("collate", "collate", "sample", collate_wall, collate_cpu, "the dataset's collate_fn"))
    return scaled


def overheads(rounds: Rounds, hooks: HookSet) -> tuple[float | None, float | None]:
    """(the hooks', the profiler's) cost: the instrumented CPU time per sample over the plain one, minus 1."""
    plain = rounds.totals["plain"].per_sample()[1]
    hooked = rounds.totals["hooked"].per_sample()[1]
    profiled = rounds.totals["profiled"].per_sample()[1]
    return (_ratio(hooked, plain) - 1.0 if hooks.sites else None), _ratio(profiled, plain) - 1.0


def decoded_bytes(hooks: HookSet) -> float | None:
    """What the hooked loader returned per call (a decoded image's bytes); None without a loader hook."""
    loaders = [t for t in hooks.tallies if t.kind == "read+decode" and t.calls and t.out_bytes]
    return sum(t.out_bytes / t.calls for t in loaders) if loaders else None


def libraries(split: Split | None) -> tuple[LibraryShare, ...]:
    if split is None:
        return ()
    return tuple(LibraryShare(name, share) for name, share in split.libraries if share >= MIN_LIBRARY_SHARE)
