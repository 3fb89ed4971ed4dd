"""The preview of a fast stream renders Markdown in a thread, and never stops the stream."""

from __future__ import annotations

import pytest
from app_support import wait_until

from qwenmem_tui.tui.widgets import stream_preview
from qwenmem_tui.tui.widgets.stream_preview import StreamPreview, render_markdown


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


async def test_a_flush_renders_only_the_newest_block_of_the_piece_being_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The piece still being written holds up to a few screens of blocks (tables, code):
    # rendering all of them on every flush cost a tenth of a core at 1,000 tok/s.
    from textual.app import App

    rendered: list[str] = []
    render = stream_preview.render_markdown

    def counted(source: str, width: int, *, dark: bool) -> list:
        rendered.append(source)
        return render(source, width, dark=dark)

    monkeypatch.setattr(stream_preview, "render_markdown", counted)
    first = "## Title\n\nSome **bold** words.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n- one\n"
    app = App()
    # Tall enough for every piece: one taller than the screen would bring the screen's
    # scrollbar, and the Resize that sends re-renders the whole piece (on_resize) in
    # the middle of the flushes counted here.
    async with app.run_test(size=(60, 50)) as pilot:
        preview = StreamPreview()
        await app.screen.mount(preview)
        # Laid out, and its Resize handled, before the first show: a resize arriving
        # during it re-renders the whole piece (on_resize), counted after the clear.
        await wait_until(pilot, lambda: preview.size.width > 0)
        await pilot.pause()

        def painted_at_its_width() -> bool:
            return preview.painted.is_set() and preview._rendered_as[0] == preview.size.width

        await preview.show([first])
        await wait_until(pilot, painted_at_its_width)
        rendered.clear()
        await preview.show([first + "- two\n\nA new paragraph"])
        assert rendered == ["- one\n- two\n\n", "A new paragraph"]
        # Shown as the whole piece rendered at once (a list rendered alone begins with
        # an empty line of its own: not shown).
        whole = render(first + "- two\n\nA new paragraph", preview.size.width, dark=True)
        assert [line.text.rstrip() for line in preview._lines] == [
            line.text.rstrip() for line in whole
        ]
        # A table and a code fence before the newest block are cut from it too (a
        # Markdown widget may only be cut before a paragraph or a list; Rich anywhere).
        second = first + "- two\n\n| c |\n|---|\n| 3 |\n\n```py\nx = 1\n```\n\n## Next"
        await preview.show([second])
        await wait_until(pilot, painted_at_its_width)
        rendered.clear()
        await preview.show([second + " heading"])
        assert rendered == ["## Next heading"]
        whole = render(second + " heading", preview.size.width, dark=True)
        assert [line.text.rstrip() for line in preview._lines] == [
            line.text.rstrip() for line in whole
        ]


async def test_lines_rendered_for_older_text_never_replace_newer_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A resize re-renders what is shown while a flush renders newer text: whichever
    # thread ends last, the newer text is what stays on screen (a stale resize showed
    # the reply's end missing until the next flush).
    import asyncio
    import threading

    from textual.app import App

    release = threading.Event()
    render = stream_preview.render_markdown

    def slow_for_old(source: str, width: int, *, dark: bool) -> list:
        if "OLD" in source:
            release.wait(timeout=30)
        return render(source, width, dark=dark)

    monkeypatch.setattr(stream_preview, "render_markdown", slow_for_old)
    app = App()
    async with app.run_test(size=(60, 20)) as pilot:
        preview = StreamPreview()
        await app.screen.mount(preview)
        await pilot.pause()
        older = asyncio.create_task(preview.show(["OLD words\n"]))
        await asyncio.sleep(0)  # one turn: it is rendering now, in its thread
        await preview.show(["NEW words\n"])
        release.set()
        await older
        assert preview.pieces == ["NEW words\n"]
        assert [line.text.strip() for line in preview._lines] == ["NEW words"]
