"""The conversation's item widgets: thin views over text, no I/O.

Everything from the model or a tool goes through `terminal_safe` and is rendered as
`Content` / Markdown, never parsed as console markup, so a reply cannot inject styles
or escape sequences.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from contextlib import suppress
from functools import cache
from typing import Self

from markdown_it import MarkdownIt
from rich.cells import cell_len
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.geometry import Region, Size
from textual.reactive import reactive
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Collapsible, Markdown, Static

from qwenmem_tui.storage.sessions import Item
from qwenmem_tui.tui.terminal_text import terminal_safe

TOOL_RESULT_MAX_LINES = 40
TOOL_ARGS_MAX_CHARS = 80
PIN_LABEL = "📌 pinned"


class MessageView(Widget):
    """A user or assistant message in the log, linked to the stored item it shows.

    The item id is what a pin (or any other intent about this message) acts on; a
    streamed reply has none until the session has stored it. `pinned` mirrors the
    item's `meta["pinned"]`, so the user sees what compaction will carry verbatim.
    """

    pinned: reactive[bool] = reactive(False)
    item_id: int | None = None

    def link(self, item: Item) -> Self:
        """Show `item`'s state (its pin) and act on it from now on."""
        self.item_id = item.id
        self.pinned = bool(item.meta.get("pinned"))
        return self

    def watch_pinned(self, pinned: bool) -> None:
        self.set_class(pinned, "-pinned")
        self.border_title = PIN_LABEL if pinned else None


class UserItem(MessageView, Static):
    """A message the user sent."""

    def __init__(self, text: str) -> None:
        super().__init__(Content(terminal_safe(text)))


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


class FrozenBlocks(Widget):
    """Finished blocks of a reply that are not on screen: blank lines of their height,
    swapped for the real Markdown the first time they are shown.

    A long reply streamed at full speed or resumed would otherwise mount every block
    (a few ms each) although the user sees only the last screenful; and every mounted
    widget costs each later layout a little, so blocks that scrolled far out of view
    come back here too. Their height is exact when it was measured at this width (a
    Markdown retired), else estimated from the source.
    """

    DEFAULT_CSS = "FrozenBlocks { height: auto; }"

    def __init__(self, source: str, *, measured: Size | None = None) -> None:
        super().__init__()
        self.source = source
        self._measured = measured
        self._showing = False

    @classmethod
    def retiring(cls, markdown: Markdown) -> FrozenBlocks:
        """A placeholder exactly as tall as `markdown` is now, showing its source later."""
        return cls(markdown.source, measured=markdown.outer_size)

    def render(self) -> Content:
        return Content("")

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        if self._measured is not None and self._measured.width == width:
            return self._measured.height
        return estimated_height(self.source, width)

    def render_lines(self, crop: Region) -> list[Strip]:
        # The compositor renders only widgets with a visible part: the cue to turn real.
        if not self._showing:
            self._showing = True
            self.call_later(self._show_markdown)
        return super().render_lines(crop)

    async def _show_markdown(self) -> None:
        parent = self.parent
        if not isinstance(parent, Widget):
            return
        markdown = Markdown(self.source, parser_factory=markdown_parser)
        scroller = scroller_of(self)
        # Scrolling up into it: the lines below the viewport's top must not move when
        # the estimate is replaced by the real height. (At the bottom the anchor keeps
        # the newest line in place by itself.)
        above = (
            scroller is not None
            and scroller.scroll_y < scroller.max_scroll_y
            and self.region.y < scroller.scrollable_content_region.y
        )
        old_height = self.outer_size.height
        await parent.mount(markdown, after=self)
        await self.remove()
        if above and scroller is not None:

            def keep_place() -> None:
                scroller.scroll_to(
                    y=scroller.scroll_y + markdown.outer_size.height - old_height,
                    animate=False,
                    release_anchor=False,
                )

            self.app.call_after_refresh(keep_place)


class AssistantItem(MessageView, Vertical):
    """An assistant reply: Markdown, streamed while it arrives, final when it is stored.

    Deltas are buffered and appended in batches, at most every FLUSH_MIN seconds and
    backing off to three times as long as the loop was last blocked (capped at
    FLUSH_MAX), so rendering takes a bounded share of the loop and reading keeps up.

    Only the block still being written is re-laid out: an append re-lays out the
    Markdown widget it goes to, at a cost that grows with its blocks, so the live
    Markdown keeps at most about FREEZE_AT of them. Once it has more, it is frozen as
    it is (never appended to again: Textual's arrangement cache keeps its layout) and
    the unfinished tail goes to a new live Markdown after it. Whatever a single flush
    finishes beyond that (a burst at full speed) becomes `FrozenBlocks`, mounted as
    Markdown only when it is shown, so a flush mounts a bounded number of blocks.

    Frozen Markdown that has scrolled more than a screen above the view goes back to
    `FrozenBlocks` of its exact height: every mounted block widget costs each layout
    of the screen (Textual arranges the whole tree), so a long reply would otherwise
    slow every frame down as it grows.
    """

    FLUSH_MIN = 1 / 30
    FLUSH_MAX = 1.0
    FREEZE_AT = 8

    def __init__(self, markdown: str = "", *, interrupted: bool = False) -> None:
        super().__init__()
        self._markdown = terminal_safe(markdown)
        self._interrupted = interrupted
        self._pending: list[str] = []
        self._stream_done = asyncio.Event()
        self._pump_task: asyncio.Task[None] | None = None
        self._live_text = ""

    def compose(self) -> ComposeResult:
        # A long stored reply is cut as a streamed one is frozen: what is off screen
        # waits as FrozenBlocks instead of mounting every block on resume.
        *finished, tail = split_finished(self._markdown, every=self.FREEZE_AT)
        yield from map(FrozenBlocks, finished)
        yield Markdown(tail, parser_factory=markdown_parser)
        if self._interrupted:
            yield InterruptedMark()

    def append(self, text: str) -> None:
        """Queue streamed text; it reaches the screen on the next flush."""
        self._pending.append(terminal_safe(text))
        if self._pump_task is None:
            self._pump_task = asyncio.create_task(self._pump())

    async def end_stream(self) -> None:
        """Flush what is left and stop streaming; safe to call more than once."""
        self._stream_done.set()
        if self._pump_task is not None:
            await self._pump_task

    async def _pump(self) -> None:
        live = self.query(Markdown).last()
        self._live_text = live.source
        loop = asyncio.get_running_loop()
        interval = self.FLUSH_MIN
        while self._pending or not self._stream_done.is_set():
            if self._pending:
                text = "".join(self._pending)
                self._pending.clear()
                self._markdown += text
                # Shielded: a half-applied flush would leave the widgets inconsistent.
                live = await asyncio.shield(self._flush(live, text))
            started = loop.time()
            with suppress(TimeoutError):
                await asyncio.wait_for(self._stream_done.wait(), interval)
            blocked = loop.time() - started - interval
            interval = min(self.FLUSH_MAX, max(self.FLUSH_MIN, 3 * blocked))

    async def _flush(self, live: Markdown, text: str) -> Markdown:
        """Show `text` after what `live` shows; returns the Markdown to append to next."""
        buffer = self._live_text + text
        # Parsing to find the cuts costs more than most appends: only when there may be
        # FREEZE_AT blocks (a block needs a line of its own).
        could_cut = len(live.children) + text.count("\n") >= self.FREEZE_AT
        shown_blocks = len(top_level_blocks(self._live_text)) if could_cut else 0
        pieces = (
            split_finished(buffer, every=self.FREEZE_AT, after=shown_blocks - 1)
            if could_cut
            else [buffer]
        )
        if len(pieces) == 1 or not pieces[0].startswith(self._live_text):
            # (The second: the new text re-parsed what `live` shows; never seen, but
            # then freezing `live` as it is would be wrong.)
            self._live_text = buffer
            await live.append(text)
            return live
        # The first piece completes what `live` shows: it is frozen with it.
        first, *middle, tail = pieces
        # A burst: the newest pieces fill the view by themselves, so what comes before
        # them would be mounted only to scroll out of sight at once. The new live
        # Markdown takes a screenful; the rest, `live` included, waits unmounted. (Only
        # while the view follows the end: a user reading above keeps what they read.)
        scroller = scroller_of(self)
        following = scroller is not None and scroller.is_vertical_scroll_end
        view = scroller.size.height if scroller is not None and following else 0
        width = live.content_region.width
        tail_height = estimated_height(tail, width)
        while middle and tail_height < view:
            piece = middle.pop()  # pieces end with a line break: their heights add up
            tail = piece + tail
            tail_height += estimated_height(piece, width)
        successor = Markdown(tail, parser_factory=markdown_parser)
        with self.app.batch_update():
            if view and tail_height >= view:
                hidden = [first, *middle]  # `first` holds what `live` shows
                await self.mount_all([*map(FrozenBlocks, hidden), successor], after=live)
                await live.remove()
            else:
                await live.append(first[len(self._live_text) :])
                await self.mount_all([*map(FrozenBlocks, middle), successor], after=live)
                await self._retire_unseen(successor, view)
        self._live_text = tail
        return successor

    async def _retire_unseen(self, live: Markdown, view: int) -> None:
        """Swap frozen Markdown far above the view for placeholders of its height.

        `view`: the lines the log shows while it follows its end, else 0 (nothing is
        retired). Only then is what lies above known from the heights alone: asking the
        compositor where a widget is would lay out the whole tree again. A screen of
        slack above the view: scrolling back a little finds the real widgets still there.
        """
        if not view:
            return
        below = 0  # lines of this reply under the child (the view shows the last ones)
        unseen: list[Markdown] = []
        for child in reversed(self.children):
            height = child.outer_size.height
            if below > view and isinstance(child, Markdown) and height:
                if child is not live:
                    unseen.append(child)
            below += height
        for markdown in unseen:
            await self.mount(FrozenBlocks.retiring(markdown), before=markdown)
        if unseen:
            await self.remove_children(unseen)

    def on_unmount(self) -> None:
        if self._pump_task is not None:
            self._pump_task.cancel()

    async def mark_interrupted(self) -> None:
        """Show that the reply was cut short (Esc or an error mid-stream)."""
        if not self._interrupted:
            self._interrupted = True
            await self.mount(InterruptedMark())


class InterruptedMark(Static):
    """The dim tag under a reply that was cut short."""

    def __init__(self) -> None:
        super().__init__(Content("⏹ interrupted"))


def format_tool_call(name: str, arguments: str) -> str:
    """`name(key=value, …)` on one line, shortened; raw text when it is not a JSON object."""
    try:
        parsed = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        args = ", ".join(
            f"{key}={json.dumps(value, ensure_ascii=False)}" for key, value in parsed.items()
        )
    else:
        args = arguments
    args = " ".join(args.split())
    if len(args) > TOOL_ARGS_MAX_CHARS:
        args = args[: TOOL_ARGS_MAX_CHARS - 1] + "…"
    return terminal_safe(f"{name}({args})")


def clip_tool_result(result: str) -> str:
    """The first lines of a result; a tool can return tens of kilobytes."""
    lines = terminal_safe(result).splitlines() or [""]
    if len(lines) <= TOOL_RESULT_MAX_LINES:
        return "\n".join(lines)
    hidden = len(lines) - TOOL_RESULT_MAX_LINES
    return "\n".join(lines[:TOOL_RESULT_MAX_LINES] + [f"… {hidden} more lines"])


class ToolCallItem(Collapsible):
    """A tool call: name and arguments as the title, the result inside (collapsed)."""

    def __init__(self, name: str, arguments: str) -> None:
        self._call = format_tool_call(name, arguments)
        self._result = Static(Content("running…"), classes="tool-result")
        # Collapsible's title is typed str but accepts Content (a literal title).
        title = self._heading("…")
        super().__init__(self._result, title=title, collapsed=True)  # type: ignore[arg-type]
        self.add_class("-running")

    def _heading(self, status: str) -> Content:
        # Collapsible parses str titles as markup; Content is literal.
        return Content.assemble((status, "bold"), " ", self._call)

    def finish(self, result: str, *, is_error: bool) -> None:
        """Show the result (or the error) and the final status."""
        self.remove_class("-running")
        self.set_class(is_error, "-error")
        self._result.update(Content(clip_tool_result(result)))
        self.title = self._heading("✗" if is_error else "✓")  # type: ignore[assignment]


class InfoItem(Static):
    """A note from qwenmem itself (command output, hints)."""

    def __init__(self, text: str) -> None:
        super().__init__(Content(terminal_safe(text)))


class ErrorItem(Static):
    """One line saying what went wrong; never a traceback."""

    def __init__(self, text: str) -> None:
        line = " ".join(terminal_safe(text).split())
        super().__init__(Content.assemble(("✗ ", "bold"), line))


class DimItem(Static):
    """A dimmed line for display items without a dedicated widget."""

    def __init__(self, text: str, label: str = "") -> None:
        body = terminal_safe(text)
        super().__init__(Content.assemble((label, "bold"), body) if label else Content(body))


ItemWidgetFactory = Callable[[Item], Widget | None]
"""Builds the widget for a stored display item; None shows nothing."""


def _away_recap_line(item: Item) -> Widget:
    # Fallback until the recap widget registers itself for "away_recap".
    return DimItem(item.content, label="※ recap: ")


DEFAULT_ITEM_WIDGETS: Mapping[str, ItemWidgetFactory] = {
    "user": lambda item: UserItem(item.content).link(item),
    "assistant": lambda item: (
        AssistantItem(item.content, interrupted=bool(item.meta.get("interrupted"))).link(item)
        if item.content.strip() or item.meta.get("interrupted")
        else None  # an assistant turn that only called tools: its ToolCallItems say it all
    ),
    "info": lambda item: InfoItem(item.content),
    "error": lambda item: ErrorItem(item.content),
    "system": lambda item: None,
    "away_recap": _away_recap_line,
}
