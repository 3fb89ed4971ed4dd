"""The recap's settings: two keys of `[general]`, where the contract (§2) puts them."""

from __future__ import annotations

from pydantic import Field

from qwenmem_tui.config import Section, SettingsSection


class RecapSettings(Section):
    show_session_recap: bool = False  # the away recap is opt-in
    session_recap_away_threshold_minutes: float = Field(default=5.0, gt=0)


RECAP_SETTINGS = SettingsSection("general", RecapSettings, shared=True)
