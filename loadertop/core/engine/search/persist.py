"""The adaptive search's epoch phase: when the epoch boundary costs more than the noise, persistent workers measured.

Without persistent_workers every epoch restarts the workers, and each fresh worker pays its start-up again: on short
epochs that restart can outweigh what the workers save, and the climb then reads fewer workers (or none) as best. When
a measured worker count's restart takes a share of its epoch beyond the noise band (verdict/epoch.py), the same worker
count with persistent_workers=True is measured, unasked, so the choice weighs the loader the user would set. Its trial
runs whole epochs as every trial on short epochs does (trial/measure.py): each block one epoch, its boundary inside.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from loadertop.core.engine.search.state import SearchState
from loadertop.core.engine.verdict.band import noise_band
from loadertop.core.engine.verdict.epoch import restart_phrase, worth_persisting
from loadertop.core.engine.wording import pct
from loadertop.core.model.config import TrialConfig
from loadertop.core.model.results import TrialResult


def persistent_twins(st: SearchState) -> list[tuple[TrialResult, TrialConfig]]:
    """Each finished climb point whose restart is worth avoiding, with its persistent twin, by worker count: the
    twins not measured yet."""
    out = []
    for t in st.curve():
        twin = dataclasses.replace(t.config, persistent_workers=True)
        if worth_persisting(t, st.tol) and not st.measured(twin):
            out.append((t, twin))
    return out


def persist(st: SearchState) -> Iterator[TrialConfig]:
    """The persistent twins of the worker counts whose epoch restart is beyond the noise band, one per `yield`."""
    for t, twin in persistent_twins(st):
        band = pct(noise_band(st.tol, t))
        st.note(
            "epoch",
            f"{restart_phrase(t)}, beyond the {band} noise band: measure {twin.label()}, whose workers live "
            "from epoch to epoch",
            twin.label(),
        )
        yield twin
