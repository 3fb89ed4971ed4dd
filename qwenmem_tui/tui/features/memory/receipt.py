"""The memory receipt under a reply: ``⌁ 2 memories``, dim; Enter or a click lists them.

A thin view over a stored ``memory_receipt`` item (memory/receipts.py): the lines, and
when open one entry per memory with its key, value, age, origin, whether it was read
from a file and why it was recalled. The correction keys act on the highlighted
entry through the callback the memory extension gives; the widget only shows.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from qwenmem_tui.features.memory.receipts import (
    EDITED,
    FORGOT,
    NOT_RELEVANT,
    Receipt,
    ReceiptMemory,
)
from qwenmem_tui.storage.sessions import Item
from qwenmem_tui.tui.terminal_text import terminal_safe

Correct = Callable[["MemoryReceipt", str, int], Awaitable[None]]
"""``correct(receipt_widget, action, memory_id)``: "forget", "edit" or "not_relevant"."""

_DONE = {
    FORGOT: "✗ forgotten",
    EDITED: "✎ edited",
    NOT_RELEVANT: "⊘ not relevant here: no longer recalled for messages like this one",
}


class ReceiptEntries(OptionList):
    """The open list; its keys correct the highlighted memory."""

    BINDINGS = [
        Binding("f", "correct('forget')", "Forget", id="receipt.forget"),
        Binding("e", "correct('edit')", "Edit value", id="receipt.edit"),
        Binding("n", "correct('not_relevant')", "Not relevant here", id="receipt.not_relevant"),
    ]

    def takes_key(self, key: str) -> bool:
        """The chat screen sends typing to the prompt; the correction keys stay here."""
        # The screen's active bindings are after the user's keymap; this list's are
        # those whose node is the list (it is focused when this is asked).
        active = self.screen.active_bindings.get(key)
        return active is not None and active.node is self

    async def action_correct(self, action: str) -> None:
        receipt = self.parent
        option = self.highlighted_option
        if isinstance(receipt, MemoryReceipt) and option is not None and option.id:
            await receipt.correct(action, int(option.id))


class MemoryReceipt(Vertical, can_focus=True):
    """One reply's receipt; ``-open`` shows its entries."""

    DEFAULT_CSS = """
    MemoryReceipt {
        height: auto;
        padding: 0 1;
        color: $text-muted;
        text-style: dim;
    }
    MemoryReceipt:focus > .receipt-line {
        text-style: dim underline;
    }
    MemoryReceipt > ReceiptEntries {
        display: none;
        height: auto;
        max-height: 16;
        border: none;
        border-left: blank;
        padding: 0 0 0 1;
        background: $background;
        &:focus {
            border: none;
            border-left: outer $accent;
        }
    }
    MemoryReceipt.-open > ReceiptEntries {
        display: block;
    }
    """
    BINDINGS = [Binding("enter", "toggle", "Open memories", show=False)]

    def __init__(
        self, item: Item, receipt: Receipt, *, now: Callable[[], float], correct: Correct | None
    ) -> None:
        super().__init__()
        self.item = item
        self.receipt = receipt
        self._now = now
        self._correct = correct

    def compose(self) -> ComposeResult:
        yield Static(Content(terminal_safe("\n".join(self.receipt.lines()))), classes="receipt-line")
        yield ReceiptEntries(*self._options())

    @property
    def is_open(self) -> bool:
        return self.has_class("-open")

    def open(self, *, focus: bool = True) -> None:
        self.add_class("-open")
        entries = self.query_one(ReceiptEntries)
        if focus:
            entries.focus()
        if entries.highlighted is None and entries.option_count:
            entries.highlighted = 0
        self.call_after_refresh(self.scroll_visible, animate=False)

    def close(self) -> None:
        self.remove_class("-open")

    def action_toggle(self) -> None:  # type: ignore[override]  # DOMNode's takes an attribute
        if self.is_open:
            self.close()
        else:
            self.open()

    def on_click(self, event: events.Click) -> None:
        if isinstance(event.widget, Static):  # the line, not an entry of the open list
            event.stop()
            self.action_toggle()

    async def correct(self, action: str, memory_id: int) -> None:
        if self._correct is not None:
            await self._correct(self, action, memory_id)

    def show_receipt(self, receipt: Receipt) -> None:
        """Show a correction: the entries again, the highlight kept."""
        self.receipt = receipt
        entries = self.query_one(ReceiptEntries)
        highlighted = entries.highlighted
        entries.clear_options()
        entries.add_options(self._options())
        if highlighted is not None and entries.option_count:
            entries.highlighted = min(highlighted, entries.option_count - 1)

    def _options(self) -> list[Option]:
        now = self._now()
        options = [Option(self._entry(m, now), id=str(m.id)) for m in self.receipt.memories]
        for write in self.receipt.writes:
            if all(m.id != write.id for m in self.receipt.memories):
                text = Content.assemble(
                    (f"#{write.id} {write.category}/{write.key}", "bold"),
                    f": {terminal_safe(write.value)}\n",
                    (f"  {write.line()[2:]} by the model during this reply", "italic"),
                    self._fix(write.id),
                )
                options.append(Option(text, id=str(write.id)))
        return options

    def _entry(self, m: ReceiptMemory, now: float) -> Content:
        details = [m.age(now), f"origin {m.origin}"]
        if m.from_file:
            details.append("from_file: read in a file, a note not an instruction")
        return Content.assemble(
            (f"#{m.id} {m.name}", "bold"),
            f": {terminal_safe(m.value)}\n",
            f"  {' · '.join(details)}\n",
            (f"  {m.why()}", "italic"),
            self._fix(m.id),
        )

    def _fix(self, memory_id: int) -> Content | str:
        fix = self.receipt.corrections.get(memory_id)
        if not fix:
            return ""
        label = _DONE.get(str(fix.get("action")), str(fix.get("action")))
        if fix.get("value"):
            label += f": {terminal_safe(str(fix['value']))}"
        return Content.assemble("\n  ", (label, "bold"))
