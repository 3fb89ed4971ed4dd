"""The scrolling conversation."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from textual import on
from textual.containers import VerticalScroll
from textual.content import Content
from textual.events import Click
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Static

from qwenmem_tui.storage.sessions import Item
from qwenmem_tui.tui.widgets.items import ToolCallItem

PAGE_SIZE = 60
"""Items mounted at once on resume: a 5,000-message session must open instantly."""


class EarlierItems(Static):
    """A clickable line standing in for items not mounted yet."""

    class Requested(Message):
        """The user asked to see earlier items."""

    def show_count(self, count: int) -> None:
        """Say how many items are hidden above."""
        noun = "item" if count == 1 else "items"
        self.update(Content(f"↑ {count} earlier {noun} (click to show)"))

    @on(Click)
    def _request(self) -> None:
        self.post_message(self.Requested())


def build_item_widgets(
    items: Sequence[Item], widget_for: Callable[[Item], Widget | None]
) -> list[Widget]:
    """Widgets for stored items; tool results are paired with the call that asked for them."""
    calls: dict[str, tuple[str, str]] = {}
    widgets: list[Widget] = []
    for item in items:
        message = item.message or {}
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            calls[call.get("id", "")] = (function.get("name", "?"), function.get("arguments", ""))
        if item.type == "tool":
            name, arguments = calls.get(message.get("tool_call_id", ""), ("tool", ""))
            name = item.meta.get("tool_name", name)
            arguments = item.meta.get("arguments", arguments)
            tool_item = ToolCallItem(name, arguments)
            result = message.get("content") or item.content
            tool_item.finish(str(result), is_error=bool(item.meta.get("is_error")))
            widgets.append(tool_item)
            continue
        widget = widget_for(item)
        if widget is not None:
            widgets.append(widget)
    return widgets


class ChatLog(VerticalScroll, can_focus=False):
    """Conversation items, anchored to the bottom while new text arrives."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._earlier: list[Widget] = []
        self._earlier_line = EarlierItems()

    def on_mount(self) -> None:
        self.anchor()

    async def add(self, *widgets: Widget) -> None:
        """Append items at the bottom (the anchor keeps them in view)."""
        await self.mount_all(widgets)

    async def show_items(
        self, items: Sequence[Item], widget_for: Callable[[Item], Widget | None]
    ) -> None:
        """Replace the log with stored items; only the newest page is mounted."""
        await self.remove_children()
        widgets = build_item_widgets(items, widget_for)
        self._earlier, recent = widgets[:-PAGE_SIZE], widgets[-PAGE_SIZE:]
        if self._earlier:
            self._earlier_line = EarlierItems()
            self._earlier_line.show_count(len(self._earlier))
            await self.mount(self._earlier_line)
        await self.mount_all(recent)
        self.anchor()

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        # Reaching the top loads the previous page, like scrolling back in a terminal.
        if new == 0 and old > 0 and self._earlier:
            self.post_message(EarlierItems.Requested())

    @on(EarlierItems.Requested)
    async def show_earlier(self) -> None:
        """Mount the previous page above what is shown, keeping the view where it was."""
        if not self._earlier:
            return
        page, self._earlier = self._earlier[-PAGE_SIZE:], self._earlier[:-PAGE_SIZE]
        await self.mount_all(page, after=self._earlier_line)
        if self._earlier:
            self._earlier_line.show_count(len(self._earlier))
        else:
            await self._earlier_line.remove()
        first_old = self.children[self.children.index(page[-1]) + 1] if page[-1] is not self.children[-1] else None
        if first_old is not None:
            self.call_after_refresh(self.scroll_to_widget, first_old, animate=False, top=True)

    async def clear(self) -> None:
        """Remove every item."""
        self._earlier = []
        await self.remove_children()
