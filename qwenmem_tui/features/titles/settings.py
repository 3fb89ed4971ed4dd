"""Session titles' setting: `session_titles`, a key of `[llm]` where the README puts it."""

from __future__ import annotations

from qwenmem_tui.config import Section, SettingsSection


class TitlesSettings(Section):
    # After a session's first exchange, a short title from the fast model (a side call;
    # only where memory.extraction makes background calls too).
    session_titles: bool = True


TITLES_SETTINGS = SettingsSection("llm", TitlesSettings, shared=True)
