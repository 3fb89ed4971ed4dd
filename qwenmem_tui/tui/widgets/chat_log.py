"""The scrolling conversation."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from textual import on
from textual.containers import VerticalScroll
from textual.content import Content
from textual.dom import DOMNode
from textual.events import Click
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Static

from qwenmem_tui.tui.widgets.plain_items import MessageView, ToolCallItem

if TYPE_CHECKING:
    from qwenmem_tui.storage.sessions import Item

PAGE_SIZE = 20
"""Stored items given widgets at once (more than a screenful). A Markdown reply costs
~30-50 ms to mount, so a page of a 5,000-message session must stay small to open fast."""

MAX_PAGES = 3
"""Pages of stored items mounted at most: paging further releases the farthest page,
so scrolling through a long session keeps memory and layout cost bounded."""


class HiddenItems(Static):
    """A clickable line standing in for stored items that are not mounted."""

    LABEL = "{count} {noun}"

    class Requested(Message):
        """The user asked to see the hidden items."""

    def show_count(self, count: int) -> None:
        """Say how many items are hidden."""
        noun = "item" if count == 1 else "items"
        self.update(Content(self.LABEL.format(count=count, noun=noun)))

    @on(Click)
    def _request(self) -> None:
        self.post_message(self.Requested())


class EarlierItems(HiddenItems):
    """Stands in for the items above the mounted pages."""

    LABEL = "↑ {count} earlier {noun}: scroll up or click to show"

    class Requested(Message):
        """The user asked to see earlier items."""


class LaterItems(HiddenItems):
    """Stands in for the items below the mounted pages (released after paging far up)."""

    LABEL = "↓ {count} later {noun}: scroll down or click to show"

    class Requested(Message):
        """The user asked to see later items."""


@dataclass
class _Page:
    """Stored items `start:end` and the widgets mounted for them."""

    start: int
    end: int
    widgets: list[Widget]


class ItemPages(Protocol):
    """A session's stored items by position, read when a page is shown (ChatSession):
    a long session is not held whole, in memory or in the log."""

    @property
    def item_count(self) -> int: ...

    async def page(self, start: int, end: int) -> list[Item]: ...

    async def position(self, item_id: int) -> int: ...


class ItemViews:
    """Turns stored items into widgets, pairing each tool result with its call."""

    def __init__(self, widget_for: Callable[[Item], Widget | None]) -> None:
        self._widget_for = widget_for
        self._calls: dict[str, tuple[str, str]] = {}

    def index_calls(self, items: Sequence[Item]) -> None:
        """Learn the tool calls of `items` (a page and the one before it: a page may start
        between a call and its result); only those, so scrolling far holds no more."""
        self._calls = {}
        for item in items:
            for call in (item.message or {}).get("tool_calls") or ():
                function = call.get("function") or {}
                self._calls[call.get("id", "")] = (
                    function.get("name", "?"),
                    function.get("arguments", ""),
                )

    def widgets(self, items: Sequence[Item]) -> list[Widget]:
        """The widgets for `items`, in order (items without a view are skipped)."""
        widgets: list[Widget] = []
        for item in items:
            widget = self._tool_item(item) if item.type == "tool" else self._widget_for(item)
            if widget is not None:
                widgets.append(widget)
        return widgets

    def _tool_item(self, item: Item) -> Widget:
        message = item.message or {}
        name, arguments = self._calls.get(message.get("tool_call_id", ""), ("tool", ""))
        tool_item = ToolCallItem(
            item.meta.get("tool_name", name), item.meta.get("arguments", arguments)
        )
        result = message.get("content") or item.content
        tool_item.finish(str(result), is_error=bool(item.meta.get("is_error")))
        return tool_item


class ChatLog(VerticalScroll, can_focus=False):
    """Conversation items, anchored to the bottom while new text arrives.

    It also holds the selection: one stored message highlighted for a key to act on
    (the pin). It is view state only; the prompt keeps the focus meanwhile.
    """

    @dataclass
    class Selected(Message):
        """The highlighted message changed (None: back to the prompt)."""

        view: MessageView | None

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._source: ItemPages | None = None
        self._total = 0  # stored items when they were shown; later ones arrive live
        self._pages: list[_Page] = []  # mounted, in order
        self._views: ItemViews | None = None
        self._earlier_line = EarlierItems()
        self._later_line = LaterItems()
        self._selected: MessageView | None = None
        # Paging runs from the screen's handlers (Home, End, Enter) and from this log's
        # own (scrolled to an end): one at a time, or one mounts beside a line the
        # other has just removed.
        self._paging = asyncio.Lock()

    def on_mount(self) -> None:
        self.anchor()

    @property
    def _earlier(self) -> int:
        """Stored items not mounted above the shown pages."""
        return self._pages[0].start if self._pages else 0

    @property
    def _later(self) -> int:
        """Stored items not mounted below the shown pages."""
        return self._total - self._pages[-1].end if self._pages else 0

    async def add(self, *widgets: Widget) -> None:
        """Append items at the bottom (the anchor keeps them in view)."""
        await self.mount_all(widgets)

    async def show_items(
        self, source: ItemPages, widget_for: Callable[[Item], Widget | None]
    ) -> None:
        """Replace the log with a session's stored items; only the newest page is read
        and gets widgets, the others when scrolled to."""
        self.select(None)
        async with self._paging:
            await self.remove_children()
            self._views = ItemViews(widget_for)
            self._source = source
            self._total = source.item_count
            self._pages = []
            self._earlier_line = EarlierItems()
            self._later_line = LaterItems()
            await self._show_window(max(0, self._total - PAGE_SIZE))
        self.anchor()

    async def _show_window(self, start: int) -> None:
        """Mount the page of stored items from `start` in place of all mounted pages."""
        for page in self._pages:
            await self.remove_children(page.widgets)
        end = min(self._total, start + PAGE_SIZE)
        page = await self._page(start, end)
        self._pages = [page]
        before: Widget | None = self._later_line if self._later_line.parent is self else None
        if before is None:
            # Widgets added live since the items were shown stay below the pages.
            index = 1 if self._earlier_line.parent is self else 0
            before = self.children[index] if index < len(self.children) else None
        if page.widgets:
            if before is not None:
                await self.mount_all(page.widgets, before=before)
            else:
                await self.mount_all(page.widgets)
        await self._update_lines()

    async def _page(self, start: int, end: int) -> _Page:
        assert self._views is not None and self._source is not None
        # The page before too, for the calls of results at this page's top.
        context = max(0, start - PAGE_SIZE)
        items = await self._source.page(context, end) if end > start else []
        self._views.index_calls(items)
        return _Page(start, end, self._views.widgets(items[start - context :]))

    async def _update_lines(self) -> None:
        """Show, update or remove the earlier / later lines around the pages."""
        if self._earlier:
            self._earlier_line.show_count(self._earlier)
            if self._earlier_line.parent is not self:
                await self.mount(self._earlier_line, before=0 if self.children else None)
        elif self._earlier_line.parent is self:
            await self._earlier_line.remove()
        if self._later:
            self._later_line.show_count(self._later)
            if self._later_line.parent is not self:
                shown = [widget for page in self._pages for widget in page.widgets]
                last = shown[-1] if shown else None
                if last is not None:
                    await self.mount(self._later_line, after=last)
                else:
                    await self.mount(self._later_line, after=self._earlier_line)
        elif self._later_line.parent is self:
            await self._later_line.remove()

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        # Reaching an end of what is mounted pages in more, like scrolling in a terminal.
        if new == 0 and old > 0 and self._earlier:
            self.post_message(EarlierItems.Requested())
        elif new >= self.max_scroll_y and old < new and self._later:
            self.post_message(LaterItems.Requested())

    @on(EarlierItems.Requested)
    async def show_earlier(self) -> None:
        """Mount the previous page above what is shown, keeping the view where it was;
        past MAX_PAGES the page farthest below is released."""
        async with self._paging:
            if self._earlier and self._earlier_line.parent is self:
                await self._mount_earlier()

    async def _mount_earlier(self) -> None:
        end = self._earlier
        page = await self._page(max(0, end - PAGE_SIZE), end)
        keep = self._keep_place()
        if page.widgets:
            await self.mount_all(page.widgets, after=self._earlier_line)
        self._pages.insert(0, page)
        if len(self._pages) > MAX_PAGES:
            await self.remove_children(self._pages.pop().widgets)
            self.release_anchor()  # the newest items are not mounted: nothing to follow
        await self._update_lines()
        keep()

    @on(LaterItems.Requested)
    async def show_later(self) -> None:
        """Mount the next page below what is shown (after paging far up), keeping the
        view where it was; past MAX_PAGES the page farthest above is released."""
        async with self._paging:
            if self._later and self._later_line.parent is self:
                await self._mount_later()

    async def _mount_later(self) -> None:
        start = self._pages[-1].end
        page = await self._page(start, min(self._total, start + PAGE_SIZE))
        keep = self._keep_place()
        if page.widgets:
            await self.mount_all(page.widgets, before=self._later_line)
        self._pages.append(page)
        if len(self._pages) > MAX_PAGES:
            await self.remove_children(self._pages.pop(0).widgets)
        await self._update_lines()
        keep()

    def _keep_place(self) -> Callable[[], None]:
        """Remember what is at the top of the view; the returned function scrolls back
        to it once the layout has caught up with mounting or releasing around it."""
        top = self.scrollable_content_region.y
        pivot = next(
            (
                child
                for child in self.children
                if child.region.bottom > top and not isinstance(child, HiddenItems)
            ),
            None,
        )
        if pivot is None:
            return lambda: None
        offset = pivot.region.y - top

        def restore() -> None:
            if pivot.parent is self:
                self.scroll_to(y=pivot.virtual_region.y - offset, animate=False, immediate=True)

        def restore_later() -> None:
            self.call_after_refresh(restore)

        return restore_later

    async def release_oldest(self, source: ItemPages) -> None:
        """After a reply: past MAX_PAGES + 1 pages of widgets, release the oldest down to
        MAX_PAGES, so a long session in one sitting keeps a bounded log; what was
        released is read back from `source` (the session) when scrolled to, after a
        /clear emptied the log too."""
        async with self._paging:
            shown = [child for child in self.children if not isinstance(child, HiddenItems)]
            if self._views is None or self._later or len(shown) <= (MAX_PAGES + 1) * PAGE_SIZE:
                return  # paged far up (the newest are not mounted): the user is reading
            kept = shown[-MAX_PAGES * PAGE_SIZE :]
            # Where the kept part starts among the stored items: at its first message.
            first = next((w for w in kept if isinstance(w, MessageView) and w.item_id is not None), None)
            if first is None or first.item_id is None:
                return
            kept = kept[kept.index(first) :]
            start = await source.position(first.item_id)
            if self._selected is not None and self._selected not in kept:
                self.select(None)
            self._source = source
            await self.remove_children(shown[: len(shown) - len(kept)])
            self._total = source.item_count  # the reply is stored: every widget is a page's now
            self._pages = [_Page(start, self._total, kept)]
            await self._update_lines()

    async def show_first(self) -> None:
        """Jump to the first stored item (Home), releasing what is mounted."""
        self.select(None)
        # Not just released: a released anchor catches again whenever the view is at
        # the bottom, which the first page may be for a moment while it mounts.
        self.anchor(False)
        async with self._paging:
            if self._earlier:
                await self._show_window(0)
        self.call_after_refresh(self.scroll_home, animate=False, immediate=True)

    async def show_latest(self) -> None:
        """Jump back to the newest items (End, or a message sent) and follow them."""
        async with self._paging:
            if self._later:
                await self._show_window(max(0, self._total - PAGE_SIZE))
        self.anchor()

    async def clear(self) -> None:
        """Remove every item."""
        self.select(None)
        async with self._paging:
            self._source = None
            self._total = 0
            self._pages = []
            await self.remove_children()

    # -- selection -----------------------------------------------------------------------

    @property
    def selected(self) -> MessageView | None:
        """The highlighted message, or None when keys go to the prompt."""
        return self._selected

    def select(self, view: MessageView | None, *, scroll: bool = True) -> None:
        """Highlight `view` (scrolled into view unless clicked), or nothing."""
        if view is self._selected:
            return
        if self._selected is not None:
            self._selected.remove_class("-selected")
        self._selected = view
        if view is not None:
            view.add_class("-selected")
            if scroll:
                # After the layout: the view may have been mounted just now.
                self.call_after_refresh(self.scroll_to_widget, view, animate=False)
        self.post_message(self.Selected(view))

    def views_of(self, item_id: int) -> list[MessageView]:
        """The message widgets showing the stored item `item_id`."""
        return [view for view in self._messages() if view.item_id == item_id]

    async def select_step(self, step: int) -> None:
        """Move the highlight to an older (-1) or newer (+1) stored message.

        From the prompt, up starts at the newest message; past the newest the selection
        ends; above the oldest one shown, the earlier page is loaded.
        """
        views = self._messages()
        index = views.index(self._selected) if self._selected in views else len(views)
        index += step
        if index < 0 and self._earlier and views:
            oldest = views[0]
            await self.show_earlier()
            views = self._messages()
            index += views.index(oldest)
        if index >= len(views):
            self.select(None)
            self.anchor()  # back at the prompt: follow new text again
        elif index >= 0:
            self.select(views[index])

    def _messages(self) -> list[MessageView]:
        # Only stored messages: a reply still streaming has nothing to act on yet.
        return [
            child
            for child in self.children
            if isinstance(child, MessageView) and child.item_id is not None
        ]

    @on(Click)
    def _select_clicked(self, event: Click) -> None:
        node: DOMNode | None = event.widget
        while node is not None and node is not self:
            if isinstance(node, MessageView):
                if node.item_id is not None:
                    self.select(node, scroll=False)
                return
            node = node.parent
