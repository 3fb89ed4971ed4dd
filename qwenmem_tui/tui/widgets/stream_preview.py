"""The end of a reply that streams faster than Markdown widgets can be built.

Textual's Markdown builds a widget per block (several per list or table), and the
first layout of a screenful of them costs 100-250 ms on the UI loop. A provider
streaming a screen a second or more would keep the loop that busy, and the user's
keys would wait for it. While the stream is that fast, its last screenful is shown by
one widget instead: the same Markdown rendered to lines by Rich in a worker thread,
painted from those lines. It turns into Markdown widgets once the stream slows down
or ends, so the reply the user is left with is the one shown at once.
"""

from __future__ import annotations

import asyncio
import io

from typing import ClassVar

from rich import box
from rich.console import Console, ConsoleOptions, RenderResult
from rich.markdown import Markdown as RichMarkdown
from rich.markdown import MarkdownElement, TableElement
from rich.table import Table
from textual.geometry import Size
from textual.strip import Strip
from textual.widget import Widget


class _BoxedTable(TableElement):
    """A table drawn as Textual's Markdown draws it (boxed, full width), so it keeps
    its look when the preview turns into Markdown widgets."""

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for renderable in super().__rich_console__(console, options):
            if isinstance(renderable, Table):
                renderable.box = box.SQUARE
                renderable.expand = True
                renderable.pad_edge = True
            yield renderable


class _PreviewMarkdown(RichMarkdown):
    elements: ClassVar[dict[str, type[MarkdownElement]]] = {
        **RichMarkdown.elements,
        "table_open": _BoxedTable,
    }


def render_markdown(source: str, width: int, *, dark: bool) -> list[Strip]:
    """`source` rendered as Rich Markdown at `width` cells, one strip per line.

    Pure and thread-safe (a console of its own), so it runs off the UI loop.
    """
    console = Console(
        file=io.StringIO(),
        width=max(1, width),
        color_system="truecolor",
        force_terminal=True,
        legacy_windows=False,
    )
    markdown = _PreviewMarkdown(
        source, code_theme="ansi_dark" if dark else "ansi_light", hyperlinks=False
    )
    lines = console.render_lines(markdown, console.options, pad=False, new_lines=False)
    return [Strip(line) for line in lines]


class StreamPreview(Widget):
    """A reply's newest text, painted from lines rendered in a thread."""

    DEFAULT_CSS = "StreamPreview { height: auto; }"

    def __init__(self) -> None:
        super().__init__()
        self.source = ""
        self._lines: list[Strip] = []
        self._width = 0

    async def show(self, source: str) -> None:
        """Render `source` off the loop, then paint it."""
        width = self.size.width or self._width_in(self.parent)
        dark = self.app.current_theme.dark
        self._lines = await asyncio.to_thread(render_markdown, source, width, dark=dark)
        self.source = source
        self._width = width
        self.refresh(layout=True)

    def _width_in(self, parent: object) -> int:
        # Not laid out yet (just mounted): the width it will get in its parent.
        if not isinstance(parent, Widget):
            return 0
        return parent.content_region.width - self.styles.gutter.width

    async def on_resize(self) -> None:
        if self.source and self.size.width and self.size.width != self._width:
            await self.show(self.source)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self._lines)

    def render_line(self, y: int) -> Strip:
        if y < len(self._lines):
            return self._lines[y]
        return Strip.blank(self.size.width)
