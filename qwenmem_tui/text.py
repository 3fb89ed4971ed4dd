"""Plain-text helpers shared by the core and the faces (stdlib only, imported anywhere)."""

from __future__ import annotations


def one_line(text: str) -> str:
    """`text` with every run of whitespace, newlines included, as one space.

    For messages that must stay on one line: error envelopes, notices, log tags.
    """
    return " ".join(text.split())
