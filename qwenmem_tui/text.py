"""Plain-text helpers shared by the core and the faces (stdlib only, imported anywhere)."""

from __future__ import annotations

import json
import math
import re

# C0 controls except \t and \n, DEL, the C1 range (U+0080-U+009F, 8-bit CSI etc.), and
# the bidi embeddings, overrides and isolates (plus ALM/LRM/RLM) that reorder what a
# terminal shows, so text could read differently from what it is ("Trojan Source").
_CONTROL = re.compile(
    r"[\x00-\x08\x0b-\x1f\x7f\x80-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)


_WIDE = re.compile(r"[\u3000-\u9fff\uac00-\ud7af\uff00-\uffef]")


def estimate_text_tokens(text: str) -> int:
    """About four characters a token, but one per CJK character (BPE splits those)."""
    wide = len(_WIDE.findall(text))
    return wide + math.ceil((len(text) - wide) / 4)


_SURROGATE = re.compile(r"[\ud800-\udfff]")


def valid_text(text: str) -> str:
    """``text`` with every lone surrogate as U+FFFD. Python reads bytes that are not
    UTF-8 (a Latin-1 file piped in, an argument typed in another encoding) as lone
    surrogates, which no UTF-8 encoder takes: SQLite and the model client failed on
    them ("Internal error"); the rest of the text still reads."""
    return _SURROGATE.sub("\ufffd", text)


def one_line(text: str) -> str:
    """`text` with every run of whitespace, newlines included, as one space.

    For messages that must stay on one line: error envelopes, notices, log tags.
    """
    return " ".join(text.split())


def _visible(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    if char == "\r":
        return ""  # "\r\n" line endings: the "\n" is enough
    if code < 0x20:
        return chr(0x2400 + code)  # Unicode "control pictures": ␛, ␀, …
    if code == 0x7F:
        return "\u2421"  # ␡
    return "\ufffd"


def terminal_safe(text: str) -> str:
    """Replace control characters (except newline and tab) with visible stand-ins.

    Model output, file contents, titles and memories are untrusted: an ESC byte that
    reaches a terminal can write the clipboard (OSC 52), retitle the window, clear the
    screen or plant a hyperlink. The TUI and every CLI listing print through this.
    """
    return _CONTROL.sub(_visible, text)


def terminal_safe_json(json_text: str) -> str:
    """JSON text with every character :func:`terminal_safe` replaces written as a
    ``\\uXXXX`` escape: the same JSON value for a script, nothing a terminal acts on
    (``json.dumps(..., ensure_ascii=False)`` leaves C1 controls and bidi marks raw)."""
    return _CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", json_text)


def markdown_quote(text: str) -> str:
    """`text` as a Markdown block quote (how an export sets a feature's aside apart)."""
    return "\n".join(f"> {line}" if line else ">" for line in text.splitlines())


TOOL_ARGS_MAX_CHARS = 80


def format_tool_call(name: str, arguments: str, limit: int = TOOL_ARGS_MAX_CHARS) -> str:
    """`name(key=value, …)` on one line, its arguments cut at `limit` characters; raw
    text when they are not a JSON object. How every face names a call (the TUI's tool
    line, the ACP agent's tool-call title)."""
    try:
        parsed = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        args = ", ".join(
            f"{key}={json.dumps(value, ensure_ascii=False)}" for key, value in parsed.items()
        )
    else:
        args = arguments
    args = " ".join(args.split())
    if len(args) > limit:
        args = args[: limit - 1] + "…"
    return f"{name}({args})"
