"""A trial's status: its own module, so that the records of one trial (results.py) and of one node's share of it
(nodes.py) both name it without importing each other."""

from __future__ import annotations

from typing import Literal

Status = Literal["ok", "failed", "skipped"]
