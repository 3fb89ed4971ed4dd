"""The /resume picker shows the title the fast model gave a session after its first exchange."""

from __future__ import annotations

from collections.abc import Callable

from textual.widgets import OptionList

from qwenmem_tui.config import Settings
from qwenmem_tui.features.titles.hook import TITLE_SYSTEM_PROMPT
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply, by_system_prompt
from qwenmem_tui.tui.app import QwenmemApp
from qwenmem_tui.tui.features.titles.extension import titles_extension
from qwenmem_tui.tui.screens.resume import ResumeScreen

from .conftest import SIZE, send, settle


async def test_resume_lists_the_title_the_fast_model_gave(
    make_app: Callable[..., QwenmemApp], settings: Settings, fake: FakeOpenAI
) -> None:
    settings.llm.session_titles = True
    fake.responder = by_system_prompt({TITLE_SYSTEM_PROMPT: lambda body: Reply("Parser crash on empty input")})
    fake.script(Reply("Show me the parser."))
    app = make_app(extensions=(titles_extension,))
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "my parser crashes on empty input, here is the trace: ...")
        await settle(pilot)
        await app.session_features.drain()  # the title is made in the background
    app = make_app()  # the user comes back later: the picker lists the session
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "/resume")
        await settle(pilot)
        picker = app.screen
        assert isinstance(picker, ResumeScreen)
        options = picker.query_one(OptionList)
        shown = [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]
        assert any(line.startswith("Parser crash on empty input") for line in shown), shown
