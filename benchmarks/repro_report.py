"""REPRO.md from search_repro.py's record: per workload, each search run's pick, equivalent set, accuracy and cost,
and whether the picks are mutually equivalent; a summary against issue 18's targets."""

from __future__ import annotations

from typing import Any

from repro_score import ACCURACY_TARGET, COST_TARGET, workload_score
from search_reference import fmt, reference_rows


def render(state: dict[str, Any]) -> str:
    lines = [
        "# The adaptive search, run again and again: accuracy, cost and reproducibility",
        "",
        "Produced by `python benchmarks/search_repro.py` (its docstring says how); raw numbers in "
        "`repro_results.json`. Real DataLoaders and worker processes throughout. accuracy = the reference mean at a "
        f"run's pick ÷ the best reference mean (target ≥ {ACCURACY_TARGET}); cost = the run's wall time ÷ the "
        f"exhaustive grid's (target ≤ {COST_TARGET}); mutual = every run's pick lies in every run's `equivalent` set.",
        "",
        *[f"- {note}" for note in state.get("notes", [])],
        "",
        "## Sessions",
        "",
        *[f"- {s['started']} → {s.get('finished', '(cut short)')}, search code {s['code']}" for s in
          state.get("sessions", [])],
        "",
        "## Summary",
        "",
        "| workload | picks (workers) | mutual | worst accuracy | worst cost | targets met |",
        "|---|---|---|---|---|---|",
    ]  # fmt: skip
    scores = {key: workload_score(e) for key, e in state["workloads"].items() if e.get("searches")}
    for key, s in scores.items():
        entry = state["workloads"][key]
        picks = ", ".join(str(r["pick"]) for r in s["runs"])
        lines.append(
            f"| {entry['title']} | {picks} | {'yes' if s['mutual'] else 'no'} | **{fmt(s['worst_accuracy'])}** "
            f"| **{fmt(s['worst_cost'])}** | {'yes' if s['meets_targets'] else 'no'} |"
        )
    lines.append("")
    for key, entry in state["workloads"].items():
        lines += section(entry, scores.get(key))
    return "\n".join(lines) + "\n"


def section(entry: dict[str, Any], score: dict[str, Any] | None) -> list[str]:
    grid, ref = entry.get("grid"), entry.get("reference")
    out = [f"## {entry['title']}", "", f"`{entry['spec']}`, batch {entry['batch_size']}: {entry['why']}.", ""]
    if grid:
        g_load = grid.get("load") or [0, 0]
        out.append(
            f"- grid: {len(grid['trials'])} trials in {grid['bench_wall_s']:.0f} s (load {g_load[0]:.1f}→"
            f"{g_load[1]:.1f}), {entry.get('grid_from', '')}; trial length {grid['settings']['trial_seconds']:g} s"
        )
    if ref:
        load = ref.get("load") or [0, 0]
        out += [
            f"- reference with repeats: best {ref['best_n']} workers ({fmt(ref['best'], '.0f')}/s), in "
            f"{ref['wall_s']:.0f} s (load {load[0]:.1f}→{load[1]:.1f})",
            "",
            *reference_rows(relabel(ref)),
            "",
        ]
    if score:
        out += [
            f"Search runs (mutual: {'yes' if score['mutual'] else 'no'}"
            + (f"; pick i not in run j's set for (i, j) = {score['misses']}" if score["misses"] else "")
            + "):",
            "",
            "| run | pick | equivalent set | close call | accuracy (from) | cost | trials (repeats) | wall s | load "
            "| code |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for i, (r, s) in enumerate(zip(score["runs"], entry["searches"], strict=True)):
            load = r["load"] or [0, 0]
            out.append(
                f"| {i + 1} | {r['pick']} | {', '.join(map(str, r['equivalent']))} | {'yes' if r['close'] else 'no'} "
                f"| **{fmt(r['accuracy'])}** ({r['accuracy_from'] or '–'}) | **{fmt(r['cost'])}** "
                f"| {r['trials']} ({r['repeats']}) | {r['wall_s']:.0f} | {load[0]:.1f}→{load[1]:.1f} "
                f"| {s.get('code', '?')} |"
            )
        out.append("")
    out += earlier_lines(entry)
    return out


def earlier_lines(entry: dict[str, Any]) -> list[str]:
    """Search runs set aside by --fresh (an older search code), one line per set, against the same reference."""
    lines = []
    for searches in entry.get("earlier", []):
        s = workload_score({**entry, "searches": searches})
        codes = ", ".join(sorted({str(x.get("code", "?")) for x in searches}))
        lines.append(
            f"- earlier runs (search code {codes}): picks {', '.join(str(r['pick']) for r in s['runs'])}; mutual "
            f"{'yes' if s['mutual'] else 'no'}; accuracy {', '.join(fmt(r['accuracy']) for r in s['runs'])}; cost "
            f"{', '.join(fmt(r['cost']) for r in s['runs'])}"
        )
    return [*lines, ""] if lines else []


def relabel(ref: dict[str, Any]) -> dict[str, Any]:
    """A reference reused from search_bench.py marks the pick of the search it was measured with: say so."""
    rows = [
        {**row, "picks": ["an earlier search's pick" if p == "adaptive pick" else p for p in row["picks"]]}
        for row in ref["candidates"]
    ]
    return {**ref, "candidates": rows}
