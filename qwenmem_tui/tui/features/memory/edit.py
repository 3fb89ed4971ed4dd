"""Edit one memory's value in place: a small dialog over the current screen.

Enter saves (the caller writes it as the person's own correction, superseding the old
value), Esc leaves it unchanged. The dialog only returns the text.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from qwenmem_tui.memory.guard import MAX_VALUE_CHARS
from qwenmem_tui.memory.model import Memory
from qwenmem_tui.tui.terminal_text import terminal_safe


class EditMemoryScreen(ModalScreen[str | None]):
    """Returns the new value, or None when cancelled."""

    DEFAULT_CSS = """
    EditMemoryScreen {
        align: center middle;
    }
    EditMemoryScreen > Vertical {
        width: 80%;
        max-width: 100;
        height: auto;
        border: round $primary;
        background: $surface;
        padding: 0 1;
    }
    EditMemoryScreen .edit-hint {
        color: $text-muted;
        text-style: dim;
    }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="memory_edit.cancel")]

    def __init__(self, memory: Memory) -> None:
        super().__init__()
        self.memory = memory

    def compose(self) -> ComposeResult:
        memory = self.memory
        with Vertical():
            yield Static(
                Content.assemble(("Edit ", ""), (f"#{memory.id} {memory.category}/{memory.key}", "bold"))
            )
            yield Input(
                value=terminal_safe(memory.value), max_length=MAX_VALUE_CHARS, id="edit-value"
            )
            yield Static(
                "Enter saves it as your correction (the old value stays in the audit trail); "
                "Esc leaves it.",
                classes="edit-hint",
            )

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)
