"""Slash commands: an extensible table of name -> handler, plus the built-in ones.

Commands run at once, even while a reply streams, so a handler must not assume the
app is idle. Features register their own commands through an `Extension`
(see `tui/extensions.py`) or directly with `app.commands.register(...)`.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from qwenmem_tui.tui.host import Host

CommandHandler = Callable[["Host", str], Awaitable[None] | None]
"""Called with the app (as the host interface, `tui/host.py`) and the text after the
command name (stripped, may be "")."""


@dataclass(frozen=True)
class SlashCommand:
    """One slash command as listed by /help and the suggestion dropdown."""

    name: str  # without the leading slash
    description: str
    handler: CommandHandler
    usage: str = ""  # argument hint shown after the name, e.g. "<text>"

    @property
    def signature(self) -> str:
        """`/name <usage>` as shown to the user."""
        return f"/{self.name} {self.usage}".rstrip()

    async def run(self, app: Host, args: str) -> None:
        """Run the handler, awaiting it when it is a coroutine function."""
        result = self.handler(app, args)
        if inspect.isawaitable(result):
            await result


class CommandTable:
    """Registered commands by name; registering a name again replaces it."""

    def __init__(self, commands: tuple[SlashCommand, ...] = ()) -> None:
        self._commands: dict[str, SlashCommand] = {}
        for command in commands:
            self.register(command)

    def register(self, command: SlashCommand) -> None:
        """Add or replace a command."""
        self._commands[command.name] = command

    def get(self, name: str) -> SlashCommand | None:
        """The command called `name` (without slash), if any."""
        return self._commands.get(name)

    def matching(self, prefix: str) -> list[SlashCommand]:
        """Commands whose name starts with `prefix` (without slash), sorted by name."""
        return sorted(
            (command for name, command in self._commands.items() if name.startswith(prefix)),
            key=lambda command: command.name,
        )

    def __iter__(self) -> Iterator[SlashCommand]:
        return iter(sorted(self._commands.values(), key=lambda command: command.name))

    def __len__(self) -> int:
        return len(self._commands)


def parse_command(text: str) -> tuple[str, str] | None:
    """Split `/name args` into `(name, args)`; None when `text` is not a command.

    A lone "/" or text starting with "//" or "/ " is a message, so people can still
    start a message with a slash.
    """
    stripped = text.strip()
    if not stripped.startswith("/") or stripped.startswith("//"):
        return None
    name, _, args = stripped[1:].partition(" ")
    if not name or "\n" in name:
        return None
    return name.lower(), args.strip()


async def _help(app: Host, args: str) -> None:
    # Keys first, commands last: a long answer scrolls, and the commands are what a
    # reader looks for at the bottom of the conversation, in view.
    width = max(len(command.signature) for command in app.commands)
    lines = ["Keys:"]
    for key, description in [*app.describe_keys(), *PROMPT_KEYS, *app.help_keys]:
        lines.append(f"  {key.ljust(width)}  {description}")
    lines += ["", "Commands:"]
    lines += [
        f"  {command.signature.ljust(width)}  {command.description}" for command in app.commands
    ]
    if app.has_session:
        usage = app.session.usage_total()
        lines += [
            f"Tokens this session: {usage.prompt_tokens:,} prompt, "
            f"{usage.completion_tokens:,} completion (as the endpoint counted them)"
        ]
    app.show_info("\n".join(lines))


PROMPT_KEYS = (
    ("↑ / ↓", "Earlier / later messages (first / last line), or pick a /command"),
    ("tab", "Complete the highlighted /command"),
)
"""The prompt's own keys, which are not bindings with ids (so not remappable)."""


async def _clear(app: Host, args: str) -> None:
    await app.clear_conversation()


def _quit(app: Host, args: str) -> None:
    app.exit()


def _resume(app: Host, args: str) -> None:
    if args:
        app.open_session(args)
    else:
        app.action_resume()


BUILTIN_COMMANDS: tuple[SlashCommand, ...] = (
    SlashCommand("help", "List commands and keys", _help),
    SlashCommand("clear", "Start over: clear the conversation the model sees", _clear),
    SlashCommand("quit", "Quit qwenmem", _quit),
    SlashCommand("resume", "Open an earlier session of this project", _resume, "[id]"),
)
