from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """A parent folder for run folders, so tests never write to ~/.cache."""
    path = tmp_path / "runs"
    path.mkdir()
    return path


@pytest.fixture
def no_leftovers() -> Iterator[None]:
    """Fail the test if it leaves any child process of the test process behind."""
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    yield
    psutil.wait_procs([p for p in me.children(recursive=True) if p.pid not in before], timeout=3)
    left = [p for p in me.children(recursive=True) if p.pid not in before and p.status() != psutil.STATUS_ZOMBIE]
    assert not left, f"processes left behind: {[(p.pid, p.name()) for p in left]}"
