"""loadertop: find the fastest PyTorch DataLoader configuration on the machine where you train."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from loadertop.core.engine import sweep as sweep


def __getattr__(name: str) -> Any:
    # `import loadertop` stays cheap (the CLI's --help must not pay for torch).
    if name == "sweep":
        from loadertop.core.engine import sweep

        return sweep
    raise AttributeError(name)
