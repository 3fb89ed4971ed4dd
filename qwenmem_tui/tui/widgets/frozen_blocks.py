"""A long reply cut into pieces of Markdown, and the pieces nobody is looking at.

Textual's Markdown builds a widget per block, and every mounted widget costs each
layout of the screen a little (Textual arranges the whole tree). A reply of thousands
of blocks would make every frame slow, so a reply is cut into pieces of a few blocks
and the pieces off screen wait in one `FrozenBlocks`: blank lines of their height,
swapped for Markdown piece by piece as they come into view.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from itertools import accumulate

from markdown_it import MarkdownIt
from rich.cells import cell_len
from textual.content import Content
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Markdown

SPLIT_BEFORE = frozenset({"paragraph_open", "bullet_list_open", "ordered_list_open"})
"""Top-level blocks a reply may be cut before. Textual gives them no top margin, and
margins collapse between sibling blocks but not across two Markdown widgets: a cut
before any other block would add a blank line the reply rendered at once has not."""


@cache
def markdown_parser() -> MarkdownIt:
    """One parser for every reply's Markdown widgets. Textual builds a new one per
    update otherwise, ~4 ms a time (linkify compiles its regexes), on every flush."""
    return MarkdownIt("gfm-like")


@cache
def _block_parser() -> MarkdownIt:
    # Where blocks start is all a cut needs: no inline parsing (4x faster).
    parser = MarkdownIt("gfm-like")
    parser.core.ruler.disable(
        ["inline", "linkify", "replacements", "smartquotes", "text_join"], ignoreInvalid=True
    )
    return parser


def top_level_blocks(source: str) -> list[tuple[int, str]]:
    """(first line, token type) of each top-level Markdown block of `source`."""
    return [
        (token.map[0], token.type)
        for token in _block_parser().parse(source)
        if token.level == 0 and token.map is not None and token.nesting >= 0
    ]


def split_finished(source: str, *, every: int, after: int = 0) -> list[str]:
    """`source` cut into pieces of at least `every` finished blocks, then the rest.

    Only cuts before a block of SPLIT_BEFORE, never before block `after` or earlier
    (those may still grow) and never after the last block (it may still grow). The
    pieces joined are `source`; the last one is the unfinished tail.
    """
    blocks = top_level_blocks(source)
    cuts: list[int] = []
    start = 0
    for index in range(max(every, after + 1), len(blocks)):
        line, kind = blocks[index]
        if index - start >= every and kind in SPLIT_BEFORE:
            cuts.append(line)
            start = index
    return _cut_before(source, cuts)


def split_blocks(source: str) -> list[str]:
    """`source` cut before each of its top-level blocks (joined, they are `source`).

    For Rich's rendering, not Textual's widgets: Rich renders each block on its own and
    puts one blank line between two, so any cut renders alike."""
    return _cut_before(source, [line for line, _kind in top_level_blocks(source)][1:])


def _cut_before(source: str, cuts: list[int]) -> list[str]:
    """`source` cut before each of the lines `cuts` (ascending): the pieces join to it."""
    if not cuts:
        return [source]
    lines = source.splitlines(keepends=True)
    pieces: list[str] = []
    previous = 0
    for line in cuts:
        pieces.append("".join(lines[previous:line]))
        previous = line
    pieces.append("".join(lines[previous:]))
    return pieces


def estimated_height(source: str, width: int) -> int:
    """About the lines Markdown makes of `source` at `width`: its wrapped source lines
    (blank ones included: they become the margins between blocks)."""
    width = max(1, width)
    return sum(max(1, -(-cell_len(line) // width)) for line in source.splitlines())


def scroller_of(widget: Widget) -> Widget | None:
    """The nearest ancestor that scrolls vertically (the conversation log), whether or
    not its content overflows yet."""
    return next(
        (
            node
            for node in widget.ancestors
            if isinstance(node, Widget) and node.styles.overflow_y in ("auto", "scroll")
        ),
        None,
    )


def shows_end(scroller: Widget) -> bool:
    """`scroller` shows its last line. (Anchored while its content is shorter than the
    view, Textual leaves its scroll_y below 0, which is not its scroll end.)"""
    return scroller.max_scroll_y == 0 or scroller.is_vertical_scroll_end


def piece_markdown(source: str) -> Markdown:
    """The Markdown widget of one piece of a reply."""
    return Markdown(source, parser_factory=markdown_parser)


class FrozenBlocks(Widget):
    """Finished pieces of a reply that are not on screen, in one widget.

    Blank lines of their height until part of it is shown: the pieces shown are then
    mounted as Markdown in its place, the pieces before and after stay frozen. A
    piece's height is exact when it was measured at this width (a Markdown retired),
    else estimated from its source.
    """

    DEFAULT_CSS = "FrozenBlocks { height: auto; }"

    def __init__(self, pieces: Sequence[str] = (), measured: Sequence[Size | None] = ()) -> None:
        super().__init__()
        self.pieces = list(pieces)
        self._measured: list[Size | None] = list(measured) or [None] * len(self.pieces)
        self._heights: list[int] = []  # of the pieces at `_width`
        self._width = 0
        self._showing = False

    @property
    def source(self) -> str:
        return "".join(self.pieces)

    def extend(self, pieces: Sequence[str], measured: Sequence[Size | None] = ()) -> None:
        """Freeze more pieces after these (`measured`: their exact sizes, where known)."""
        self.pieces.extend(pieces)
        self._measured.extend(measured or [None] * len(pieces))
        self.refresh(layout=True)

    def _piece_heights(self, width: int) -> list[int]:
        # Kept per width and grown as pieces are added: layout asks on every frame.
        if width != self._width:
            self._width, self._heights = width, []
        for piece, size in zip(
            self.pieces[len(self._heights) :], self._measured[len(self._heights) :]
        ):
            exact = size is not None and size.width == width
            self._heights.append(size.height if size is not None and exact else estimated_height(piece, width))
        return self._heights

    def render(self) -> Content:
        return Content("")

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return sum(self._piece_heights(width))

    def render_lines(self, crop: Region) -> list[Strip]:
        # The compositor renders only what is visible: the cue to turn those lines real.
        if not self._showing:
            self._showing = True
            self.call_later(self._show_markdown, crop.y, crop.bottom)
        return super().render_lines(crop)

    async def _show_markdown(self, top: int, bottom: int) -> None:
        parent = self.parent
        if not isinstance(parent, Widget) or not self.pieces:
            return
        heights = self._piece_heights(self.size.width)
        starts = [0, *accumulate(heights)][:-1]
        shown = [
            index
            for index, start in enumerate(starts)
            if start < bottom and start + heights[index] > top
        ] or [len(self.pieces) - 1]
        first, last = shown[0], shown[-1] + 1
        markdowns = [piece_markdown(piece) for piece in self.pieces[first:last]]
        widgets: list[Widget] = [*markdowns]
        if first:
            widgets.insert(0, FrozenBlocks(self.pieces[:first], self._measured[:first]))
        if last < len(self.pieces):
            widgets.append(FrozenBlocks(self.pieces[last:], self._measured[last:]))
        scroller = scroller_of(self)
        # Scrolling up into it: the lines below the viewport's top must not move when
        # the estimates are replaced by real heights. (At the bottom the anchor keeps
        # the newest line in place by itself.)
        above = (
            scroller is not None
            and scroller.scroll_y < scroller.max_scroll_y
            and self.region.y + starts[first] < scroller.scrollable_content_region.y
        )
        old_height = sum(heights[first:last])
        with self.app.batch_update():
            await parent.mount_all(widgets, after=self)
            await self.remove()
        if above and scroller is not None:

            def keep_place() -> None:
                new_height = sum(markdown.outer_size.height for markdown in markdowns)
                scroller.scroll_to(
                    y=scroller.scroll_y + new_height - old_height,
                    animate=False,
                    release_anchor=False,
                )

            self.app.call_after_refresh(keep_place)

