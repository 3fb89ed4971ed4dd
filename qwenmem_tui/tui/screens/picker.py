"""What the list pickers share (/resume, /model): a filter above an option list,
Up/Down moving the highlight from the filter, Enter or a click choosing, Esc closing."""

from __future__ import annotations

from textual import on
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widgets import OptionList


class PickerScreen(ModalScreen[str | None]):
    """Dismisses with the chosen option's id, or None on Esc."""

    BINDINGS = [
        Binding("escape", "close", "Close"),
        Binding("down", "move(1)", show=False, priority=True),
        Binding("up", "move(-1)", show=False, priority=True),
    ]

    def highlighted_id(self) -> str | None:
        """The id of the highlighted option, if one is highlighted and choosable."""
        options = self.query_one(OptionList)
        if options.highlighted is None:
            return None
        return options.get_option_at_index(options.highlighted).id

    @on(OptionList.OptionSelected)
    def _selected(self, event: OptionList.OptionSelected) -> None:
        if event.option.id is not None:
            self.dismiss(event.option.id)

    def action_move(self, step: int) -> None:
        options = self.query_one(OptionList)
        if step > 0:
            options.action_cursor_down()
        else:
            options.action_cursor_up()

    def action_close(self) -> None:
        self.dismiss(None)
