"""The compaction marker widget: dim one-liner, expands to the summary it stands for."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.widgets import Static

from qwenmem_tui.storage.sessions import Item
from qwenmem_tui.tui.features.compaction.marker import CompactionMarker, summary_text

MARKER = Item(
    id=7,
    session_id="s",
    type="compaction",
    content="⋯ 150 older messages summarized",
    message=None,
    meta={
        "summary": "Fixing the parser tests; the [bold]lexer[/] was rewritten.",
        "decisions": ["Use PostgreSQL 16."],
        "count": 150,
        "cut_item_id": 151,
    },
    created_at=0.0,
)


class MarkerApp(App[None]):
    def compose(self) -> ComposeResult:
        yield CompactionMarker(MARKER)


def test_summary_text_lists_the_decisions_and_keeps_markup_literal() -> None:
    text = summary_text(MARKER)
    assert text.startswith("Fixing the parser tests; the [bold]lexer[/] was rewritten.")
    assert text.endswith("Decisions and corrections kept:\n• Use PostgreSQL 16.")


async def test_marker_is_collapsed_and_expands_to_the_summary() -> None:
    app = MarkerApp()
    async with app.run_test(size=(80, 12)) as pilot:
        marker = app.query_one(CompactionMarker)
        assert marker.collapsed
        assert "150 older messages summarized" in str(marker.title)
        marker.query_one("CollapsibleTitle").focus()
        await pilot.press("enter")
        await pilot.pause()
        assert not marker.collapsed
        body = marker.query_one(".compaction-summary", Static)
        assert body.display and "[bold]lexer[/]" in str(body.render())
