"""Pure helpers of the TUI: terminal-safe text, command parsing, tool-call titles."""

from __future__ import annotations

from qwenmem_tui.tui.commands import BUILTIN_COMMANDS, parse_command
from qwenmem_tui.tui.host import CommandTable, SlashCommand
from qwenmem_tui.tui.terminal_text import terminal_safe
from qwenmem_tui.tui.widgets.plain_items import (
    clip_lines,
    clip_tool_result,
    format_tool_call,
)


def test_terminal_safe_keeps_text_newlines_and_tabs() -> None:
    assert terminal_safe("héllo\n\tworld 你好") == "héllo\n\tworld 你好"


def test_terminal_safe_makes_escape_sequences_visible_and_inert() -> None:
    cleaned = terminal_safe("\x1b[2J\x1b]0;title\x07\x9b31m\x7fok\r\n")
    assert cleaned == "␛[2J␛]0;title␇\ufffd31m\u2421ok\n"
    assert not any(ord(c) < 32 and c not in "\n\t" for c in cleaned)


def test_parse_command() -> None:
    assert parse_command("/help") == ("help", "")
    assert parse_command("  /Remember  tea over coffee ") == ("remember", "tea over coffee")
    assert parse_command("hello /help") is None
    assert parse_command("/") is None
    assert parse_command("//not a command") is None
    assert parse_command("/ spaced") is None


def test_command_table_matches_by_prefix_and_replaces_by_name() -> None:
    table = CommandTable(BUILTIN_COMMANDS)
    assert [c.name for c in table.matching("re")] == ["resume"]
    assert [c.name for c in table.matching("")] == ["clear", "help", "quit", "resume"]
    table.register(SlashCommand("help", "Better help", lambda app, args: None))
    assert table.get("help") is not None and table.get("help").description == "Better help"
    assert len(table) == 4


def test_format_tool_call() -> None:
    assert format_tool_call("read_file", '{"path": "a.md"}') == 'read_file(path="a.md")'
    assert format_tool_call("list_directory", "") == "list_directory()"
    assert format_tool_call("broken", "{not json") == "broken({not json)"
    long = format_tool_call("read_file", '{"path": "' + "x" * 200 + '"}')
    assert len(long) < 100 and long.endswith("…)")
    assert "\x1b" not in format_tool_call("evil\x1b[2J", "{}")


def test_clip_tool_result_keeps_the_first_lines() -> None:
    result = "\n".join(f"line {n}" for n in range(100))
    clipped = clip_tool_result(result).splitlines()
    assert clipped[0] == "line 0"
    assert clipped[-1] == "… 60 more lines"
    assert len(clipped) == 41


def test_clip_lines_stops_at_lines_or_characters_and_says_how_many_more() -> None:
    assert clip_lines("a\nb", 5) == "a\nb"
    assert clip_lines("a\nb\nc\nd", 2) == "a\nb\n… 2 more lines"
    one_long_line = "x" * 50
    assert clip_lines(one_long_line, 5, max_chars=10) == "x" * 10 + "…"
    many = "\n".join("y" * 10 for _ in range(3000))
    clipped = clip_lines(many, 200, max_chars=95).splitlines()
    assert clipped[-1] == "… 2,990 more lines" and clipped[-2] == "y" * 5 + "…"
