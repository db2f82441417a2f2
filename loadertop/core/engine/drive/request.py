"""What the user asked of one sweep, as one value: the CLI builds it, a face (headless or the TUI) takes it whole
and builds its Sweep from it, so a new option travels through one type instead of every signature on the way."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from loadertop.core.engine.nodes.node_link import NodeLink
from loadertop.core.model.config import Settings
from loadertop.core.model.results import SweepResult, TrialResult


@dataclass(frozen=True)
class SweepRequest:
    settings: Settings
    out_dir: Path | None = None  # the parent of run folders (None: ~/.cache/loadertop/runs)
    previous: SweepResult | None = None  # --compare RUN: the baseline each row is compared with
    resume: tuple[TrialResult, ...] = ()  # --resume RUN: its finished trials, kept rather than measured again
    json_path: Path | None = None  # --json PATH: the result written there at the end
    csv_path: Path | None = None  # --csv PATH: one row per configuration
    nodes: NodeLink | None = None  # this node's link in a many-node sweep (None: one node)
