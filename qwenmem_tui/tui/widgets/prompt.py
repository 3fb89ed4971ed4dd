"""The message input and the slash-command suggestions shown above it."""

from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding
from textual.content import Content
from textual.message import Message
from textual.widgets import Static, TextArea

from qwenmem_tui.tui.commands import CommandTable, SlashCommand


class PromptInput(TextArea):
    """Multi-line input: Enter sends, ctrl+j / alt+enter insert a newline.

    Shift+Enter is not used: most terminals send it as a plain Enter.
    """

    BINDINGS = [
        Binding("enter", "send", "Send", id="prompt.send", priority=True),
        Binding("ctrl+j,alt+enter", "newline", "Newline", id="prompt.newline", priority=True),
        Binding("tab", "complete", "Complete", id="prompt.complete", show=False, priority=True),
    ]

    @dataclass
    class Sent(Message):
        """The user pressed Enter on non-empty text."""

        prompt: PromptInput
        text: str

    def __init__(self, commands: CommandTable, *, id: str | None = None) -> None:
        super().__init__(id=id, soft_wrap=True, show_line_numbers=False, compact=True)
        self.commands = commands
        self.placeholder = "Message, or / for commands"

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

    def update_suggestion(self) -> None:
        # Ghost text completing the first matching command; Right or Tab accepts it.
        matches = self.matching_commands()
        prefix = self.command_prefix() or ""
        at_end = self.cursor_location == self.document.end
        self.suggestion = matches[0].name[len(prefix) :] if matches and at_end else ""

    # Priority bindings run in the app's task as soon as the key is read, while the
    # characters typed just before it may still wait in this widget's queue. Acting
    # via call_later puts the action behind them, so a fast "text + Enter" sends all.

    def action_send(self) -> None:
        self.call_later(self._send)

    def _send(self) -> None:
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
        if self.suggestion:
            self.insert(self.suggestion + " ")
        elif self.command_prefix() is not None and self.matching_commands():
            self.insert(" ")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # Tab only completes while a suggestion is offered; otherwise it moves focus.
        if action == "complete":
            return self.command_prefix() is not None and bool(self.matching_commands())
        return super().check_action(action, parameters)


class CommandSuggestions(Static):
    """The commands matching what is typed: name, argument hint and description."""

    def show_commands(self, commands: list[SlashCommand]) -> None:
        """List `commands`, hiding the widget when there are none."""
        self.display = bool(commands)
        if not commands:
            return
        width = max(len(command.signature) for command in commands)
        self.update(
            Content("\n").join(
                Content.assemble(
                    (command.signature.ljust(width), "bold"), "  ", (command.description, "dim")
                )
                for command in commands
            )
        )
