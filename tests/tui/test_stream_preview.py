"""The preview of a fast stream renders Markdown in a thread, and never stops the stream."""

from __future__ import annotations

import pytest

from qwenmem_tui.tui.widgets import stream_preview
from qwenmem_tui.tui.widgets.stream_preview import render_markdown


def test_renders_markdown_to_lines_of_the_width() -> None:
    source = "## Title\n\nSome **bold** words.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n"
    lines = render_markdown(source, 40, dark=True)
    text = [line.text for line in lines]
    assert "Title" in text[0] and any("Some bold words." in line for line in text)
    assert any(line.lstrip().startswith("┌") for line in text)  # boxed, as Textual draws it
    assert all(line.cell_length <= 40 for line in lines)


def test_markdown_that_fails_to_render_shows_as_plain_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*args: object) -> None:
        raise RecursionError("too deep")

    monkeypatch.setattr(stream_preview._PreviewMarkdown, "__rich_console__", broken)
    lines = render_markdown("> > > deep\n", 40, dark=False)
    assert [line.text.rstrip() for line in lines if line.text.strip()] == ["> > > deep"]
