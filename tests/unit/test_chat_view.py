"""The model view (qwenmem_tui/chat/view.py): one reading of the stored items for the
chat loop, the daemon and the features."""

from __future__ import annotations

from qwenmem_tui.chat.view import (
    COMPACTION_ITEM,
    compacted_view,
    content_text,
    model_messages,
    view_items,
)
from qwenmem_tui.storage import Item

PROMPT = "You are a test."


def test_content_text_reads_strings_and_text_parts_only() -> None:
    assert content_text("plain") == "plain"
    parts = [
        {"type": "text", "text": "first"},
        {"type": "image_url", "image_url": {"url": "data:..."}},
        {"type": "text", "text": "second"},
        "not a part",
    ]
    assert content_text(parts) == "first\nsecond"
    assert content_text(None) == "" and content_text(42) == ""


def item(id_: int, type_: str, content: str, message: dict | None, **meta: object) -> Item:
    return Item(id_, "s", type_, content, message=message, meta=dict(meta), created_at=float(id_))


def user(id_: int, text: str, **meta: object) -> Item:
    return item(id_, "user", text, {"role": "user", "content": text}, **meta)


def assistant(id_: int, text: str, **extra: object) -> Item:
    return item(id_, "assistant", text, {"role": "assistant", "content": text, **extra})


HISTORY = [
    user(1, "before the clear"),
    item(2, "info", "Context cleared", None, reset=True),
    user(3, "Actually, use port 8443.", pinned=True),
    assistant(4, "", tool_calls=[{"id": "c1", "type": "function",
                                  "function": {"name": "read_file", "arguments": "{}"}}]),
    item(5, "tool", "file text", {"role": "tool", "tool_call_id": "c1", "content": "file text"}),
    assistant(6, "Done.", reasoning_content="hidden thoughts"),
    item(7, COMPACTION_ITEM, "⋯ 4 older messages summarized", None,
         summary="Port chosen.", decisions=["use 8443"], count=4, total=4,
         cut_item_id=6, pinned_ids=[]),
    user(8, "And now?"),
    assistant(9, "", tool_calls=[{"id": "c2", "type": "function",
                                  "function": {"name": "list_directory", "arguments": "{}"}}]),
    assistant(10, "Still 8443.", reasoning_content="more hidden thoughts"),
]


def test_the_view_folds_clear_compaction_and_unanswered_calls() -> None:
    assert [i.id for i in view_items(HISTORY)] == [3, 4, 5, 6, 7, 8, 9, 10]
    summary, kept = compacted_view(view_items(HISTORY))
    assert summary is not None and "Port chosen." in summary["content"]
    assert [i.id for i in kept] == [3, 8, 9, 10]  # the pinned message carried as text
    messages = model_messages(HISTORY, PROMPT)
    assert messages[0] == {"role": "system", "content": PROMPT}
    assert messages[1] == summary
    assert messages[2:] == [
        {"role": "user", "content": "Actually, use port 8443."},
        {"role": "user", "content": "And now?"},
        # The call without results is left out (it had no text to keep); reasoning
        # stays in the database, never in a request.
        {"role": "assistant", "content": "Still 8443."},
    ]
