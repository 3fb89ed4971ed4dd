"""How a compaction marker reads outside the TUI (the TUI's is `CompactionMarker`)."""

from __future__ import annotations

from qwenmem_tui.storage.sessions import Item
from qwenmem_tui.text import markdown_quote


def marker_markdown(item: Item, now: float) -> str:
    """The marker in a Markdown export: what was folded, then the summary."""
    summary = str(item.meta.get("summary", "")).strip()
    head = f"⟲ compacted: {item.content}".strip()
    return markdown_quote(f"{head}\n\n{summary}" if summary else head)
