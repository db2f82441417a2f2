"""REPRO.md from search_repro.py's record: the ruler's reference beside every figure the searches reported, the
picks' accuracy, cost and agreement."""

from __future__ import annotations

import itertools
import statistics
from typing import Any

from loadertop.core.model.results import SweepResult, TrialResult

ACCURACY_TARGET = 0.95
COST_TARGET = 0.30
FIDELITY = (0.93, 1.07)  # a figure reads within this share of the ruler, measured within the same minutes


def reference(entry: dict[str, Any]) -> dict[int, tuple[float, float | None, list[float]]]:
    """Per ladder count: the mean of the ruler's runs over every pass, their relative standard deviation, the runs
    (the top-up's runs of the same count included)."""
    runs: dict[int, list[float]] = {}
    for p in entry["passes"]:
        for n, xs in p["runs"].items():
            runs.setdefault(int(n), []).extend(xs)
    for n, xs in (entry.get("topup") or {}).get("runs", {}).items():
        runs.setdefault(int(n), []).extend(xs)
    out = {}
    for n, xs in sorted(runs.items()):
        mean = statistics.fmean(xs)
        out[n] = (mean, statistics.stdev(xs) / mean if len(xs) > 1 else None, xs)
    return out


def bracket(entry: dict[str, Any], segment: int, n: int) -> float | None:
    """The ruler's mean at `n` over the two passes around a segment (the minutes a loadertop sweep ran in)."""
    around = [p["runs"].get(str(n), p["runs"].get(n)) for p in entry["passes"][segment : segment + 2]]
    xs = [x for r in around if r for x in r]
    return statistics.fmean(xs) if xs else None


def trials_of(run: dict[str, Any]) -> list[TrialResult]:
    return [t for t in SweepResult.from_dict(run["result"]).trials if t.status == "ok" and t.samples_per_s]


def kind(t: TrialResult) -> str:
    """How a trial was measured: decided early, on parked (warm) workers, or in full."""
    return "d" if t.decided else "w" if t.warm else ""


def ratios(entry: dict[str, Any]) -> list[tuple[str, int, float, float]]:
    """(source, workers, figure, figure ÷ bracket) for every figure loadertop reported at a ladder count: the grid's
    trials, each search's trials and its recommendation."""
    out = []
    if "grid" in entry:
        for t in trials_of(entry["grid"]):
            if (ref := bracket(entry, 0, t.config.num_workers)) is not None:
                out.append(("grid", t.config.num_workers, float(t.samples_per_s or 0), (t.samples_per_s or 0) / ref))
    for i, s in enumerate(entry["searches"]):
        seg = s["segment"]
        for t in trials_of(s):
            if (ref := bracket(entry, seg, t.config.num_workers)) is not None:
                label = f"search {i + 1}" + (f" ({kind(t)})" if kind(t) else "")
                out.append((label, t.config.num_workers, float(t.samples_per_s or 0), (t.samples_per_s or 0) / ref))
        rec = SweepResult.from_dict(s["result"]).recommendation
        if rec is not None and (ref := bracket(entry, seg, rec.config.num_workers)) is not None:
            out.append((f"search {i + 1} pick", rec.config.num_workers, rec.samples_per_s, rec.samples_per_s / ref))
    return out


def accuracy(entry: dict[str, Any], pick: int | None) -> float | None:
    ref = reference(entry)
    if pick is None or pick not in ref:
        return None
    return ref[pick][0] / max(m for m, _, _ in ref.values())


def cost(entry: dict[str, Any], search: dict[str, Any]) -> tuple[float | None, float | None]:
    """(÷ the exhaustive loadertop grid's wall, ÷ an exhaustive plain-loop grid's wall over 0-32)."""
    grid = entry.get("exhaustive_wall_s")
    walls: dict[int, list[float]] = {}
    for p in entry["passes"]:
        for n, w in p["run_wall_s"].items():
            walls.setdefault(int(n), []).append(w)
    plain = None
    if walls:
        known = sorted((n, statistics.fmean(ws)) for n, ws in walls.items())
        plain = sum(_interpolate(known, n) for n in range(33))
    return (search["wall_s"] / grid if grid else None, search["wall_s"] / plain if plain else None)


def _interpolate(known: list[tuple[int, float]], n: int) -> float:
    for (a, wa), (b, wb) in itertools.pairwise(known):
        if a <= n <= b:
            return wa + (wb - wa) * (n - a) / (b - a)
    return known[-1][1] if n > known[-1][0] else known[0][1]


def picks_and_sets(entry: dict[str, Any]) -> list[tuple[int | None, list[int], bool]]:
    out = []
    for s in entry["searches"]:
        rec = SweepResult.from_dict(s["result"]).recommendation
        if rec is None:
            out.append((None, [], False))
            continue
        counts = sorted({c.num_workers for c in rec.equivalent} | {rec.config.num_workers})
        out.append((rec.config.num_workers, counts, rec.close))
    return out


def mutual(entry: dict[str, Any]) -> bool:
    rows = picks_and_sets(entry)
    return bool(rows) and all(p is not None and p in sets for p, _, _ in rows for _, sets, _ in rows)


def fmt(x: float | None, spec: str = ".2f") -> str:
    return "–" if x is None else format(x, spec)


def render(state: dict[str, Any]) -> str:
    lines = [
        "# The adaptive search against an independent ruler",
        "",
        "Produced by `python benchmarks/search_repro.py` (its docstring says how); raw numbers in "
        "`repro_results.json`. The ruler is `benchmarks/ruler.py`: a plain training loop that shares no "
        "measurement code with loadertop (a fresh DataLoader per run, `for batch in loader`, `perf_counter`, the "
        "start-up buffer skipped, 10 s timed). Per workload: ruler pass 0, loadertop's grid, search 1, pass 1, "
        "search 2, pass 2, search 3, pass 3; a loadertop figure is divided by the mean of the two passes around it "
        "(the same minutes). Real DataLoaders and worker processes throughout; 2 CPUs, no GPU.",
        "",
        f"accuracy = the ruler's mean at the pick ÷ its best mean (target ≥ {ACCURACY_TARGET}); cost = the search's "
        f"wall time ÷ the exhaustive 0-32 loadertop grid's (target ≤ {COST_TARGET}), and ÷ an exhaustive 0-32 "
        "plain-loop grid's (the ruler's per-run wall, interpolated); mutual = every run's pick lies in every run's "
        f"equivalence set; fidelity = the figures loadertop reported within {FIDELITY[0]}–{FIDELITY[1]} of the ruler. "
        "The ruler's own noise is the median, over its worker counts, of the relative standard deviation of its runs: "
        "where it is wider than the fidelity band, no figure can be checked more closely than it. 'within it' counts "
        "the figures within twice that noise at their count (at least the fidelity band); the median ratio of every "
        "figure to its bracket shows a bias shared by the figures, which noise alone would not move from 1.",
        "",
        "## Summary",
        "",
        "| workload | ruler best | picks | sets | mutual | accuracy | cost (grid / plain loop) | fidelity "
        "| ruler's own noise | within it | median ratio |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for entry in state["workloads"].values():
        if not entry.get("passes") or not entry.get("searches"):
            continue
        ref = reference(entry)
        best = max(ref, key=lambda n: ref[n][0])
        rows = picks_and_sets(entry)
        accs = [accuracy(entry, p) for p, _, _ in rows]
        costs = [cost(entry, s) for s in entry["searches"]]
        rs = ratios(entry)
        inside = sum(1 for *_, r in rs if FIDELITY[0] <= r <= FIDELITY[1])
        in_noise = sum(1 for _, n, _, r in rs if abs(r - 1.0) <= max(FIDELITY[1] - 1.0, 2 * (ref[n][1] or 0.0)))
        noise = statistics.median(sd for _, sd, _ in ref.values() if sd is not None)
        bias = statistics.median(r for *_, r in rs) if rs else None
        sets = " ".join("{" + ", ".join(map(str, s)) + "}" for _, s, _ in rows)
        lines.append(
            f"| {entry['title']} | {best} ({ref[best][0]:.0f}/s) | {', '.join(str(p) for p, _, _ in rows)} "
            f"| {sets} | {'yes' if mutual(entry) else 'no'} "
            f"| {', '.join(fmt(a) for a in accs)} | {', '.join(f'{fmt(g)} / {fmt(p)}' for g, p in costs)} "
            f"| {inside}/{len(rs)} | {noise:.1%} | {in_noise}/{len(rs)} | {fmt(bias)} |"
        )
    lines.append("")
    for key, entry in state["workloads"].items():
        if entry.get("passes"):
            lines += workload_lines(key, entry)
    return "\n".join(lines) + "\n"


def workload_lines(key: str, entry: dict[str, Any]) -> list[str]:
    ref = reference(entry)
    passes = entry["passes"]
    out = [
        f"## {entry['title']} (`{key}`)",
        "",
        f"`{entry['spec']}`, batch {entry['batch_size']}"
        + (f", a {entry['step_ms']:g} ms step" if entry.get("step_ms") else "")
        + f": {entry['why']}.",
        "",
        "- ruler passes: "
        + "; ".join(f"{p['at']} ({p['wall_s']:.0f} s, load {p['load'][0]:.1f}→{p['load'][1]:.1f})" for p in passes),
        f"- exhaustive loadertop grid 0-32: {fmt(entry.get('exhaustive_wall_s'), '.0f')} s, "
        f"{entry.get('exhaustive_from', '–')}",
        "",
        "Each cell: samples/s (÷ the ruler's mean over the two passes around it). d: a trial decided early; w: on "
        "parked workers; ★: the figure the recommendation quotes (the mean of its runs).",
        "",
        "| workers | ruler runs | ruler mean ± sd | grid | "
        + " | ".join(f"search {i + 1}" for i in range(len(entry["searches"])))
        + " |",
        "|---|---|---|---|" + "---|" * len(entry["searches"]),
    ]
    grid = {t.config.num_workers: t for t in trials_of(entry["grid"])} if "grid" in entry else {}
    for n, (mean, sd, xs) in ref.items():
        g = grid.get(n)
        cells = [_cell(entry, 0, g) if g else "–"]
        for s in entry["searches"]:
            ts = [t for t in trials_of(s) if t.config.num_workers == n]
            rec = SweepResult.from_dict(s["result"]).recommendation
            parts = [_cell(entry, s["segment"], t) for t in ts]
            if rec is not None and rec.config.num_workers == n:
                b = bracket(entry, s["segment"], n)
                parts.append(f"★ {rec.samples_per_s:.0f} ({fmt(rec.samples_per_s / b if b else None)})")
            cells.append("; ".join(parts) or "–")
        out.append(f"| {n} | {', '.join(f'{x:.0f}' for x in xs)} | {mean:.0f} ± {fmt(sd and 100 * sd, '.1f')}% "
                   f"| {' | '.join(cells)} |")  # fmt: skip
    out += ["", "Search runs:", "", "| run | pick | equivalence set | accuracy | cost (grid / plain loop) | trials "
            "| wall s | load | code |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for i, (s, (p, sets, close)) in enumerate(zip(entry["searches"], picks_and_sets(entry), strict=True)):
        g, pl = cost(entry, s)
        out.append(
            f"| {i + 1} | {p} | {', '.join(map(str, sets))}{' (close call)' if close else ''} "
            f"| {fmt(accuracy(entry, p))} | {fmt(g)} / {fmt(pl)} | {len(trials_of(s))} | {s['wall_s']:.0f} "
            f"| {s['load'][0]:.1f}→{s['load'][1]:.1f} | {s.get('code', '–')} |"
        )
    out += ["", "Their traces (search notes):", ""]
    for i, s in enumerate(entry["searches"]):
        out.append(f"run {i + 1}:")
        out.append("```")
        out += [n for n in s.get("notices", []) if n.startswith("search (")]
        rec = SweepResult.from_dict(s["result"]).recommendation
        out.append(f"recommendation: {rec.reason if rec else '–'}")
        out += ["```", ""]
    return out


def _cell(entry: dict[str, Any], segment: int, t: TrialResult) -> str:
    b = bracket(entry, segment, t.config.num_workers)
    mark = f" {kind(t)}" if kind(t) else ""
    return f"{t.samples_per_s:.0f} ({fmt((t.samples_per_s or 0) / b if b else None)}){mark}"
