"""The window of a long session held in memory (chat/window.py): bounded, and the model
view computed from it is the one computed from every stored item, after each new item
and after a resume read from the database."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from qwenmem_tui.chat.view import COMPACTION_ITEM, model_messages, view_items
from qwenmem_tui.chat.window import Window, load_window, trim, view_start
from qwenmem_tui.storage import Database, Item, SessionStore

PROMPT = "system prompt"
TAIL = 6

# One step of a conversation: a message (pinned or not), a tool exchange, a /clear, or a
# compaction that cuts `back` items before the end and pins some messages before the cut.
steps = st.one_of(
    st.tuples(st.just("message"), st.booleans()),
    st.tuples(st.just("tools"), st.integers(1, 3)),
    st.tuples(st.just("reset"), st.none()),
    st.tuples(st.just("compact"), st.tuples(st.integers(0, 8), st.lists(st.integers(0, 30), max_size=3))),
)


def conversation(plan: list[tuple[str, object]]) -> list[Item]:
    """The items such a conversation stores, ids 1, 2, ... in order."""
    items: list[Item] = []
    ids = itertools.count(1)

    def add(type_: str, message: dict | None = None, **meta: object) -> None:
        items.append(Item(next(ids), "s", type_, str(len(items)), message, dict(meta)))

    for kind, arg in plan:
        if kind == "message":
            role = "user" if len(items) % 2 == 0 else "assistant"
            add(role, {"role": role, "content": f"{role} {len(items)}"}, **({"pinned": True} if arg else {}))
        elif kind == "tools":
            calls = [{"id": f"c{len(items)}-{k}", "type": "function",
                      "function": {"name": "t", "arguments": "{}"}} for k in range(int(arg))]  # type: ignore[call-overload]
            add("assistant", {"role": "assistant", "content": "", "tool_calls": calls})
            for call in calls:
                add("tool", {"role": "tool", "tool_call_id": call["id"], "content": "out"})
        elif kind == "reset":
            add("info", None, reset=True)
        else:
            back, pins = arg  # type: ignore[misc]
            messages = [i for i in view_items(items) if i.message is not None]
            if len(messages) <= back:
                continue
            cut = messages[-back - 1].id if back else messages[-1].id
            before = [i.id for i in messages if i.id is not None and cut is not None and i.id <= cut]
            pinned = sorted({before[p % len(before)] for p in pins}) if before else []
            add(COMPACTION_ITEM, None, cut_item_id=cut, pinned_ids=pinned, summary="s", count=1)
    return items


@settings(max_examples=150, derandomize=True, deadline=None)
@given(st.lists(steps, max_size=40))
def test_the_window_keeps_the_model_view_and_stays_bounded(plan: list[tuple[str, object]]) -> None:
    items = conversation(plan)
    window = Window()
    for count, item in enumerate(items, 1):
        window = trim(Window([*window.items, item], window.carried, window.earlier), TAIL)
        whole = items[:count]
        assert model_messages(window.view_source(), PROMPT) == model_messages(whole, PROMPT)
        # Contiguous newest items, counted from the start; nothing held that is not needed.
        assert window.items == whole[window.earlier :]
        assert len(window.items) <= max(TAIL, count - view_start(whole))


@settings(max_examples=40, derandomize=True, deadline=None)
@given(st.lists(steps, min_size=5, max_size=40))
def test_a_resumed_window_read_from_the_database_is_the_one_held(
    tmp_path_factory: object, plan: list[tuple[str, object]]
) -> None:
    items = conversation(plan)
    held = Window()
    for item in items:
        held = trim(Window([*held.items, item], held.carried, held.earlier), TAIL)

    async def resume(path: Path) -> Window:
        db = await Database.open(path)
        try:
            store = SessionStore(db)
            info = await store.create_session("project")
            for item in items:
                await store.add_item(Item(None, info.id, item.type, item.content, item.message, item.meta))
            return await load_window(store, info.id, TAIL)
        finally:
            await db.close()

    path = tmp_path_factory.mktemp("window") / "qwenmem.db"  # type: ignore[attr-defined]
    loaded = asyncio.run(resume(path))
    assert model_messages(loaded.view_source(), PROMPT) == model_messages(items, PROMPT)
    assert loaded.earlier + len(loaded.items) == len(items)
    assert [i.content for i in loaded.items] == [i.content for i in items[loaded.earlier :]]
    assert len(loaded.items) <= max(TAIL, len(items) - view_start(items))
