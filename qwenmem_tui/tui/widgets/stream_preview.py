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
import logging
from collections.abc import Sequence
from functools import cache
from typing import ClassVar

from markdown_it import MarkdownIt
from rich import box
from rich.console import Console, ConsoleOptions, RenderResult
from rich.markdown import Markdown as RichMarkdown
from rich.markdown import MarkdownElement, TableElement
from rich.table import Table
from rich.text import Text
from textual.geometry import Size
from textual.strip import Strip
from textual.widget import Widget

from qwenmem_tui.tui.widgets.frozen_blocks import scroller_of, shows_end, split_blocks

log = logging.getLogger("qwenmem.tui")


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


@cache
def _rich_parser() -> MarkdownIt:
    """The parser Rich's Markdown builds for itself, built once."""
    return MarkdownIt().enable("strikethrough").enable("table")


class _PreviewMarkdown(RichMarkdown):
    """Rich's Markdown with Textual's table look, parsed by one shared parser.

    Rich builds a new MarkdownIt per instance (linkify compiles its regexes): a quarter
    of the preview's rendering at 1,000 tokens a second, where a flush renders one
    block. So this sets what Rich's constructor sets, parsing with `_rich_parser`.
    """

    elements: ClassVar[dict[str, type[MarkdownElement]]] = {
        **RichMarkdown.elements,
        "table_open": _BoxedTable,
    }

    def __init__(self, markup: str, *, code_theme: str) -> None:
        self.markup = markup
        self.parsed = _rich_parser().parse(markup)
        self.code_theme = code_theme
        self.justify = None
        self.style = "none"
        self.hyperlinks = False
        self.inline_code_lexer = None
        self.inline_code_theme = code_theme


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
    markdown = _PreviewMarkdown(source, code_theme="ansi_dark" if dark else "ansi_light")
    try:
        lines = console.render_lines(markdown, console.options, pad=False, new_lines=False)
    except Exception:  # a preview must never stop the stream: plain text, then
        log.warning("[TUI] preview of a reply failed; shown as plain text", exc_info=True)
        lines = console.render_lines(Text(source), console.options, pad=False, new_lines=False)
    return [Strip(line) for line in lines]


def joined(blocks: Sequence[list[Strip]], width: int) -> list[Strip]:
    """Blocks rendered apart, as Rich renders them together: one blank line between
    two (a block rendered alone may begin or end with an empty line of its own)."""
    lines: list[Strip] = []
    for block in blocks:
        start, end = 0, len(block)
        while start < end and not block[start].cell_length:
            start += 1
        while end > start and not block[end - 1].cell_length:
            end -= 1
        if start == end:
            continue
        if lines:
            lines.append(Strip.blank(width))
        lines += block[start:end]
    return lines


class StreamPreview(Widget):
    """A reply's newest pieces, painted from lines rendered in a thread.

    Each piece is rendered once (at a width, in a theme) and kept while it is shown,
    and so is each finished block of the piece still being written: a flush renders
    only its newest block (at 1,000 tokens a second the piece was a tenth of a core).

    While the log follows the stream, the preview is only its last `tail` lines tall
    (a screenful; the lines above it are out of sight anyway). A flush then changes
    what it paints but not its height, so the screen is repainted without being laid
    out again: in Textual a widget that grows costs the whole screen two layouts and
    two full repaints (the new virtual sizes ask for a second one), which was half the
    CPU of a fast stream. Scrolled away from the end, it shows all its lines again.
    """

    DEFAULT_CSS = "StreamPreview { height: auto; }"

    def __init__(self) -> None:
        super().__init__()
        self.pieces: list[str] = []
        """What it was last asked to show (its lines may still be rendering)."""
        self._asked = 0  # calls of `show`: the latest one paints
        self._lines: list[Strip] = []
        self._rendered: dict[str, list[Strip]] = {}
        self._rendered_as: tuple[int, bool] = (0, False)  # width, dark
        self.painted = asyncio.Event()
        """Set once the last line of what it was last asked to show is painted."""
        self.tail: int | None = None
        """Lines shown, the last ones, while the log follows the stream (None: all)."""

    @property
    def height(self) -> int:
        """Lines it is tall: all its lines, or the last `tail` of them."""
        lines = len(self._lines)
        return lines if self.tail is None else min(lines, self.tail)

    @property
    def source(self) -> str:
        return "".join(self.pieces)

    async def show(self, pieces: Sequence[str]) -> None:
        """Render what of `pieces` is new off the loop, then paint them all (unless a
        later call, with newer text or at a new width, has begun meanwhile: its lines
        are the ones to paint; a resize re-rendering older text overwrote a flush's)."""
        self.pieces = list(pieces)
        self._asked += 1
        asked = self._asked
        self.painted.clear()
        style = (self.size.width or self._width_in(self.parent), self.app.current_theme.dark)
        kept = self._rendered if style == self._rendered_as else {}
        width, dark = style

        def render_new() -> dict[str, list[Strip]]:
            rendered: dict[str, list[Strip]] = {}
            for piece in pieces:
                lines = kept.get(piece)
                if lines is None:
                    # The piece still being written: the blocks it had at the last
                    # flush are kept, only its newest is rendered again.
                    parts = split_blocks(piece)
                    for part in parts:
                        rendered[part] = kept.get(part) or render_markdown(part, width, dark=dark)
                    lines = joined([rendered[part] for part in parts], width)
                rendered[piece] = lines
            return rendered

        rendered = await asyncio.to_thread(render_new)
        if asked != self._asked:
            return
        height = self.height
        self._lines = joined([rendered[piece] for piece in pieces], width)
        self._rendered, self._rendered_as = rendered, style
        self.painted.clear()
        self.refresh(layout=self.height != height)

    def drop_first(self, count: int) -> list[str]:
        """Stop showing the first `count` pieces; returns them."""
        dropped, self.pieces = self.pieces[:count], self.pieces[count:]
        self._drop()
        return dropped

    def drop_last(self) -> str:
        """Stop showing the last piece; returns it."""
        last = self.pieces.pop()
        self._drop()
        return last

    def _drop(self) -> None:
        self._asked += 1  # a render still in flight would bring the dropped pieces back
        kept = [self._rendered.get(piece) for piece in self.pieces]
        if any(lines is None for lines in kept):  # never rendered: render them now
            self.call_later(self.show, list(self.pieces))
            return
        self._lines = joined([lines for lines in kept if lines is not None], self._rendered_as[0])
        self.refresh(layout=True)

    def follow(self, lines: int | None) -> None:
        """Show only the last `lines` lines (the log follows the stream), or all (None).

        Showing all again while scrolled up keeps in place the lines in view: they
        move down by the lines that appear above them, and so does the scroll."""
        if lines == self.tail:
            return
        hidden = len(self._lines) - self.height
        self.tail = lines
        self.refresh(layout=True)
        scroller = scroller_of(self)
        if lines is None and hidden and scroller is not None:
            self.call_after_refresh(
                scroller.scroll_to,
                y=scroller.scroll_y + hidden,
                animate=False,
                release_anchor=False,
            )

    def on_mount(self) -> None:
        scroller = scroller_of(self)
        if scroller is not None:
            self.watch(scroller, "scroll_y", self._scrolled, init=False)

    def _scrolled(self) -> None:
        scroller = scroller_of(self)
        if self.tail is not None and scroller is not None and not shows_end(scroller):
            self.follow(None)  # the user scrolled up: the lines above the tail are wanted

    def _width_in(self, parent: object) -> int:
        # Not laid out yet (just mounted): the width it will get in its parent.
        if not isinstance(parent, Widget):
            return 0
        return parent.content_region.width - self.styles.gutter.width

    async def on_resize(self) -> None:
        if self.pieces and self.size.width and self.size.width != self._rendered_as[0]:
            await self.show(self.pieces)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return self.height

    def render_line(self, y: int) -> Strip:
        height = self.height
        if y >= height - 1:  # the compositor paints only what is on screen
            self.painted.set()
        if y < height:
            return self._lines[len(self._lines) - height + y]
        return Strip.blank(self.size.width)
