"""The inline marker where older turns were summarised: ``⋯ 150 older messages summarized``.

Compaction must never be silent: the user sees where the model's view was cut and,
expanded, exactly what the model now has instead — the rolling summary and the
decisions it carries. Collapsed by default and dimmed, so it reads as a note about
the conversation, not as part of it.
"""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Collapsible, Static

from qwenmem_tui.storage.sessions import Item
from qwenmem_tui.tui.terminal_text import terminal_safe


def summary_text(item: Item) -> str:
    """What the expanded marker shows: the summary, then the decisions it keeps."""
    lines = [str(item.meta.get("summary") or "(no summary)")]
    decisions = [str(d) for d in item.meta.get("decisions") or ()]
    if decisions:
        lines += ["", "Decisions and corrections kept:", *(f"• {d}" for d in decisions)]
    return terminal_safe("\n".join(lines))


class CompactionMarker(Collapsible):
    """One stored ``compaction`` display item; Enter or a click expands the summary."""

    DEFAULT_CSS = """
    CompactionMarker {
        padding: 0;
        border: none;
        background: transparent;
        color: $text-muted;
        text-style: dim;
    }
    CompactionMarker > Contents {
        padding: 0 0 0 3;
    }
    CompactionMarker .compaction-summary {
        color: $text-muted;
        text-style: dim italic;
    }
    """

    def __init__(self, item: Item) -> None:
        body = Static(Content(summary_text(item)), classes="compaction-summary")
        # Collapsible parses str titles as markup; Content is literal.
        title = Content(terminal_safe(item.content))
        super().__init__(body, title=title, collapsed=True)  # type: ignore[arg-type]
