"""The recap in the app: the away timer, ``/recap`` and the recap on resume.

:class:`~qwenmem_tui.features.recap.away.AwayController` decides; this module only feeds it the app's
``terminal_focused`` / ``state`` reactives and session switches, and executes what it
returns: recaps run in workers, each with its own abort event.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from qwenmem_tui.config import Settings
from qwenmem_tui.features.recap.away import (
    AbortRecap,
    AwayAction,
    AwayController,
    FireRecap,
    ShowRecap,
)
from qwenmem_tui.features.recap.session_recap import (
    filter_to_dialog,
    generate_session_recap,
)
from qwenmem_tui.storage.sessions import Item
from qwenmem_tui.tui.extensions import (
    AppContext,
    Extension,
    ExtensionFactory,
    busy_notice,
)
from qwenmem_tui.tui.features.recap.item import RecapItem
from qwenmem_tui.tui.host import BusyState, SlashCommand
from qwenmem_tui.features.recap.feature import RECAP_ITEM
from qwenmem_tui.features.recap.settings import RECAP_SETTINGS

if TYPE_CHECKING:
    from qwenmem_tui.tui.host import Host

RECAP_BUSY = busy_notice("recap")
RECAP = "recap"
"""The app's state while /recap runs (a message sent meanwhile stops it)."""
RECAP_NOTHING = "Not enough conversation context for a recap yet."
RECAP_PROGRESS = "Generating recap…"
# Also shown when the endpoint is down: generate_session_recap never raises (contract §5).
RECAP_NONE = "No recap this time: the model could not be reached or gave no usable answer."


class RecapController:
    """Owns the away state machine and the recap calls for one app."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._app: Host | None = None
        self._away: AwayController | None = None
        self._aborts: dict[int, asyncio.Event] = {}
        self._manual_running = False

    @property
    def app(self) -> Host:
        """The app this controller serves (set by :meth:`attach`)."""
        if self._app is None:
            raise RuntimeError("the recap controller is not attached yet")
        return self._app

    @property
    def away(self) -> AwayController:
        """The state machine (exists once attached)."""
        if self._away is None:
            raise RuntimeError("the recap controller is not attached yet")
        return self._away

    # -- wiring ------------------------------------------------------------------------

    def attach(self, app: Host) -> None:
        """Start following the app's focus and busy state (the chat screen is up)."""
        general = RECAP_SETTINGS.of(self._settings)
        self._app = app
        self._away = AwayController(
            enabled=general.show_session_recap,
            threshold_minutes=general.session_recap_away_threshold_minutes,
            clock=app.clock,
            items=self._items,
            focused=app.terminal_focused,
            idle=app.idle,
        )
        app.watch(app, "terminal_focused", self._focus_changed, init=False)
        app.watch(app, "state", self._state_changed, init=False)

    def session_opened(self, app: Host, resumed: bool) -> None:
        """A session is on screen; a resumed one that is old enough gets a recap."""
        if self._away is None:
            return
        items = app.session.view_items()
        last_activity = items[-1].created_at if resumed and items else None
        self._execute(self.away.on_session_opened(last_activity))

    async def close(self) -> None:
        """The app is going away: abort whatever recap is still running."""
        if self._away is not None:
            self._execute(self._away.close())
        for abort in self._aborts.values():
            abort.set()

    def _items(self) -> Sequence[Item]:
        return self.app.session.view_items()

    def _focus_changed(self, focused: bool) -> None:
        self._execute(self.away.on_focus_change(focused))

    def _state_changed(self, state: str) -> None:
        self._execute(self.away.on_idle_change(state == "idle"))

    def _execute(self, actions: list[AwayAction]) -> None:
        for action in actions:
            if isinstance(action, FireRecap):
                abort = self._aborts[action.call_id] = asyncio.Event()
                self.app.run_worker(
                    self._auto_recap(action.call_id, abort), group="recap", exit_on_error=False
                )
            elif isinstance(action, AbortRecap):
                aborted = self._aborts.pop(action.call_id, None)
                if aborted is not None:
                    aborted.set()
            elif isinstance(action, ShowRecap):
                self.app.run_worker(
                    self.app.add_display_item(RECAP_ITEM, action.text),
                    group="recap",
                    exit_on_error=False,
                )

    async def _auto_recap(self, call_id: int, abort: asyncio.Event) -> None:
        app = self.app
        try:
            text = await generate_session_recap(app.session.history(), app.llm, abort=abort)
        finally:
            self._aborts.pop(call_id, None)
        self._execute(self.away.on_recap_result(call_id, text))

    # -- /recap ------------------------------------------------------------------------

    def recap_busy(self) -> bool:
        """A reply, a tool or another recap is running, so /recap must wait."""
        return (
            not self.app.idle
            or self._manual_running
            or (self._away is not None and self._away.in_flight is not None)
        )

    async def recap_command(self, app: Host, args: str) -> None:
        """/recap: a recap now, whatever the setting and the dedupe gate say."""
        if self.recap_busy():
            app.show_info(RECAP_BUSY)
            return
        session = app.session
        history = session.history()
        if not filter_to_dialog(history):
            app.show_info(RECAP_NOTHING)
            return
        self._manual_running = True
        try:
            async with app.busy(RECAP, RECAP_PROGRESS):
                text = await generate_session_recap(history, app.llm)
                if app.session is not session:
                    return  # the user switched sessions meanwhile: not this one's recap
                if text is None:
                    app.show_info(RECAP_NONE)
                else:
                    await app.add_display_item(RECAP_ITEM, text)
        finally:
            self._manual_running = False


async def _build(context: AppContext) -> Extension:
    controller = RecapController(context.settings)
    return Extension(
        name="recap",
        commands=(
            SlashCommand("recap", "Summarise where you left off", controller.recap_command),
        ),
        item_widgets={RECAP_ITEM: lambda item: RecapItem(item.content)},
        busy_states={RECAP: BusyState("generating recap…", stopped="the recap")},
        on_ready=controller.attach,
        on_session_opened=controller.session_opened,
        close=controller.close,
    )


recap_extension = ExtensionFactory("recap", _build)
"""The recap: /recap, the ``away_recap`` widget and the automatic recaps (no hooks)."""
