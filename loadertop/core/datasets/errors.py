"""What a bad dataset or consumer spec raises: one line, exit code 2."""

from __future__ import annotations


class SpecError(ValueError):
    """The dataset or consumer spec cannot give what is needed (exit code 2)."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


def one_line(text: str) -> str:
    """Exception texts may span lines (a SyntaxError, a chained message): the CLI promises one."""
    return " ".join(str(text).split())
