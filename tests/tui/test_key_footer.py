"""The key footer (tui/widgets/key_footer.py) rebuilds its keys only when the keys it
shows change: Textual's rebuilt every key on each bindings signal (each focus change),
two style passes apiece."""

from __future__ import annotations

from collections.abc import Callable

from textual.pilot import Pilot
from textual.widgets._footer import FooterKey

from qwenmem_tui.tui.app import QwenmemApp

from .conftest import SIZE, settle, wait_until


def _keys(app: QwenmemApp) -> list[FooterKey]:
    return list(app.screen.query(FooterKey))


async def _footer_shows_the_bindings(pilot: Pilot[None]) -> None:
    """Wait until the session is open and the footer shows a key for every action the screen offers."""
    await settle(pilot)
    app = pilot.app

    def shown() -> bool:
        offered = {binding.action for _, binding, _, _ in app.screen.active_bindings.values() if binding.show}
        return offered <= {k.action for k in _keys(app)}

    await wait_until(pilot, shown)


async def test_a_bindings_signal_that_changes_no_key_keeps_the_footer_as_it_is(
    make_app: Callable[..., QwenmemApp],
) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await _footer_shows_the_bindings(pilot)
        shown = _keys(app)
        assert [k.key for k in shown][:2] == ["enter", "ctrl+j"]
        app.screen.refresh_bindings()  # what a focus change does
        await pilot.pause()
        await pilot.pause()
        assert _keys(app) == shown and all(a is b for a, b in zip(_keys(app), shown))


async def test_a_new_key_is_shown_and_a_removed_one_goes(
    make_app: Callable[..., QwenmemApp],
) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await _footer_shows_the_bindings(pilot)
        before = [k.key for k in _keys(app)]
        app.bind("f5", "bell", description="Ring")
        app.screen.refresh_bindings()
        await wait_until(pilot, lambda: "f5" in [k.key for k in _keys(app)])
        after = [(k.key, k.description) for k in _keys(app)]
        assert ("f5", "Ring") in after and len(after) == len(before) + 1
        app._bindings.key_to_bindings.pop("f5")
        app.screen.refresh_bindings()
        await wait_until(pilot, lambda: [k.key for k in _keys(app)] == before)
