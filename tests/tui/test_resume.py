"""Resuming sessions: the /resume picker and `--resume` restoring the whole conversation."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from textual.widgets import Markdown, OptionList, Static

from qwenmem_tui.paths import Paths
from qwenmem_tui.tui.app import QwenmemApp
from qwenmem_tui.tui.features.recap.controller import recap_extension
from qwenmem_tui.tui.features.recap.item import RecapItem
from qwenmem_tui.tui.screens.chat import ChatScreen
from qwenmem_tui.tui.screens.resume import ResumeScreen, format_age
from qwenmem_tui.tui.widgets.chat_log import PAGE_SIZE, ChatLog, EarlierItems
from qwenmem_tui.tui.widgets.items import AssistantItem
from qwenmem_tui.tui.widgets.plain_items import (
    ErrorItem,
    InfoItem,
    InterruptedMark,
    ToolCallItem,
    UserItem,
)

from .conftest import (
    SIZE,
    FakeClock,
    conversation,
    seed_session,
    send,
    settle,
    started,
    wait_until,
)


def option_ids(screen: ResumeScreen) -> list[str | None]:
    options = screen.query_one(OptionList)
    return [options.get_option_at_index(i).id for i in range(options.option_count)]


async def test_picker_lists_filters_and_opens(
    make_app: Callable[..., QwenmemApp], paths: Paths, project: Path, clock: FakeClock
) -> None:
    older = await seed_session(
        paths, project, "Fix the parser", conversation("Fix the parser", "Done."), clock=clock
    )
    clock.advance(3600)
    newer = await seed_session(
        paths, project, "Write the docs", conversation("Write the docs", "Sure."), clock=clock
    )
    clock.advance(120)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "/resume")
        await settle(pilot)
        picker = app.screen
        assert isinstance(picker, ResumeScreen)
        assert option_ids(picker) == [newer.id, older.id]
        await pilot.press(*"parser")
        await pilot.pause()
        assert option_ids(picker) == [older.id]
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, ChatScreen)
        assert app.session.info.id == older.id
        assert [str(w.render()) for w in app.screen.query(UserItem)] == ["Fix the parser"]


async def test_resume_command_with_an_id_opens_that_session(
    make_app: Callable[..., QwenmemApp], paths: Paths, project: Path, clock: FakeClock
) -> None:
    old = await seed_session(
        paths, project, "Old", conversation("Old question", "Old answer"), clock=clock
    )
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, f"/resume {old.id}")
        await settle(pilot)
        assert app.session.info.id == old.id
        assert [str(w.render()) for w in app.screen.query(UserItem)] == ["Old question"]
        await send(pilot, "/resume no-such-id")
        await settle(pilot)
        assert app.session.info.id == old.id
        assert 'No session with id "no-such-id"' in str(app.screen.query(ErrorItem).last().render())


async def test_picker_escape_closes_and_keeps_the_session(
    make_app: Callable[..., QwenmemApp], paths: Paths, project: Path, clock: FakeClock
) -> None:
    await seed_session(paths, project, "Old", conversation("Old", "Reply"), clock=clock)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        current = app.session.info.id
        await pilot.press("ctrl+r")
        await settle(pilot)
        assert isinstance(app.screen, ResumeScreen)
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, ChatScreen)
        assert app.session.info.id == current


async def test_picker_without_matches_says_so(
    make_app: Callable[..., QwenmemApp], paths: Paths, project: Path, clock: FakeClock
) -> None:
    await seed_session(paths, project, "Old", conversation("Old", "Reply"), clock=clock)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "/resume")
        await settle(pilot)
        await pilot.press(*"zzz")
        await pilot.pause()
        assert option_ids(app.screen) == [None]  # the disabled "No sessions match." line
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, ResumeScreen)


async def test_resume_restores_every_kind_of_item(
    make_app: Callable[..., QwenmemApp], paths: Paths, project: Path, clock: FakeClock
) -> None:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "read_file", "arguments": '{"path": "README.md"}'},
    }
    info = await seed_session(
        paths,
        project,
        "Read it",
        [
            ("user", "Read it", {"role": "user", "content": "Read it"}, {}),
            ("assistant", "", {"role": "assistant", "content": "", "tool_calls": [call]}, {}),
            ("tool", "# Demo", {"role": "tool", "tool_call_id": "call_1", "content": "# Demo"}, {}),
            (
                "assistant",
                "It is a **demo**.",
                {"role": "assistant", "content": "It is a **demo**."},
                {},
            ),
            ("info", "Cancelled.", None, {}),
            ("error", "Connection refused at http://x/v1 (model m)", None, {}),
            (
                "assistant",
                "Half an ans",
                {"role": "assistant", "content": "Half an ans"},
                {"interrupted": True},
            ),
            ("away_recap", "Writing docs; next: the README.", None, {}),
        ],
        clock=clock,
    )
    app = make_app(resume=True, extensions=(recap_extension,))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert app.session.info.id == info.id
        screen = app.screen
        (tool,) = screen.query(ToolCallItem)
        assert 'read_file(path="README.md")' in str(tool.title)
        assert [item.query_one(Markdown).source for item in screen.query(AssistantItem)] == [
            "It is a **demo**.",
            "Half an ans",
        ]
        assert len(screen.query(InterruptedMark)) == 1
        assert [str(w.render()) for w in screen.query(InfoItem)] == ["Cancelled."]
        assert len(screen.query(ErrorItem)) == 1
        # The recap extension draws the stored recap (the app names no feature).
        (recap,) = screen.query(RecapItem)
        shown = " ".join(str(part.render()) for part in recap.query(Static))
        assert shown == "※ recap: Writing docs; next: the README."


async def test_resume_by_unknown_id_exits_with_one_line(
    make_app: Callable[..., QwenmemApp],
) -> None:
    app = make_app(resume="no-such-session")
    async with app.run_test(size=SIZE) as pilot:
        await app.workers.wait_for_complete()  # the open, behind the drawn screen
        await pilot.pause()
    assert app.return_code == 1


async def test_long_session_mounts_only_the_newest_page(
    make_app: Callable[..., QwenmemApp], paths: Paths, project: Path, clock: FakeClock
) -> None:
    items = []
    for n in range(100):
        items += conversation(f"question {n}", f"answer {n}")
    await seed_session(paths, project, "Long", items, clock=clock)
    app = make_app(resume=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = app.screen
        assert len(screen.query(UserItem)) + len(screen.query(AssistantItem)) == PAGE_SIZE
        earlier = screen.query_one(EarlierItems)
        assert "180 earlier items" in str(earlier.render())
        log = screen.query_one(ChatLog)
        log.scroll_home(animate=False)
        await wait_until(pilot, lambda: "160 earlier items" in str(earlier.render()))
        assert len(screen.query(UserItem)) + len(screen.query(AssistantItem)) == 2 * PAGE_SIZE


def test_format_age() -> None:
    assert format_age(5) == "just now"
    assert format_age(120) == "2m ago"
    assert format_age(3 * 3600 + 5) == "3h ago"
    assert format_age(2 * 86400) == "2d ago"
    assert format_age(15 * 86400) == "2w ago"
