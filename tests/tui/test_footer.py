"""The key footer follows what it shows, and only that (tui/widgets/footer.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from textual.widgets._footer import FooterKey

from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply
from qwenmem_tui.tui.app import QwenmemApp
from qwenmem_tui.tui.widgets.footer import SteadyFooter
from qwenmem_tui.tui.widgets.prompt import PromptInput

from .conftest import SIZE, send, settle, wait_until


def _escape_off(footer: SteadyFooter) -> bool | None:
    """Whether the footer shows Esc disabled; None while it has no Esc key (between
    removing its keys and mounting the new ones, which a wait may look in on)."""
    keys = [key for key in footer.query(FooterKey) if key.key == "escape"]
    assert len(keys) <= 1, keys
    return keys[0].has_class("-disabled") if keys else None


async def test_the_footer_keeps_its_keys_until_what_it_shows_changes(
    fake: FakeOpenAI, make_app: Callable[..., QwenmemApp]
) -> None:
    gate = threading.Event()
    fake.script(Reply("the reply", gate=gate))
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        footer = app.screen.query_one(SteadyFooter)
        await wait_until(pilot, lambda: bool(footer.query(FooterKey)))
        app.screen.query_one(PromptInput).focus()  # typing, nothing to cancel: Esc is off
        await wait_until(pilot, lambda: _escape_off(footer) is True)
        keys = list(footer.query(FooterKey))

        recomposed: list[int] = []
        recompose = footer.recompose

        async def counted() -> None:
            await recompose()
            recomposed.append(1)

        footer.recompose = counted  # type: ignore[method-assign]
        for _ in range(3):  # what each busy/idle turn and focus move signals
            app.screen.refresh_bindings()
            await wait_until(pilot, lambda n=len(recomposed): len(recomposed) > n)
        assert all(now is before for now, before in zip(footer.query(FooterKey), keys, strict=True))

        # Busy, Esc has a reply to cancel: the footer shows it enabled, then disabled again.
        await send(pilot, "a question")
        await wait_until(pilot, lambda: _escape_off(footer) is False)
        gate.set()
        await settle(pilot)
        await wait_until(pilot, lambda: _escape_off(footer) is True)
        assert "the reply" in app.session.items[-1].content
