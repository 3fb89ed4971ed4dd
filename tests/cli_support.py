"""Types for the in-process CLI runs (the `cli_run` fixture is in conftest; a module, so
tests can import these)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class CliResult:
    """What a `qwenmem` command did: the fields of a finished subprocess."""

    returncode: int
    stdout: str
    stderr: str


CliRunner = Callable[..., CliResult]
"""The `cli_run` fixture: `cli_run(*args, home=, cwd=, stdin=None, env=None)`."""
