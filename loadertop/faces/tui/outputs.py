"""Files the app writes on request: exports (`e`), the recommended snippet (`y`), and --json/--csv."""

from __future__ import annotations

from pathlib import Path

from loadertop.core.engine import rate
from loadertop.core.model.results import Recommendation, SweepResult

EXPORT_NAMES = {"json": "result.json", "csv": "results.csv", "markdown": "results.md"}


def export_all(result: SweepResult, run_dir: Path) -> list[Path]:
    """JSON, CSV and Markdown into the run folder, through the engine's writers (the headless face's too)."""
    from loadertop.core import engine as writers  # looked up at call time: tests substitute the writers

    run_dir.mkdir(parents=True, exist_ok=True)
    paths = {kind: run_dir / name for kind, name in EXPORT_NAMES.items()}
    writers.write_json(result, paths["json"])
    writers.write_csv(result, paths["csv"])
    writers.write_markdown(result, paths["markdown"])
    return list(paths.values())


def write_requested(result: SweepResult, json_path: Path | None, csv_path: Path | None) -> dict[Path, str | None]:
    """--json/--csv with the engine's writers, as the headless face writes them: path -> None, or the error."""
    from loadertop.core import engine as writers  # looked up at call time: tests substitute the writers

    done: dict[Path, str | None] = {}
    for path, write in ((json_path, writers.write_json), (csv_path, writers.write_csv)):
        if path is not None:
            try:
                write(result, path)
                done[path] = None
            except OSError as error:  # the folder went away or filled up during the sweep
                done[path] = error.strerror or str(error)
    return done


def write_snippet(rec: Recommendation, run_dir: Path) -> Path:
    """snippet.py: the DataLoader line with the reason as a comment, ready to paste."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "snippet.py"
    body = rec.snippet.strip()
    if "DataLoader(" in body and "import" not in body:
        head = body.split("DataLoader(", 1)[0]
        if "=" not in head:
            body = f"loader = {body}"
        body = f"from torch.utils.data import DataLoader\n\n{body}"
    lines = [
        f"# Recommended by loadertop: {rec.config.label()}, {rate(rec.samples_per_s)} samples/s measured.",
        *(f"# {line}" for line in rec.reason.splitlines()),
        body,
    ]
    path.write_text("\n".join(lines) + "\n")
    return path
