"""What a child process of the suite needs to run this checkout's qwenmem.

The shared virtualenv's editable install points at one checkout; a child started with
an environment built from scratch (so the developer's settings stay out) would import
that checkout's code, not the one under test, from any cwd but the repository root.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def checkout_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` plus the ``PYTHONPATH`` that makes a child import this checkout first."""
    return {**env, "PYTHONPATH": str(REPO_ROOT)}
