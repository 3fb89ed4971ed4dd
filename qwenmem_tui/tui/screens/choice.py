"""A question with numbered answers, asked in a box over the conversation.

Both questions qwenmem asks before it acts are this one dialog: an MCP tool's
permission (allow once / always here / deny) and a message holding a secret (send it
redacted / edit / cancel). A subclass gives the title, the detail line, the choices
(each a value, the key that picks it, its label) and what Esc answers; the box, the
list (Enter on the highlighted answer, or its key) and the help line are the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import ClassVar, Generic, TypeVar

from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

T = TypeVar("T", bound=Enum)


class ChoiceScreen(ModalScreen[T | None], Generic[T]):
    """Dismisses with the chosen value (`choose(value)`, a key, or Enter on the list);
    None where a subclass's Esc is no answer at all (`action_dismiss`)."""

    DEFAULT_CSS = """
    ChoiceScreen { align: center middle; }
    ChoiceScreen .choice-box {
        width: 80%; max-width: 100; height: auto;
        padding: 1 2; border: round $warning; background: $surface;
    }
    ChoiceScreen .choice-title { margin: 0 0 1 0; }
    ChoiceScreen .choice-detail { margin: 0 0 1 0; color: $text-muted; }
    ChoiceScreen OptionList { height: auto; border: none; background: $surface; }
    ChoiceScreen .choice-help { margin: 1 0 0 0; color: $text-muted; }
    """
    HELP: ClassVar[str] = "enter choose · esc cancel"
    """The dim line under the choices."""

    def choices(self) -> Sequence[tuple[T, str, str]]:
        """(value, key, label) of each answer, in the order shown."""
        raise NotImplementedError

    def title_content(self) -> Content:
        raise NotImplementedError

    def detail_content(self) -> Content:
        raise NotImplementedError

    def value(self, chosen: str) -> T:
        """The answer whose value is `chosen` (an option's id, a key binding's argument)."""
        return next(value for value, _, _ in self.choices() if value.value == chosen)

    def compose(self) -> ComposeResult:
        with Vertical(classes="choice-box"):
            yield Static(self.title_content(), classes="choice-title")
            yield Static(self.detail_content(), classes="choice-detail")
            yield OptionList(
                *(Option(Content(f"{key}  {label}"), id=value.value) for value, key, label in self.choices())
            )
            yield Static(Content(self.HELP), classes="choice-help")

    def on_mount(self) -> None:
        self.query_one(OptionList).highlighted = 0

    @on(OptionList.OptionSelected)
    def _selected(self, event: OptionList.OptionSelected) -> None:
        if event.option.id is not None:
            self.dismiss(self.value(event.option.id))

    def action_choose(self, chosen: str) -> None:
        self.dismiss(self.value(chosen))
