"""Session titles' registration: per session the hook asking the fast model for a title
after the first exchange (last in the loop: it only reads the finished exchange)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from qwenmem_tui.features.feature import (
    Feature,
    FeatureContext,
    FeatureKey,
    SessionPart,
    SessionWiring,
)

if TYPE_CHECKING:
    from qwenmem_tui.config import Settings
    from qwenmem_tui.features.titles.hook import SessionTitleHook

TITLES = "titles"
TITLES_HOOK: FeatureKey[SessionTitleHook] = FeatureKey(TITLES)


def _enabled(settings: Settings) -> bool:
    # A background model call per session, like extraction's per turn: a setup that
    # turns those off (`extraction = false`: no model calls but the user's) gets none.
    from qwenmem_tui.features.titles.settings import TITLES_SETTINGS
    from qwenmem_tui.memory.settings import MEMORY_SETTINGS

    return TITLES_SETTINGS.of(settings).session_titles and MEMORY_SETTINGS.of(settings).extraction


def _session(state: object, context: FeatureContext, wiring: SessionWiring) -> SessionPart:
    from qwenmem_tui.features.titles.hook import SessionTitleHook  # loaded when a chat is

    hook = SessionTitleHook()
    return SessionPart(hooks=(hook,), handle=hook, drain=hook.drain)


FEATURE = Feature(
    TITLES,
    settings="qwenmem_tui.features.titles.settings:TITLES_SETTINGS",
    hook_rank=30,
    enabled=_enabled,
    session=_session,
    tui="qwenmem_tui.tui.features.titles.extension:titles_extension",
)
