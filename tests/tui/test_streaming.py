"""A long reply streamed looks exactly as the same reply shown at once, and streaming it
keeps finished blocks frozen (only the block still being written is laid out again)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.widgets import Markdown

from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply
from qwenmem_tui.paths import Paths
from qwenmem_tui.tui.app import QwenmemApp
from qwenmem_tui.tui.widgets.chat_log import ChatLog
from qwenmem_tui.tui.widgets.items import AssistantItem, FrozenBlocks, split_finished

from .conftest import FakeClock, conversation, seed_session, send, settle, wait_until

TALL = (100, 700)  # the whole reply fits on screen: every line can be compared
# Three sections hold every kind of block, each next to the others (and a rule before a
# heading); cutting every 5 blocks instead of every 16 puts the cuts (5, 10, 15, 20, 25
# of ~26 blocks) before a different kind of block each time, so a small reply still
# crosses every boundary a wrong cut could change, at a third of the rendering cost.
SECTIONS = 3
CUT_EVERY = 5


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


@pytest.mark.parametrize("chunk_size", [3, 400, 100_000])
async def test_a_streamed_reply_renders_as_the_reply_shown_at_once(
    fake: FakeOpenAI,
    make_app: Callable[..., QwenmemApp],
    monkeypatch: pytest.MonkeyPatch,
    chunk_size: int,
) -> None:
    # 3: many small flushes (the live Markdown freezes as it goes); 100_000: one flush
    # finishes everything at once (finished pieces wait as FrozenBlocks until shown).
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
        await wait_until(pilot, lambda: not item.query_children(FrozenBlocks), timeout=60)
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
        await wait_until(pilot, lambda: not item.query_children(FrozenBlocks), timeout=60)
        await pilot.pause()
        cut = reply_lines(app)
    assert cut == await shown_at_once(make_app, text, monkeypatch)


async def test_finished_blocks_are_not_laid_out_again_while_the_reply_grows(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp], monkeypatch: pytest.MonkeyPatch
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
        await wait_until(pilot, lambda: _settled(app, received=half * 5), timeout=60)
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
    # A whole long reply in one flush: the pieces off screen stay placeholders until
    # scrolled to, then turn into their Markdown.
    text = long_reply(30)
    fake.script(Reply(text, chunk_size=len(text)))
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await send(pilot, "explain")
        await settle(pilot)
        item = app.screen.query_one(AssistantItem)
        waiting = list(item.query_children(FrozenBlocks))
        assert len(waiting) > 3
        middle = waiting[len(waiting) // 2]
        app.screen.query_one(ChatLog).scroll_to_widget(middle, animate=False, top=True)
        await wait_until(pilot, lambda: middle not in item.children, timeout=60)
        # Only what came into view turned real.
        assert len(item.query_children(FrozenBlocks)) >= len(waiting) - 2


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
    make_app: Callable[..., QwenmemApp], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every mounted block costs each layout of the screen: a long reply streamed at a
    # steady pace keeps a few screens of widgets, whatever its length.
    monkeypatch.setattr(AssistantItem, "FREEZE_AT", CUT_EVERY)
    retiring = FrozenBlocks.retiring.__func__  # type: ignore[attr-defined]
    replaced: dict[int, int] = {}  # placeholder -> height of the Markdown it replaced

    def spy(cls: type[FrozenBlocks], markdown: Markdown) -> FrozenBlocks:
        placeholder = retiring(cls, markdown)
        replaced[id(placeholder)] = markdown.outer_size.height
        return placeholder

    monkeypatch.setattr(FrozenBlocks, "retiring", classmethod(spy))
    text = long_reply(4)
    app = make_app()
    async with app.run_test(size=(TALL[0], 20)) as pilot:
        await settle(pilot)
        item = AssistantItem()
        await app.screen.query_one(ChatLog).add(item)
        for start in range(0, len(text), 250):  # a flush at a time, each laid out
            item.append(text[start : start + 250])
            await wait_until(pilot, lambda: not item._pending)
            await pilot.pause()
        await item.end_stream()
        await pilot.pause()
        retired = [b for b in item.query_children(FrozenBlocks) if id(b) in replaced]
        assert retired, "nothing scrolled far enough to be retired"
        assert len(list(item.walk_children())) < 150
        # Swapped without moving a line: each is as tall as the Markdown it replaced.
        assert [b.outer_size.height for b in retired] == [replaced[id(b)] for b in retired]
        # Scrolled back into view, they are the reply again.
        await pilot.resize_terminal(TALL[0], 200)
        await wait_until(pilot, lambda: not item.query_children(FrozenBlocks), timeout=60)
        assert "".join(md.source for md in item.query_children(Markdown)) == text
