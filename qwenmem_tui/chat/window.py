"""The part of a long session held in memory: what the model view reads and the newest
items. Everything else stays in the database and is read when asked for (scrolling
back, export, an ACP client loading the session).

Why: a session held whole grew by ~15 MB per 1,000 turns (issue 41's soak), and every
resume read the whole transcript. The model view never needs more than the items after
the last compaction cut (or /clear) plus the pinned messages it carries, so that, with
a tail of the newest items for the faces, is the window.

`trim` is a pure function of the window; `load_window` reads the same window from the
database on resume.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from qwenmem_tui.chat.view import COMPACTION_ITEM, last_marker

if TYPE_CHECKING:
    from collections.abc import Sequence

    from qwenmem_tui.storage.sessions import Item, SessionStore

WINDOW_ITEMS = 200
"""The newest items kept in memory beyond what the model view needs: more than the TUI
mounts at once (chat_log.PAGE_SIZE × MAX_PAGES), enough for the recap's recent turns."""


@dataclass
class Window:
    """A session's items in memory.

    `items` are the newest stored items, contiguous; `earlier` counts the stored items
    before them. `carried` are pinned messages from before `items` that the compacted
    model view still carries (as text) after the cut.
    """

    items: list[Item] = field(default_factory=list)
    carried: list[Item] = field(default_factory=list)
    earlier: int = 0

    def view_source(self) -> list[Item]:
        """The items the model view is computed from (`chat.view.model_messages`)."""
        return [*self.carried, *self.items]


def _last_reset(items: Sequence[Item]) -> int | None:
    return next((i for i in range(len(items) - 1, -1, -1) if items[i].meta.get("reset")), None)


def view_start(items: Sequence[Item]) -> int:
    """The index of the first item the model view reads verbatim: after the last /clear
    marker, and after the cut of the last compaction marker past it."""
    reset = _last_reset(items)
    base = 0 if reset is None else reset + 1
    marker = last_marker(items[base:])
    if marker is None:
        return base
    cut = int(marker.meta["cut_item_id"])
    for index in range(base, len(items)):
        item_id = items[index].id
        if item_id is None or item_id > cut:
            return index
    return len(items)


def _pinned(item: Item, pinned_ids: set[int]) -> bool:
    return item.message is not None and (bool(item.meta.get("pinned")) or item.id in pinned_ids)


def trim(window: Window, tail: int = WINDOW_ITEMS) -> Window:
    """The window without the items neither the model view nor the newest `tail` need.

    Dropped items stay in the database; the pinned messages among them that the view
    still carries move to `carried`.
    """
    items = window.items
    start = min(view_start(items), max(0, len(items) - tail))
    if start <= 0:
        return window
    dropped, kept = items[:start], items[start:]
    earlier = window.earlier + start
    if _last_reset(kept) is not None:
        return Window(kept, [], earlier)  # nothing before a /clear reaches the model
    reset = _last_reset(dropped)
    candidates = dropped[reset + 1 :] if reset is not None else [*window.carried, *dropped]
    # The marker in effect is kept: its own id is past its cut, so start <= its index.
    marker = last_marker(kept)
    if marker is None:
        return Window(kept, [], earlier)
    pinned_ids = {int(i) for i in marker.meta.get("pinned_ids", ())}
    return Window(kept, [item for item in candidates if _pinned(item, pinned_ids)], earlier)


async def load_window(store: SessionStore, session_id: str, tail: int = WINDOW_ITEMS) -> Window:
    """The window of a stored session, read without loading the rest of it."""
    reset = await store.last_item(session_id, meta_key="reset")
    base = reset.id if reset is not None and reset.id is not None else 0
    marker = await store.last_item(session_id, type=COMPACTION_ITEM, after=base)
    need_after = int(marker.meta["cut_item_id"]) if marker is not None else base
    after = min(need_after, await store.tail_start(session_id, tail))
    items = await store.load_items(session_id, after=after)
    carried: list[Item] = []
    if marker is not None and after > base:
        pinned_ids = {int(i) for i in marker.meta.get("pinned_ids", ())}
        carried = [
            item
            for item in await store.pinned_items(session_id, after=base, through=after, ids=pinned_ids)
            if _pinned(item, pinned_ids)
        ]
    return Window(items, carried, await store.count_items(session_id, through=after))
