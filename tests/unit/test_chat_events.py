"""ChatEventHandler: the one walk over the chat events the faces share."""

from __future__ import annotations

import typing

from qwenmem_tui.chat import events
from qwenmem_tui.chat.events import ChatEventHandler
from qwenmem_tui.chat.turns import QueryOutcome, TurnKind


def test_every_event_has_its_method() -> None:
    kinds = set(typing.get_args(events.ChatEvent))
    assert kinds == set(events._HANDLERS)
    for name in events._HANDLERS.values():
        assert callable(getattr(ChatEventHandler, name))


async def test_handle_calls_the_method_of_the_event_and_ignores_the_rest() -> None:
    seen: list[object] = []

    class Deltas(ChatEventHandler):
        async def assistant_delta(self, event: events.AssistantDelta) -> None:
            seen.append(event.text)

        async def query_finished(self, event: events.QueryFinished) -> None:
            seen.append(event.outcome.status)

    handler = Deltas()
    for event in (
        events.QueryStarted("hi"),
        events.TurnStarted(TurnKind.USER_QUERY, 0),
        events.ReasoningDelta("hmm"),
        events.AssistantDelta("he"),
        events.AssistantDelta("llo"),
        events.Notice("note"),
        events.QueryFinished(QueryOutcome("ok", None, False, [])),
    ):
        await handler.handle(event)
    assert seen == ["he", "llo", "ok"]
