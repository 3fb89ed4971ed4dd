"""The assistant reply widget and the table of item widgets by stored item type.

Everything from the model goes through `terminal_safe` and is rendered as Markdown,
never parsed as console markup, so a reply cannot inject styles or escape sequences.
The plain items (messages, tool calls, notes) live in `plain_items`: the chat screen's
first frame needs only those, and this module (Markdown: markdown-it, Pygments, Rich's
Markdown) loads after it, in the startup thread (`QwenmemApp`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.geometry import Size
from textual.widget import Widget
from textual.widgets import Markdown

from qwenmem_tui.tui.terminal_text import terminal_safe
from qwenmem_tui.tui.widgets.frozen_blocks import (
    FrozenBlocks,
    estimated_height,
    piece_markdown,
    scroller_of,
    shows_end,
    split_finished,
    top_level_blocks,
)
from qwenmem_tui.tui.widgets.plain_items import (
    ErrorItem,
    InfoItem,
    InterruptedMark,
    ItemWidgetFactory,
    MessageView,
    UserItem,
)
from qwenmem_tui.tui.widgets.stream_pace import StreamPace, wrapped_lines
from qwenmem_tui.tui.widgets.stream_preview import StreamPreview


class AssistantItem(MessageView, Vertical):
    """An assistant reply: Markdown, streamed while it arrives, final when it is stored.

    Deltas are buffered and appended in batches, at most every FLUSH_MIN seconds
    (PREVIEW_FLUSH_MIN while previewing) and backing off to three times as long as the
    loop was last blocked (capped at FLUSH_MAX), so rendering takes a bounded share of
    the loop and reading keeps up.

    Only the block still being written is re-laid out: an append re-lays out the
    Markdown widget it goes to, at a cost that grows with its blocks, so the live
    Markdown keeps at most about FREEZE_AT of them. Once it has more, it is frozen as
    it is (never appended to again: Textual's arrangement cache keeps its layout) and
    the unfinished tail goes to a new live Markdown after it.

    A stream of PREVIEW_FROM lines a second or more (line breaks and wrapping) outruns
    what Markdown widgets can be built for (a few milliseconds a line, 100-250 ms a
    screenful, on the UI loop): its last screenful is then a `StreamPreview` (rendered
    in a thread, one widget) and what scrolls above it waits in one `FrozenBlocks`,
    mounted as Markdown piece by piece as it is shown. While the log follows the
    stream, the preview holds up to PREVIEW_SCREENS screens and is one screen tall (it
    shows its last lines), so most flushes repaint it without a layout. Below
    PREVIEW_UNTIL lines a second, and when the stream ends, the preview turns into
    Markdown, a piece a frame: the reply left on screen is the one shown at once.

    Frozen Markdown that has scrolled more than a screen above the view goes back to
    `FrozenBlocks` of its exact height: every mounted block widget costs each layout
    of the screen (Textual arranges the whole tree), so a long reply would otherwise
    slow every frame down as it grows.
    """

    FLUSH_MIN = 1 / 30
    PREVIEW_FLUSH_MIN = 1 / 12
    BURST_FLUSH_MIN = 1 / 4
    FLUSH_MAX = 1.0
    FREEZE_AT = 8
    PREVIEW_FROM = 20
    PREVIEW_UNTIL = 10
    PAINT_TIMEOUT = 0.25
    PREVIEW_SCREENS = 4
    CONVERT_AT = 3

    def __init__(
        self,
        markdown: str = "",
        *,
        interrupted: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self._clock = clock  # what the stream's pace is measured on
        self._markdown = terminal_safe(markdown)
        self._interrupted = interrupted
        self._pending: list[str] = []
        self._stream_done = asyncio.Event()
        self._pump_task: asyncio.Task[None] | None = None
        self._live_text = ""
        self._pace = StreamPace()

    def compose(self) -> ComposeResult:
        # A long stored reply is cut as a streamed one is frozen: what is off screen
        # waits as FrozenBlocks instead of mounting every block on resume.
        *finished, tail = split_finished(self._markdown, every=self.FREEZE_AT)
        if finished:
            yield FrozenBlocks(finished)
        yield piece_markdown(tail)
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
        live: Markdown | StreamPreview = self.query(Markdown).last()
        self._live_text = live.source
        loop = asyncio.get_running_loop()
        interval = self.FLUSH_MIN
        while self._pending or not self._stream_done.is_set():
            screens = 0.0  # screens of lines this flush brought
            if self._pending:
                text = "".join(self._pending)
                self._pending.clear()
                self._markdown += text
                now = self._clock()
                lines = wrapped_lines(text, self.content_region.width)
                self._pace.add(now, lines)
                scroller = scroller_of(self)
                screens = lines / max(1, scroller.size.height if scroller is not None else 0)
                # Shielded: a half-applied flush would leave the widgets inconsistent.
                live = await asyncio.shield(self._flush(live, text, now))
            started = loop.time()
            with suppress(TimeoutError):
                await asyncio.wait_for(self._stream_done.wait(), interval)
            interval = self.flush_interval(
                live, blocked=loop.time() - started - interval, screens=screens
            )
        if isinstance(live, StreamPreview):
            # The last words on screen first: a screenful turning into Markdown widgets
            # takes 100-300 ms, in a batch that holds every paint meanwhile (a fast
            # reply's end came to the screen only after it).
            await self._until_painted(live)
            await asyncio.shield(self._end_preview(live))

    async def _until_painted(self, preview: StreamPreview) -> None:
        """Return once the screen has painted the end of what `preview` shows, or after
        PAINT_TIMEOUT seconds without (scrolled out of view, the widget going)."""
        with suppress(TimeoutError):
            await asyncio.wait_for(preview.painted.wait(), self.PAINT_TIMEOUT)

    def flush_interval(self, live: Widget, *, blocked: float, screens: float = 0.0) -> float:
        """Seconds to the next flush: three times as long as the loop was last blocked
        (`blocked`), within FLUSH_MIN (PREVIEW_FLUSH_MIN while previewing, BURST_FLUSH_MIN
        after a flush that brought a screenful or more: `screens`) and FLUSH_MAX.

        A preview's frame is a repaint of the whole screen (every line moves up), and a
        stream fast enough to be previewed scrolls by faster than it can be read: 12
        frames a second (Markdown's pace is 30) cost under half the CPU and look the same.
        A burst (a provider at full speed: a screen or more a frame) is a blur at any
        pace: its frames and their rendering were half of what it cost to read, and the
        last words came later for them. Its end is flushed at once whatever the pace."""
        floor = self.PREVIEW_FLUSH_MIN if isinstance(live, StreamPreview) else self.FLUSH_MIN
        if screens >= 1:
            floor = max(floor, self.BURST_FLUSH_MIN)
        return min(self.FLUSH_MAX, max(floor, 3 * blocked))

    async def _flush(
        self, live: Markdown | StreamPreview, text: str, now: float
    ) -> Markdown | StreamPreview:
        """Show `text` after what `live` shows; returns what to show the next text in."""
        scroller = scroller_of(self)
        view = scroller.size.height if scroller is not None else 0
        # What lies above the view is known from heights alone only while it follows
        # the end: only then is frozen Markdown retired (see _retire_unseen).
        following = view if scroller is not None and shows_end(scroller) else 0
        pace = self.PREVIEW_UNTIL if isinstance(live, StreamPreview) else self.PREVIEW_FROM
        if view and self._pace.lines(now) >= pace:
            return await self._flush_preview(live, text, view, following)
        if isinstance(live, StreamPreview):
            live = await self._end_preview(live)
        return await self._flush_markdown(live, text, following)

    async def _flush_preview(
        self, live: Markdown | StreamPreview, text: str, view: int, following: int
    ) -> StreamPreview:
        """Show the newest of what `live` shows and `text` in a StreamPreview; what comes
        before it waits as FrozenBlocks.

        While the log follows the stream the preview holds up to PREVIEW_SCREENS screens
        (it shows the last one): a flush that only repaints it costs no layout, and the
        oldest pieces move to FrozenBlocks only when it is full, down to a screenful."""
        preview = live if isinstance(live, StreamPreview) else StreamPreview()
        # Its finished pieces stay as they are: only its last one and `text` are cut (in
        # a thread: a burst is tens of kB of Markdown to parse).
        kept = preview.pieces[:-1] if preview is live else []
        growing = preview.pieces[-1] if preview is live and preview.pieces else self._live_text
        cut = await asyncio.to_thread(split_finished, growing + text, every=self.FREEZE_AT)
        pieces = [*kept, *cut]
        frozen = self._beyond(pieces, view, hold=view * self.PREVIEW_SCREENS if following else view)
        tail = view if following else None
        if preview is not live:
            preview.tail = tail
            await self.mount(preview, after=live)
        else:
            preview.follow(tail)
        await preview.show(pieces[frozen:])
        with self.app.batch_update():
            if preview is not live:
                await live.remove()
            await self._freeze(pieces[:frozen], before=preview)
            await self._retire_unseen(preview, following)
        self._live_text = preview.source
        return preview

    def _beyond(self, pieces: Sequence[str], view: int, *, hold: int) -> int:
        """How many of the first `pieces` to freeze: none while they are about `hold`
        lines or fewer, else all but the last ones that fill `view` lines."""
        width = self.content_region.width
        heights = [estimated_height(piece, width) for piece in pieces]
        total = sum(heights)
        if total <= hold:
            return 0
        first = 0
        while first < len(pieces) - 1 and total - heights[first] >= view:
            total -= heights[first]
            first += 1
        return first

    async def _end_preview(self, preview: StreamPreview) -> Markdown:
        """Turn the preview into Markdown (the last piece live); returns the live one.

        What lies above its last screenful is frozen first (unseen: no widgets), then
        the rest turns into Markdown a piece of CONVERT_AT blocks at a time from the
        bottom, a frame each: a screenful of Markdown widgets built and laid out at once
        held the loop (and the user's keys) for 100-300 ms."""
        scroller = scroller_of(self)
        view = scroller.size.height if scroller is not None else 0
        preview.tail = None
        with self.app.batch_update():
            unseen = preview.drop_first(self._beyond(preview.pieces, view, hold=view))
            await self._freeze(unseen, before=preview)
        # Smaller steps: a frame builds a few blocks (the lines shown stay the same).
        finer = [
            part for piece in preview.pieces for part in split_finished(piece, every=self.CONVERT_AT)
        ]
        if len(finer) > len(preview.pieces):
            await preview.show(finer)
        live: Markdown | None = None
        while preview.pieces:
            with self.app.batch_update():
                piece = preview.drop_last()
                if live is None:
                    live = await self._mount_live(piece, after=preview)
                    self._live_text = piece
                else:
                    await self.mount(piece_markdown(piece), after=preview)
            if preview.pieces:
                await self._next_frame()
        if live is None:
            live = await self._mount_live("", after=preview)
            self._live_text = ""
        await preview.remove()
        return live

    async def _next_frame(self) -> None:
        """Return once the screen has been refreshed, or after PAINT_TIMEOUT seconds
        without (the app going)."""
        drawn = asyncio.Event()
        self.call_after_refresh(drawn.set)
        with suppress(TimeoutError):
            await asyncio.wait_for(drawn.wait(), self.PAINT_TIMEOUT)

    async def _mount_live(self, tail: str, *, after: Widget) -> Markdown:
        """A new live piece holding `tail`, ready for appends.

        Mounted empty, then appended to: Textual's `Markdown.update` (what a Markdown
        built with text runs at mount) records the source's last *line* as the point
        the next `append` re-parses from, not the last block's first line, so a live
        piece that began inside a multi-line block (a paragraph with a line break, a
        list) showed only that block's last line after the next append. `append`
        records the block's start."""
        live = piece_markdown("")
        await self.mount(live, after=after)
        if tail:
            await live.append(tail)
        return live

    async def _flush_markdown(self, live: Markdown, text: str, following: int) -> Markdown:
        """Append `text` to `live`, freezing it once it holds FREEZE_AT blocks."""
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
        with self.app.batch_update():
            await live.append(first[len(self._live_text) :])
            successor = await self._mount_live(tail, after=live)
            await self._freeze(middle, before=successor)
            await self._retire_unseen(successor, following)
        self._live_text = tail
        return successor

    async def _retire_unseen(self, live: Widget, view: int) -> None:
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
        for markdown in reversed(unseen):  # top down: each joins the one retired before
            await self._freeze([markdown.source], before=markdown, measured=[markdown.outer_size])
            await markdown.remove()

    def _sibling_before(self, child: Widget) -> Widget | None:
        index = self.children.index(child)
        return self.children[index - 1] if index else None

    async def _freeze(
        self, pieces: list[str], *, before: Widget, measured: Sequence[Size | None] = ()
    ) -> None:
        """Put `pieces` right before `before`, in the FrozenBlocks already there if any:
        one widget whatever the length of the reply. `measured`: their exact sizes (a
        Markdown retired), so the placeholder is exactly as tall."""
        if not pieces:
            return
        previous = self._sibling_before(before)
        if isinstance(previous, FrozenBlocks):
            previous.extend(pieces, measured)
        else:
            await self.mount(FrozenBlocks(pieces, measured), before=before)

    def on_unmount(self) -> None:
        if self._pump_task is not None:
            self._pump_task.cancel()

    async def mark_interrupted(self) -> None:
        """Show that the reply was cut short (Esc or an error mid-stream)."""
        if not self._interrupted:
            self._interrupted = True
            await self.mount(InterruptedMark())


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
}
