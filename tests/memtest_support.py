"""Helpers shared by the memory tests, SQLite and PostgreSQL (a module, so tests can import it)."""

from __future__ import annotations

from qwenmem_tui.config import Settings

T0 = 1_800_000_000.0
PROJECT_A = "/work/alpha-project"
PROJECT_B = "/work/beta-project"


class Clock:
    """A hand-driven clock: TTL tests move time, nothing sleeps."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def make_settings(user: str = "ana", **memory: object) -> Settings:
    return Settings.model_validate({"general": {"user": user}, "memory": memory})
