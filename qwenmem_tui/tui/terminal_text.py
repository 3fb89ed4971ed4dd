"""Make model and tool text safe to put on a terminal (the TUI's import path).

Model output and file contents are untrusted: an ESC byte reaching the terminal could
move the cursor, retitle the window or worse. Rich and Textual render their own escape
codes, so everything we display from outside goes through :func:`terminal_safe` first
and is then rendered as plain `Text` / Markdown, never as console markup. The function
lives in the core (:mod:`qwenmem_tui.text`) so the CLI's listings use the same one.
"""

from __future__ import annotations

from qwenmem_tui.text import terminal_safe

__all__ = ["terminal_safe"]
