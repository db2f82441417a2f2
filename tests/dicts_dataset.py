"""A map-style dataset over a Python list of dicts: every read touches refcounts, so forked worker processes copy
the pages they read (copy-on-read) while thread workers share the one list. Used by tests/test_worker_method.py."""

from __future__ import annotations

from typing import Any


class Dicts:
    def __init__(self, n: int) -> None:
        self.rows = [{"id": i, "label": i % 10, "name": f"sample-{i}", "score": i * 0.5} for i in range(n)]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> Any:
        import torch

        row = self.rows[index]
        return torch.tensor([float(row["id"]), row["score"]]), row["label"]


def build(n: str = "300000") -> Dicts:
    return Dicts(int(n))
