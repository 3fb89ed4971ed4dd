"""Slash commands: parsing what the user typed, and the built-in commands.

A command is a `SlashCommand` registered in the host's `CommandTable` (both in
`tui/host.py`: a command is what the host runs, and the host holds the table).
Commands run at once, even while a reply streams, so a handler must not assume the
app is idle. Features register their own commands through an `Extension`
(see `tui/extensions.py`) or directly with `app.commands.register(...)`.
"""

from __future__ import annotations

from qwenmem_tui.tui.host import Host, SlashCommand


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
