"""The scrolling conversation."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from textual import on
from textual.containers import VerticalScroll
from textual.content import Content
from textual.dom import DOMNode
from textual.events import Click
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Static

from qwenmem_tui.storage.sessions import Item
from qwenmem_tui.tui.widgets.items import MessageView, ToolCallItem

PAGE_SIZE = 20
"""Stored items given widgets at once on resume (more than a screenful); earlier ones
wait for a scroll to the top. A Markdown reply costs ~30-50 ms to mount, so a page of
a 5,000-message session must stay small to open fast."""


class EarlierItems(Static):
    """A clickable line standing in for items not mounted yet."""

    class Requested(Message):
        """The user asked to see earlier items."""

    def show_count(self, count: int) -> None:
        """Say how many items are hidden above."""
        noun = "item" if count == 1 else "items"
        self.update(Content(f"↑ {count} earlier {noun}: scroll up or click to show"))

    @on(Click)
    def _request(self) -> None:
        self.post_message(self.Requested())


class ItemViews:
    """Turns stored items into widgets, pairing each tool result with its call."""

    def __init__(self, items: Sequence[Item], widget_for: Callable[[Item], Widget | None]) -> None:
        self._widget_for = widget_for
        # Calls are indexed up front: a page may start between a call and its result.
        self._calls: dict[str, tuple[str, str]] = {}
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
        self._earlier: list[Item] = []
        self._views: ItemViews | None = None
        self._earlier_line = EarlierItems()
        self._selected: MessageView | None = None

    def on_mount(self) -> None:
        self.anchor()

    async def add(self, *widgets: Widget) -> None:
        """Append items at the bottom (the anchor keeps them in view)."""
        await self.mount_all(widgets)

    async def show_items(
        self, items: Sequence[Item], widget_for: Callable[[Item], Widget | None]
    ) -> None:
        """Replace the log with stored items; only the newest page gets widgets."""
        self.select(None)
        await self.remove_children()
        self._views = ItemViews(items, widget_for)
        self._earlier, recent = list(items[:-PAGE_SIZE]), items[-PAGE_SIZE:]
        if self._earlier:
            self._earlier_line = EarlierItems()
            self._earlier_line.show_count(len(self._earlier))
            await self.mount(self._earlier_line)
        await self.mount_all(self._views.widgets(recent))
        self.anchor()

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        # Reaching the top loads the previous page, like scrolling back in a terminal.
        if new == 0 and old > 0 and self._earlier:
            self.post_message(EarlierItems.Requested())

    @on(EarlierItems.Requested)
    async def show_earlier(self) -> None:
        """Mount the previous page above what is shown, keeping the view where it was."""
        if not self._earlier or self._views is None:
            return
        page, self._earlier = self._earlier[-PAGE_SIZE:], self._earlier[:-PAGE_SIZE]
        index = self.children.index(self._earlier_line)
        first_shown = self.children[index + 1] if index + 1 < len(self.children) else None
        await self.mount_all(self._views.widgets(page), after=self._earlier_line)
        if self._earlier:
            self._earlier_line.show_count(len(self._earlier))
        else:
            await self._earlier_line.remove()
        if first_shown is not None:
            self.call_after_refresh(self.scroll_to_widget, first_shown, animate=False, top=True)

    async def clear(self) -> None:
        """Remove every item."""
        self.select(None)
        self._earlier = []
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
        if index < 0 and self._earlier:
            await self.show_earlier()
            loaded = self._messages()
            index += len(loaded) - len(views)
            views = loaded
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
