"""Compaction's settings: the `[compaction]` table."""

from __future__ import annotations

from pydantic import Field

from qwenmem_tui.config import Section, SettingsSection


class CompactionSettings(Section):
    enabled: bool = True
    threshold: float = Field(default=0.7, gt=0, le=1)
    keep_recent_turns: int = Field(default=6, ge=0)


COMPACTION_SETTINGS = SettingsSection("compaction", CompactionSettings)
