"""The message input and the slash-command suggestions shown above it."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from textual import events, on
from textual.binding import Binding, BindingsMap
from textual.content import Content
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import OptionList, TextArea
from textual.widgets.option_list import Option

from qwenmem_tui.prompt_history import HistoryCursor, PromptHistory
from qwenmem_tui.tui.host import CommandTable, SlashCommand


@functools.cache
def _declared_bindings(widget: type[Widget]) -> dict[str, list[Binding]]:
    """Key -> bindings as `widget`'s class and its bases declare them (public `BINDINGS`),
    a subclass's key replacing its base's, as Textual merges them.

    Read once per class on the hot path of every key. The user's keymap remaps none of
    these: TextArea's bindings carry no id, and the prompt's own are priority ones,
    which Textual runs before the key reaches the widget.
    """
    keys: dict[str, list[Binding]] = {}
    for base in reversed(widget.__mro__):
        declared = base.__dict__.get("BINDINGS")
        if declared:
            keys.update(BindingsMap(declared).key_to_bindings)
    return keys


class PromptInput(TextArea):
    """Multi-line input: Enter sends, ctrl+j / alt+enter insert a newline.

    Shift+Enter is not used: most terminals send it as a plain Enter. While slash
    commands are suggested, Up/Down move the highlight, Enter runs the highlighted
    command (or completes it when it needs an argument) and Tab completes it. Otherwise
    Up on the first line and Down on the last walk the prompt history, like a shell.
    """

    BINDINGS = [
        Binding("enter", "send", "Send", id="prompt.send", priority=True),
        Binding("ctrl+j,alt+enter", "newline", "Newline", id="prompt.newline", priority=True),
        Binding("tab", "complete", "Complete", id="prompt.complete", show=False, priority=True),
    ]

    highlighted: reactive[int] = reactive(0)
    """Which of the matching commands Enter and Tab take."""

    @dataclass
    class Sent(Message):
        """The user pressed Enter on non-empty text."""

        prompt: PromptInput
        text: str

    def __init__(
        self,
        commands: CommandTable,
        *,
        history: PromptHistory | None = None,
        id: str | None = None,
    ) -> None:
        super().__init__(id=id, soft_wrap=True, show_line_numbers=False, compact=True)
        self.commands = commands
        self.placeholder = "Message, or / for commands"
        self.prompt_history = history
        self._walk = HistoryCursor(history) if history is not None else None
        self._recalling = False  # the text is being replaced by a history entry
        self._moved = False  # the highlight was moved since the last edit

    async def on_key(self, event: events.Key) -> None:
        # Textual runs a widget's own (non-priority) bindings -- backspace, delete, the
        # arrows, Home/End -- only once the key has bubbled back up to the app, while
        # characters are inserted as soon as they reach this widget. Keys that arrive
        # together (a fast typist while a stream keeps the loop busy, a terminal
        # multiplexer) were applied out of order: a backspace deleted the character
        # typed after it. The prompt's own bindings run here, in the order typed. This
        # public handler runs before TextArea's own key handler (Textual dispatches down
        # the class hierarchy); `prevent_default` keeps that one from running too.
        for binding in _declared_bindings(type(self)).get(event.key, ()):
            if not binding.priority and await self.app.run_action(binding.action, self):
                event.stop()
                event.prevent_default()
                return

    def command_prefix(self) -> str | None:
        """The partial command name being typed (`"he"` for `/he`), else None."""
        text = self.text
        if not text.startswith("/") or " " in text or "\n" in text:
            return None
        return text[1:]

    def matching_commands(self) -> list[SlashCommand]:
        """Commands the text typed so far could become."""
        prefix = self.command_prefix()
        return [] if prefix is None else self.commands.matching(prefix.lower())

    def highlighted_command(self) -> SlashCommand | None:
        """The suggestion Enter and Tab act on, if commands are suggested."""
        matches = self.matching_commands()
        return matches[min(self.highlighted, len(matches) - 1)] if matches else None

    def _enter_command(self) -> SlashCommand | None:
        # A lone "/" is still a message unless a suggestion was picked with the arrows:
        # Enter must not run whichever command sorts first (/clear).
        if self.command_prefix() == "" and not self._moved:
            return None
        return self.highlighted_command()

    def update_suggestion(self) -> None:
        # Called by TextArea after every edit. Ghost text completes the highlighted
        # command; Right or Tab accepts it.
        if not self._recalling and self._walk is not None:
            self._walk.reset()  # typing ends a walk through the history
        self._moved = False
        matches = self.matching_commands()
        if self.highlighted >= len(matches):
            self.highlighted = 0
        self._show_ghost()

    def _show_ghost(self) -> None:
        command = self.highlighted_command()
        prefix = self.command_prefix() or ""
        at_end = self.cursor_location == self.document.end
        fits = command is not None and command.name.startswith(prefix.lower())
        self.suggestion = command.name[len(prefix) :] if command and fits and at_end else ""

    def watch_highlighted(self) -> None:
        self._show_ghost()

    # Priority bindings run in the app's task as soon as the key is read, while the
    # characters typed just before it may still wait in this widget's queue. Acting
    # via call_later puts the action behind them, so a fast "text + Enter" sends all.

    def action_send(self) -> None:
        self.call_later(self._send)

    def _send(self) -> None:
        command = self._enter_command()
        if command is not None:
            if command.usage.startswith("<"):
                # The argument is required: Enter completes, the next Enter sends.
                self._replace(f"/{command.name} ")
                return
            self._replace(f"/{command.name}")
        text = self.text
        if text.strip():
            # Cleared here, in key order: keys typed right after Enter (a fast typist,
            # tmux send-keys) are the next message, not the tail of this one.
            self.clear()
            self.post_message(self.Sent(self, text))

    def action_newline(self) -> None:
        self.call_later(self.insert, "\n")

    def action_complete(self) -> None:
        self.call_later(self._complete)

    def _complete(self) -> None:
        command = self.highlighted_command()
        if command is not None:
            self._replace(f"/{command.name} ")

    def accept_suggestion(self, index: int) -> None:
        """A suggestion was clicked: complete it, as Tab would."""
        self.highlighted = index
        self._complete()
        self.focus()

    def _replace(self, text: str) -> None:
        self.load_text(text)
        self.move_cursor(self.document.end)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # Tab only completes while a suggestion is offered; otherwise it moves focus.
        if action == "complete":
            return bool(self.matching_commands())
        return super().check_action(action, parameters)

    # -- Up/Down: suggestions, then lines, then history ---------------------------

    def action_cursor_up(self, select: bool = False) -> None:
        matches = self.matching_commands()
        if matches and not select and not self._walking():
            self.highlighted = (self.highlighted - 1) % len(matches)
            self._moved = True
        elif select or not self.navigator.is_first_wrapped_line(self.cursor_location):
            super().action_cursor_up(select)
        elif self._walk is not None:
            self._recall(self._walk.older(self.text))

    def action_cursor_down(self, select: bool = False) -> None:
        matches = self.matching_commands()
        if matches and not select and not self._walking():
            self.highlighted = (self.highlighted + 1) % len(matches)
            self._moved = True
        elif select or not self.navigator.is_last_wrapped_line(self.cursor_location):
            super().action_cursor_down(select)
        elif self._walk is not None:
            self._recall(self._walk.newer())

    def _walking(self) -> bool:
        return self._walk is not None and self._walk.walking

    def _recall(self, text: str | None) -> None:
        if text is None:
            return
        self._recalling = True
        try:
            self._replace(text)
        finally:
            self._recalling = False

    def remember(self, text: str) -> None:
        """Add a sent message to the history (a command too: /remember lines repeat)."""
        if self.prompt_history is not None and self._walk is not None:
            self.prompt_history.add(text)
            self._walk.reset()


class CommandSuggestions(OptionList, can_focus=False):
    """The commands matching what is typed: name, argument hint and description.

    It scrolls, so every command is reachable however many there are; the prompt keeps
    the focus and moves the highlight.
    """

    @dataclass
    class Picked(Message):
        """A suggestion was clicked."""

        index: int

    def show_commands(self, commands: list[SlashCommand], highlighted: int = 0) -> None:
        """List `commands`, hiding the widget when there are none."""
        self.display = bool(commands)
        names = [command.name for command in commands]
        if names != [option.id for option in self.options]:
            self.clear_options()
            if commands:
                width = max(len(command.signature) for command in commands)
                self.add_options(
                    Option(
                        Content.assemble(
                            (command.signature.ljust(width), "bold"),
                            "  ",
                            (command.description, "dim"),
                        ),
                        id=command.name,
                    )
                    for command in commands
                )
        if commands:
            self.highlighted = min(highlighted, len(commands) - 1)

    @on(OptionList.OptionSelected)
    def _picked(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.post_message(self.Picked(event.option_index))
