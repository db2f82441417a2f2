"""A dataset file whose import fails (a missing dependency)."""

import nonexistent_dependency_xyz  # noqa: F401


def make() -> None:
    return None
