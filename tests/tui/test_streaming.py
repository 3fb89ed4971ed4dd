"""A long reply streamed looks exactly as the same reply shown at once, and streaming it
keeps finished blocks frozen (only the block still being written is laid out again)."""

from __future__ import annotations

import math
import re
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from textual.geometry import Size
from textual.widget import Widget
from textual.widgets import Markdown

from qwenmem_tui.paths import Paths
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply
from qwenmem_tui.tui.app import QwenmemApp
from qwenmem_tui.tui.widgets.chat_log import ChatLog
from qwenmem_tui.tui.widgets.frozen_blocks import FrozenBlocks, split_finished
from qwenmem_tui.tui.widgets.items import AssistantItem
from qwenmem_tui.tui.widgets.stream_pace import StreamPace, wrapped_lines
from qwenmem_tui.tui.widgets.stream_preview import StreamPreview

from .conftest import FakeClock, conversation, seed_session, send, settle, wait_until

TALL = (100, 700)  # the whole reply fits on screen: every line can be compared
# Three sections hold every kind of block, each next to the others (and a rule before a
# heading); cutting every 5 blocks instead of every 16 puts the cuts (5, 10, 15, 20, 25
# of ~26 blocks) before a different kind of block each time, so a small reply still
# crosses every boundary a wrong cut could change, at a third of the rendering cost.
SECTIONS = 3
CUT_EVERY = 5


@pytest.fixture
def markdown_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """However fast the reply streams, it is shown by Markdown widgets as it comes."""
    monkeypatch.setattr(AssistantItem, "PREVIEW_FROM", math.inf)


@pytest.fixture
def preview_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """However slowly the reply streams, its newest screenful is a preview until it ends."""
    monkeypatch.setattr(AssistantItem, "PREVIEW_FROM", 0)
    monkeypatch.setattr(AssistantItem, "PREVIEW_UNTIL", 0)


def long_reply(sections: int) -> str:
    """Markdown with every kind of block a model writes: headings, paragraphs, lists,
    tables, code fences, quotes and rules, in an order that puts each kind next to
    every other (the margins between them are what a wrong cut would change)."""
    parts = []
    for n in range(sections):
        parts.append(
            f"## Part {n}\n\n"
            f"Paragraph {n} explains the **storage** layer, with `inline code` and a line "
            f"long enough to wrap at a hundred columns, so wrapping is compared too.\n"
            f"A second line of the same paragraph.\n\n"
            f"- point one of {n}\n- point two, *emphasised*\n  - nested under two\n\n"
            f"| key | value |\n|-----|-------|\n| n | {n} |\n| twice | {2 * n} |\n\n"
            f"1. first step\n2. second step\n\n"
            f"```python\ndef step_{n}(x: int) -> int:\n    return x * {n}\n```\n\n"
            f"> a quote about part {n}\n\n"
            f"Closing words of part {n}.\n\n"
            + ("---\n\n" if n % 3 == 0 else "")
        )
    return "".join(parts)


def screen_lines(app: QwenmemApp) -> list[str]:
    """The text of every line of the screen as last composed."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


def reply_lines(app: QwenmemApp) -> list[str]:
    """The screen lines the (only) assistant reply covers."""
    region = app.screen.query_one(AssistantItem).region
    return screen_lines(app)[region.y : region.bottom]


async def shown_at_once(
    make_app: Callable[..., QwenmemApp], text: str, monkeypatch: pytest.MonkeyPatch
) -> list[str]:
    """The lines of `text` rendered as one Markdown widget (the resumed reply, uncut)."""
    monkeypatch.setattr(AssistantItem, "FREEZE_AT", len(text))
    app = make_app(resume=True)
    async with app.run_test(size=TALL) as pilot:
        await settle(pilot)
        item = app.screen.query_one(AssistantItem)
        assert len(item.query_children(Markdown)) == 1
        return reply_lines(app)


@pytest.mark.parametrize(
    ("mode", "chunk_size"),
    [("markdown_only", 3), ("preview_only", 400), ("preview_only", 100_000)],
)
async def test_a_streamed_reply_renders_as_the_reply_shown_at_once(
    fake: FakeOpenAI,
    make_app: Callable[..., QwenmemApp],
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    mode: str,
    chunk_size: int,
) -> None:
    # Markdown: many small flushes (the live Markdown freezes as it goes). Preview: the
    # newest screenful in a preview, what scrolled above as FrozenBlocks until shown;
    # 100_000: one flush brings everything.
    request.getfixturevalue(mode)
    monkeypatch.setattr(AssistantItem, "FREEZE_AT", CUT_EVERY)
    text = long_reply(SECTIONS)
    fake.script(Reply(text, chunk_size=chunk_size))
    app = make_app()
    async with app.run_test(size=(TALL[0], 30)) as pilot:
        await send(pilot, "explain")
        await settle(pilot)
        item = app.screen.query_one(AssistantItem)
        # Streamed into a short view, what scrolled out of it (or never came into it)
        # waits unmounted; a tall view shows it all again.
        await pilot.resize_terminal(*TALL)
        await wait_until(pilot, lambda: not item.query_children(FrozenBlocks))
        await pilot.pause()
        # The reply was really cut into several Markdown widgets...
        assert len(item.query_children(Markdown)) > 2
        streamed = reply_lines(app)
    # ...and shows exactly what one Markdown of the whole reply shows.
    assert streamed == await shown_at_once(make_app, text, monkeypatch)


async def test_a_long_stored_reply_waits_off_screen_and_renders_as_one(
    make_app: Callable[..., QwenmemApp],
    paths: Paths,
    project: Path,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(AssistantItem, "FREEZE_AT", CUT_EVERY)
    text = long_reply(SECTIONS)
    await seed_session(paths, project, "Long reply", conversation("explain", text), clock=clock)
    app = make_app(resume=True)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        # Resumed at the bottom: the pieces above are not mounted as Markdown yet.
        assert app.screen.query_one(AssistantItem).query_children(FrozenBlocks)
    app = make_app(resume=True)
    async with app.run_test(size=TALL) as pilot:
        await settle(pilot)
        item = app.screen.query_one(AssistantItem)
        await wait_until(pilot, lambda: not item.query_children(FrozenBlocks))
        await pilot.pause()
        cut = reply_lines(app)
    assert cut == await shown_at_once(make_app, text, monkeypatch)


async def test_finished_blocks_are_not_laid_out_again_while_the_reply_grows(
    fake: FakeOpenAI,
    make_app: Callable[..., QwenmemApp],
    monkeypatch: pytest.MonkeyPatch,
    markdown_only: None,
) -> None:
    text = long_reply(12)
    half = len(text) // 2 // 5
    gate = threading.Event()
    fake.script(Reply(text, chunk_size=5, stall_after=half, stall_gate=gate))
    appended: list[Markdown] = []
    append = Markdown.append

    def spy(self: Markdown, markdown: str):  # type: ignore[no-untyped-def]
        appended.append(self)
        return append(self, markdown)

    monkeypatch.setattr(Markdown, "append", spy)
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await send(pilot, "explain")
        await wait_until(pilot, lambda: _settled(app, received=half * 5))
        # The stream is stalled: wait until the new blocks' own first layouts are done.
        layouts: dict[int, int] = {}
        while layouts != (layouts := {id(md): md._layout_updates for md in _frozen(app)}):
            await pilot.pause()
        frozen = _frozen(app)
        children = {id(markdown): list(markdown.children) for markdown in frozen}
        appended.clear()
        gate.set()
        await settle(pilot)
        assert app.screen.query_one(AssistantItem)._markdown == text
        # More blocks arrived (appended, or in new widgets when they came as a burst),
        # but never to a frozen Markdown...
        assert not any(markdown in frozen for markdown in appended)
        for markdown in frozen:
            if markdown.parent is None:
                continue  # scrolled far out of view: it waits unmounted now
            # ...whose blocks stayed the same widgets and asked for no layout.
            assert list(markdown.children) == children[id(markdown)]
            assert markdown._layout_updates == layouts[id(markdown)]
        # The live Markdown stayed small whatever the reply's length.
        live = app.screen.query_one(AssistantItem).query_children(Markdown).last()
        assert len(live.children) <= 2 * AssistantItem.FREEZE_AT


def _settled(app: QwenmemApp, *, received: int) -> bool:
    """What came before the stall is in the reply, and every frozen Markdown has mounted
    its blocks (a burst may have left none: then there is nothing to watch)."""
    items = app.screen.query(AssistantItem)
    if not items or len(items.first()._markdown) < received or items.first()._pending:
        return False
    return all(markdown.children for markdown in _frozen(app))


def _frozen(app: QwenmemApp) -> list[Markdown]:
    """Every Markdown of the reply but the live one (the last)."""
    return list(app.screen.query_one(AssistantItem).query_children(Markdown))[:-1]


async def test_a_burst_mounts_only_what_is_shown(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp]
) -> None:
    # A whole long reply in one flush: the pieces off screen wait in one placeholder
    # until scrolled to; then only the pieces shown turn into Markdown.
    text = long_reply(30)
    fake.script(Reply(text, chunk_size=len(text)))
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await send(pilot, "explain")
        await settle(pilot)
        item = app.screen.query_one(AssistantItem)
        stack = item.query_one(FrozenBlocks)
        assert len(item.query_children(FrozenBlocks)) == 1 and len(stack.pieces) > 6
        log = app.screen.query_one(ChatLog)
        middle = item.virtual_region.y + stack.virtual_region.y + stack.outer_size.height // 2
        log.scroll_to(y=middle, animate=False)
        await wait_until(pilot, lambda: stack not in item.children)
        before, after = item.query_children(FrozenBlocks)[:2]
        # A 30-line view shows one or two pieces: the rest wait, before and after them.
        assert len(before.pieces) + len(after.pieces) >= len(stack.pieces) - 2
        assert before.source + "".join(
            md.source for md in item.query_children(Markdown) if md.region.y < after.region.y
        ) + after.source == stack.source


def test_split_finished_cuts_only_before_blocks_without_a_top_margin() -> None:
    text = long_reply(6)
    pieces = split_finished(text, every=4)
    assert "".join(pieces) == text and len(pieces) > 3
    for piece in pieces[1:]:
        first = piece.lstrip("\n").splitlines()[0]
        assert first.startswith(("Paragraph", "Closing", "- ", "1. "))
    # Blocks up to `after` may still grow: no cut before them.
    assert split_finished(text, every=4, after=10_000) == [text]


async def test_blocks_far_above_the_view_go_back_to_placeholders_of_their_height(
    make_app: Callable[..., QwenmemApp], monkeypatch: pytest.MonkeyPatch, markdown_only: None
) -> None:
    # Every mounted block costs each layout of the screen: a long reply streamed at a
    # steady pace keeps a few screens of widgets, whatever its length.
    monkeypatch.setattr(AssistantItem, "FREEZE_AT", CUT_EVERY)
    retired: dict[str, int] = {}  # piece -> height of the Markdown that showed it
    freeze = AssistantItem._freeze

    async def spy(
        self: AssistantItem,
        pieces: list[str],
        *,
        before: Widget,
        measured: Sequence[Size | None] = (),
    ) -> None:
        for piece, size in zip(pieces, measured):  # a Markdown retired: its height then
            if size is not None:
                retired[piece] = size.height
        await freeze(self, pieces, before=before, measured=measured)

    monkeypatch.setattr(AssistantItem, "_freeze", spy)
    text = long_reply(3)
    app = make_app()
    async with app.run_test(size=(TALL[0], 16)) as pilot:
        await settle(pilot)
        item = AssistantItem()
        await app.screen.query_one(ChatLog).add(item)
        for start in range(0, len(text), 250):  # a flush at a time, each laid out
            item.append(text[start : start + 250])
            await wait_until(pilot, lambda: not item._pending)
            await pilot.pause()
        await item.end_stream()
        await pilot.pause()
        assert len(retired) >= 2, "not enough scrolled far enough to be retired"
        # Retired pieces join one placeholder: the widgets stay few however long it is.
        stacks = item.query_children(FrozenBlocks)
        assert len(stacks) == 1 and set(stacks.first().pieces) <= set(retired)
        assert len(list(item.walk_children())) < 150
        # Swapped without moving a line: as tall as the Markdown it replaced.
        assert stacks.first().outer_size.height == sum(
            retired[piece] for piece in stacks.first().pieces
        )
        # Scrolled back into view, they are the reply again.
        await pilot.resize_terminal(TALL[0], 200)
        await wait_until(pilot, lambda: not item.query_children(FrozenBlocks))
        assert "".join(md.source for md in item.query_children(Markdown)) == text


async def test_a_stream_faster_than_markdown_is_previewed_until_it_slows_down(
    make_app: Callable[..., QwenmemApp], clock: FakeClock
) -> None:
    # Building Markdown widgets costs 100-250 ms a screenful: a stream of more than half
    # a screen of lines a second is shown by one preview widget instead, and turns back
    # into Markdown when it slows down (or ends).
    text = long_reply(3)

    def cut(start: int, end: int, size: int) -> list[str]:
        return [text[at : min(at + size, end)] for at in range(start, end, size)]
    app = make_app()
    async with app.run_test(size=(TALL[0], 30)) as pilot:
        await settle(pilot)
        item = AssistantItem(clock=clock)
        await app.screen.query_one(ChatLog).add(item)

        async def stream(pieces: list[str], *, seconds_apart: float) -> None:
            for piece in pieces:
                clock.advance(seconds_apart)
                item.append(piece)
                await wait_until(pilot, lambda: not item._pending)
                await pilot.pause()

        await stream(cut(0, 300, 100), seconds_apart=1.0)  # a few lines a second
        assert not item.query_children(StreamPreview)
        markdowns = len(item.query(Markdown))
        await stream(cut(300, 1200, 100), seconds_apart=0.0)  # all at once
        preview = item.query_one(StreamPreview)
        # The newest line is on screen, and no Markdown was built for what raced by.
        newest = re.findall(r"[a-z]{4,}", text[:1200])[-1]
        assert any(newest in line for line in screen_lines(app)[-12:])
        assert len(item.query(Markdown)) <= markdowns
        await stream(cut(1200, 1240, 20), seconds_apart=5.0)  # slow again
        assert preview not in item.children and not item.query_children(StreamPreview)
        await stream([text[1240:]], seconds_apart=0.0)
        await item.end_stream()
        assert not item.query_children(StreamPreview)
        shown = (child for child in item.children if isinstance(child, (Markdown, FrozenBlocks)))
        assert "".join(child.source for child in shown) == text


def test_the_pace_counts_the_screen_lines_of_the_last_second() -> None:
    assert wrapped_lines("a\nb\n", 80) == 2 + 2 / 80  # two breaks, two cells
    assert wrapped_lines("x" * 200, 100) == 2  # a paragraph's worth of wrapping
    pace = StreamPace(window=1.0)
    pace.add(10.0, 2)
    pace.add(10.5, 1)
    pace.add(10.6, 0.5)
    assert pace.lines(10.6) == 3.5
    assert pace.lines(11.2) == 1.5  # the first two lines are more than a second old
    assert pace.lines(12.0) == 0


async def test_the_end_of_a_previewed_reply_is_painted_before_it_turns_into_markdown(
    make_app: Callable[..., QwenmemApp],
    clock: FakeClock,
    preview_only: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Turning a screenful into Markdown widgets takes 100-300 ms in a batch that holds
    # every paint: the end of a fast reply reached the screen only after it.
    text = long_reply(2) + "THE-LAST-WORDS\n"
    seen_first: list[bool] = []
    end_preview = AssistantItem._end_preview

    async def end_after_a_look(item: AssistantItem, preview: StreamPreview) -> Markdown:
        seen_first.append(any("THE-LAST-WORDS" in line for line in screen_lines(app)))
        return await end_preview(item, preview)

    monkeypatch.setattr(AssistantItem, "_end_preview", end_after_a_look)
    app = make_app()
    async with app.run_test(size=(TALL[0], 30)) as pilot:
        await settle(pilot)
        item = AssistantItem(clock=clock)
        await app.screen.query_one(ChatLog).add(item)
        item.append(text[:400])
        await wait_until(pilot, lambda: bool(item.query_children(StreamPreview)))
        item.append(text[400:])
        await item.end_stream()  # the rest and the end arrive together, as at full speed
        assert seen_first == [True]
        await settle(pilot)
        assert not item.query_children(StreamPreview)
        assert any("THE-LAST-WORDS" in line for line in screen_lines(app))


def test_a_preview_is_repainted_at_under_half_the_pace_of_markdown() -> None:
    # Each preview frame repaints the whole screen: it scrolls by too fast to read, so
    # it gets under half the frames (and the CPU) of a stream shown as Markdown.
    item, preview = AssistantItem(), StreamPreview()
    markdown = Markdown("")
    assert item.flush_interval(markdown, blocked=0.0) == AssistantItem.FLUSH_MIN == 1 / 30
    assert item.flush_interval(preview, blocked=0.0) == AssistantItem.PREVIEW_FLUSH_MIN == 1 / 12
    # A blocked loop backs either off, to three times as long, at most FLUSH_MAX.
    assert item.flush_interval(markdown, blocked=0.1) == pytest.approx(0.3)
    assert item.flush_interval(preview, blocked=0.1) == pytest.approx(0.3)
    assert item.flush_interval(preview, blocked=5.0) == AssistantItem.FLUSH_MAX


def test_a_burst_of_a_screenful_a_frame_is_repainted_four_times_a_second() -> None:
    # At full speed a flush brings screens of text: a blur at any pace, whose frames
    # delayed the last words. Under a screen a flush, the pace is the stream's own.
    item, preview = AssistantItem(), StreamPreview()
    assert item.flush_interval(preview, blocked=0.0, screens=0.9) == AssistantItem.PREVIEW_FLUSH_MIN
    assert item.flush_interval(preview, blocked=0.0, screens=1.0) == AssistantItem.BURST_FLUSH_MIN
    assert AssistantItem.BURST_FLUSH_MIN == 1 / 4
    assert item.flush_interval(Markdown(""), blocked=0.0, screens=3.0) == AssistantItem.BURST_FLUSH_MIN
    assert item.flush_interval(preview, blocked=0.2, screens=3.0) == pytest.approx(0.6)  # backed off


async def test_a_live_piece_that_begins_inside_a_paragraph_keeps_all_of_it(
    fake: FakeOpenAI,
    make_app: Callable[..., QwenmemApp],
    monkeypatch: pytest.MonkeyPatch,
    markdown_only: None,
) -> None:
    """A piece cut while a two-line paragraph was still arriving: the next flush must
    not drop the paragraph's first line (Textual's Markdown.update records the last
    line as where the next append re-parses from; the live piece is mounted empty and
    appended to, which records the block's start). Fails without: "and its second
    line." alone."""
    monkeypatch.setattr(AssistantItem, "FREEZE_AT", 2)
    first = "# One\n\nIntro.\n\nThe paragraph's first line,\nand its "
    rest = threading.Event()
    fake.script(Reply(first + "second line.\n", chunk_size=len(first), stall_after=1, stall_gate=rest))
    app = make_app()
    async with app.run_test(size=(TALL[0], 30)) as pilot:
        await send(pilot, "explain")
        item = app.screen.query_one(AssistantItem)
        # The first chunk is on screen, cut: the live piece starts inside the paragraph.
        await wait_until(pilot, lambda: len(item.query_children(Markdown)) == 2)
        rest.set()
        await settle(pilot)
        shown = " ".join(line.strip() for line in reply_lines(app) if line.strip())
    assert "The paragraph's first line, and its second line." in shown


async def test_a_followed_preview_is_a_screen_tall_and_repaints_without_a_layout(
    make_app: Callable[..., QwenmemApp],
    clock: FakeClock,
    preview_only: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A widget that grows costs Textual two layouts and two full repaints of the
    # screen: while the log follows the stream, the preview shows only its last
    # screenful, so a flush that adds lines repaints it at the same height.
    layouts: list[bool] = []
    refresh = StreamPreview.refresh

    def recorded(preview: StreamPreview, *regions: object, layout: bool = False, **kw: bool) -> Widget:
        if sys._getframe(1).f_code.co_name == "show":  # a flush's (Textual refreshes too)
            layouts.append(layout)
        return refresh(preview, *regions, layout=layout, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(StreamPreview, "refresh", recorded)
    text = long_reply(4)
    app = make_app()
    async with app.run_test(size=(TALL[0], 30)) as pilot:
        await settle(pilot)
        log = app.screen.query_one(ChatLog)
        item = AssistantItem(clock=clock)
        await log.add(item)
        item.append(text)
        await wait_until(pilot, lambda: not item._pending and bool(item.query_children(StreamPreview)))
        preview = item.query_one(StreamPreview)
        view = log.size.height
        await wait_until(pilot, lambda: preview.size.height == view)
        assert preview.tail == view
        assert len(preview._lines) > view  # more than it shows
        layouts.clear()
        item.append("More words for the last paragraph, and more.")
        await wait_until(pilot, lambda: any("More words" in line for line in screen_lines(app)))
        assert layouts and not any(layouts)  # repainted, never laid out
        # Scrolled up, it shows all its lines again, and what was in view stays there.
        def in_view() -> list[str]:  # the log's lines, without its scrollbar
            content = log.scrollable_content_region
            lines = screen_lines(app)[content.y : content.bottom]
            return [line[content.x : content.right] for line in lines]

        before = in_view()
        log.scroll_relative(y=-5, animate=False)
        await wait_until(pilot, lambda: preview.size.height == len(preview._lines))
        assert preview.tail is None
        await wait_until(pilot, lambda: in_view()[5:] == before[:-5])
        await item.end_stream()


async def test_a_previewed_reply_turns_into_markdown_a_piece_a_frame(
    make_app: Callable[..., QwenmemApp],
    clock: FakeClock,
    preview_only: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A screenful of Markdown widgets built and laid out at once held the loop (and the
    # keys) for 100-300 ms: a piece of CONVERT_AT blocks is built per frame, from the
    # bottom up (the preview's pieces of FREEZE_AT blocks are cut finer first).
    monkeypatch.setattr(AssistantItem, "FREEZE_AT", 8)
    monkeypatch.setattr(AssistantItem, "CONVERT_AT", 2)
    steps: list[tuple[int, int]] = []
    next_frame = AssistantItem._next_frame

    async def counted(item: AssistantItem) -> None:
        preview = item.query_one(StreamPreview)
        steps.append((len(preview.pieces), len(item.query_children(Markdown))))
        await next_frame(item)

    monkeypatch.setattr(AssistantItem, "_next_frame", counted)
    text = long_reply(SECTIONS)
    app = make_app()
    async with app.run_test(size=(TALL[0], 30)) as pilot:
        await settle(pilot)
        item = AssistantItem(clock=clock)
        await app.screen.query_one(ChatLog).add(item)
        item.append(text)
        await wait_until(pilot, lambda: bool(item.query_children(StreamPreview)))
        await item.end_stream()
        assert len(steps) >= 2
        # Each frame: one piece fewer in the preview, one more Markdown widget.
        for (pieces, markdowns), (next_pieces, next_markdowns) in zip(steps, steps[1:]):
            assert (next_pieces, next_markdowns) == (pieces - 1, markdowns + 1)
        assert not item.query_children(StreamPreview)
        shown = (child for child in item.children if isinstance(child, (Markdown, FrozenBlocks)))
        assert "".join(child.source for child in shown) == text
