"""Compaction's registration: per session the hook that folds old turns into a summary
(first in the loop: it rebuilds the request other hooks then add to), handed memory's
extractor for the blocks it summarises away. Its face: /compact, /pin, /unpin."""

from __future__ import annotations

from typing import TYPE_CHECKING

from qwenmem_tui.features.feature import (
    Feature,
    FeatureContext,
    FeatureKey,
    ItemKind,
    SessionPart,
    SessionWiring,
)

if TYPE_CHECKING:
    from qwenmem_tui.config import Settings
    from qwenmem_tui.features.compaction.hook import CompactionHook

COMPACTION = "compaction"
COMPACTION_HOOK: FeatureKey[CompactionHook] = FeatureKey(COMPACTION)
"""Compaction's part of a session: its hook (/compact, pins, the gauge)."""


def _enabled(settings: Settings) -> bool:
    from qwenmem_tui.features.compaction.settings import COMPACTION_SETTINGS

    return COMPACTION_SETTINGS.of(settings).enabled


def _session(state: object, context: FeatureContext, wiring: SessionWiring) -> SessionPart:
    from qwenmem_tui.features.compaction.hook import CompactionHook  # loaded when a chat is

    assert context.llm is not None  # a runtime with chats has a model client
    hook = CompactionHook(context.llm, context.settings, extract=wiring.extract_block)
    return SessionPart(hooks=(hook,), handle=hook)


FEATURE = Feature(
    COMPACTION,
    settings="qwenmem_tui.features.compaction.settings:COMPACTION_SETTINGS",
    hook_rank=0,  # first: it rebuilds the request from the folded view
    enabled=_enabled,
    session=_session,
    tui="qwenmem_tui.tui.features.compaction.extension:compaction_extension",
    # Its marker is the chat core's `chat.view.COMPACTION_ITEM` (the model view folds
    # at it), named as the feature is; here, how an export shows it.
    items=(ItemKind(COMPACTION, markdown="qwenmem_tui.features.compaction.render:marker_markdown"),),
)
