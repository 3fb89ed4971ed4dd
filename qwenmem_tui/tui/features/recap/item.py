"""The inline ``away_recap`` line: ``※ recap: <text>``, dim and italic.

It must never be mistaken for a new assistant reply, hence the gutter mark, the
label and the muted colour; it scrolls with the conversation like any other item.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.content import Content
from textual.widget import Widget
from textual.widgets import Static

from qwenmem_tui.tui.terminal_text import terminal_safe

RECAP_MARK = "※"
RECAP_LABEL = "recap: "


class RecapItem(Widget):
    """One recap in the conversation, as stored in an ``away_recap`` display item."""

    DEFAULT_CSS = """
    RecapItem {
        layout: horizontal;
        height: auto;
        padding: 0 1;
        color: $text-muted;
        text-style: dim;
    }
    RecapItem > .recap-gutter {
        width: 2;
        height: 1;
    }
    RecapItem > .recap-body {
        width: 1fr;
        height: auto;
    }
    """

    def __init__(self, text: str, *, name: str | None = None, id: str | None = None,
                 classes: str | None = None) -> None:  # noqa: A002 - Textual's name
        super().__init__(name=name, id=id, classes=classes)
        self.text = text

    def compose(self) -> ComposeResult:
        yield Static(RECAP_MARK, classes="recap-gutter")
        # Content.assemble treats the text as plain: model output is never markup.
        yield Static(
            Content.assemble((RECAP_LABEL, "bold"), (terminal_safe(self.text), "italic")),
            classes="recap-body",
        )
