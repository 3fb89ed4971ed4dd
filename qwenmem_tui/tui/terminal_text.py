"""Make model and tool text safe to put on a terminal.

Model output and file contents are untrusted: an ESC byte reaching the terminal could
move the cursor, retitle the window or worse. Rich and Textual render their own escape
codes, so everything we display from outside goes through :func:`terminal_safe` first
and is then rendered as plain `Text` / Markdown, never as console markup.
"""

from __future__ import annotations

import re

# C0 controls except \t and \n, DEL, the C1 range (U+0080-U+009F, 8-bit CSI etc.), and
# the bidi embeddings, overrides and isolates (plus ALM/LRM/RLM) that reorder what a
# terminal shows, so text could read differently from what it is ("Trojan Source").
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x80-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


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
    """Replace control characters (except newline and tab) with visible stand-ins."""
    return _CONTROL.sub(_visible, text)
