"""Issue 23 item 5: Ctrl+C as a terminal user expects it — it copies a selection, and
the "press again to quit" state lasts a few seconds (the app's clock, injected)."""

from __future__ import annotations

from collections.abc import Callable

from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply
from qwenmem_tui.tui.app import QwenmemApp
from qwenmem_tui.tui.screens.chat import QUIT_CONFIRM_SECONDS
from qwenmem_tui.tui.widgets.items import AssistantItem
from qwenmem_tui.tui.widgets.prompt import PromptInput

from .conftest import SIZE, FakeClock, send, settle, started


def notices(app: QwenmemApp) -> list[str]:
    return [str(n.message) for n in app._notifications]


async def test_the_second_ctrl_c_quits_only_within_a_few_seconds(
    make_app: Callable[..., QwenmemApp], clock: FakeClock
) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot)
        await pilot.press("ctrl+c")
        assert any(f"within {QUIT_CONFIRM_SECONDS:g} seconds" in n for n in notices(app))
        clock.advance(QUIT_CONFIRM_SECONDS + 12)  # long after: the first press expired
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert app.is_running  # it only armed the quit again
        clock.advance(QUIT_CONFIRM_SECONDS - 1)
        await pilot.press("ctrl+c")
        await pilot.pause()
    assert not app.is_running and app.return_code == 0


async def test_ctrl_c_over_a_selection_copies_it_instead_of_quitting(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp]
) -> None:
    fake.script(Reply("Copy this sentence please."))
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "say something")
        await settle(pilot)
        reply = app.screen.query(AssistantItem).last()
        # A mouse drag across the reply selects its text, as in a terminal.
        await pilot.mouse_down(reply, offset=(1, 0))
        await pilot.hover(reply, offset=(30, 0))
        await pilot.mouse_up(reply, offset=(30, 0))
        await pilot.pause()
        selected = app.screen.get_selected_text()
        assert selected and "Copy this" in selected
        for _ in range(2):  # twice: neither press arms nor quits
            await pilot.press("ctrl+c")
            await pilot.pause()
        assert app.is_running
        assert app.clipboard == selected
        assert any("Copied" in n for n in notices(app))
        # Text selected in the prompt is copied too, and stays there.
        prompt = app.screen.query_one(PromptInput)
        prompt.focus()
        prompt.insert("draft text")
        await pilot.press("shift+home")
        await pilot.press("ctrl+c")
        assert app.clipboard == "draft text" and prompt.text == "draft text"
