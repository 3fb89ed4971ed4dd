"""History compaction in the app: /compact, /pin, /unpin, ctrl+p and the marker widget.

The compaction hook itself — first among the hooks, handed memory's extractor — is
built by its registration (`features/compaction/feature.py`); this module drives it.

Why first: when it compacts, it throws the request away and rebuilds it from the
session's (now folded) model view. Prefetch running after it therefore adds its
reminder to the request actually sent, and re-applies earlier deliveries to it —
freeing the memories whose anchor message was just summarised away, so recall can
surface them again. The other way round, a compaction would drop that request's
memory block while prefetch counted it as delivered. The price is that the hook
counts the request without the reminders: a few hundred tokens at `memory.top_k`,
small next to the 30 % of the window above the threshold, and the provider's reported
usage folds them into the gauge's ratio, so the estimate errs towards compacting early.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.binding import Binding

from qwenmem_tui.chat.view import COMPACTION_ITEM
from qwenmem_tui.features.compaction.feature import COMPACTION, COMPACTION_HOOK
from qwenmem_tui.features.compaction.hook import CompactionHook
from qwenmem_tui.storage.sessions import Item
from qwenmem_tui.text import one_line
from qwenmem_tui.tui.extensions import (
    AppContext,
    Extension,
    ExtensionFactory,
    busy_notice,
)
from qwenmem_tui.tui.features.compaction.marker import CompactionMarker
from qwenmem_tui.tui.host import BusyState, SlashCommand

if TYPE_CHECKING:
    from qwenmem_tui.tui.host import Host

COMPACT_BUSY = busy_notice("compact")
COMPACTING = "compacting"
"""The app's state while /compact runs (a message sent meanwhile stops it)."""
COMPACT_PROGRESS = "Compacting older messages…"
PIN_NOTHING = "Nothing to pin yet: no message with text in this conversation."
UNPIN_NOTHING = "No pinned message to unpin."
PIN_UNAVAILABLE = "Only a message with text that the model still sees (since /clear) can be pinned."
PIN_MARK = "📌"
PIN_PREVIEW_CHARS = 60
PIN_BINDING = Binding("ctrl+p", "command('pin')", "Pin", id="compaction.pin")
"""Module level so `[keys]` validation knows its id before the extension is built."""


def pinnable(item: Item) -> bool:
    """A user or assistant message with text: what compaction can carry verbatim."""
    role = (item.message or {}).get("role")
    return role in ("user", "assistant") and bool(item.content.strip())


def preview(text: str) -> str:
    """One short line of a message, for confirmations."""
    line = one_line(text)
    return line if len(line) <= PIN_PREVIEW_CHARS else line[: PIN_PREVIEW_CHARS - 1] + "…"


class CompactionController:
    """Runs the commands on the app's compaction hook (as the assembly built it)."""

    def __init__(self, hook: CompactionHook) -> None:
        self.hook = hook

    # -- /compact ----------------------------------------------------------------------

    async def compact_command(self, app: Host, args: str) -> None:
        """/compact: summarise what is older than the kept turns, threshold or not."""
        if not app.idle:
            app.show_info(COMPACT_BUSY)
            return
        session = app.session
        async with app.busy(COMPACTING, COMPACT_PROGRESS):
            result = await self.hook.compact_now(session)
        if app.session is not session:
            return  # switched sessions meanwhile: the marker is stored with its own
        if result.marker is not None:
            widget = app.widget_for_item(result.marker)
            if widget is not None:
                app.show(widget)
        elif result.status == "failed":
            app.show_error(result.notice)
        else:
            app.show_info(result.notice)

    # -- /pin /unpin ---------------------------------------------------------------------

    async def pin_command(self, app: Host, args: str) -> None:
        """/pin and ctrl+p: the last message is carried verbatim through every compaction.

        With a message highlighted in the log (typing ends a highlight, so only the key
        gets here with one) the pin of that message is toggled instead.
        """
        selected = app.selected_item_id
        if selected is not None:
            item = await app.session.view_item(selected)
            await self.set_pin(app, selected, not (item is not None and item.meta.get("pinned")))
            return
        item = next((i for i in reversed(app.session.view_items()) if pinnable(i)), None)
        if item is None:
            app.show_info(PIN_NOTHING)
        elif item.meta.get("pinned"):
            role = item.message["role"] if item.message else "message"
            app.show_info(f"{PIN_MARK} Already pinned ({role}): “{preview(item.content)}”")
        elif item.id is not None:
            await self.set_pin(app, item.id, True)

    async def unpin_command(self, app: Host, args: str) -> None:
        """/unpin: the most recent pinned message may be summarised again."""
        item = next((i for i in reversed(app.session.view_items()) if i.meta.get("pinned")), None)
        if item is None or item.id is None:
            app.show_info(UNPIN_NOTHING)
            return
        await self.set_pin(app, item.id, False)

    async def set_pin(self, app: Host, item_id: int, pinned: bool) -> None:
        """Pin or unpin one message of the model's view, show it on its widget, say so."""
        item = await app.session.view_item(item_id)
        if item is None or not pinnable(item):
            app.show_info(PIN_UNAVAILABLE)
            return
        meta = {key: value for key, value in item.meta.items() if key != "pinned"}
        if pinned:
            meta["pinned"] = True
        item = await app.session.set_meta(item, meta)
        app.item_changed(item)
        if pinned:
            role = item.message["role"] if item.message else "message"
            app.show_info(
                f"{PIN_MARK} Pinned ({role}): “{preview(item.content)}” — kept verbatim when "
                "older messages are summarized."
            )
        else:
            app.show_info(f"Unpinned: “{preview(item.content)}”")


async def _build(context: AppContext) -> Extension:
    hook = context.features.handle(COMPACTION_HOOK)
    if hook is None:
        raise RuntimeError("the compaction extension needs the compaction feature assembled")
    controller = CompactionController(hook)
    return Extension(
        name=COMPACTION,
        commands=(
            SlashCommand("compact", "Summarise older messages now", controller.compact_command),
            SlashCommand(
                "pin", "Keep the last message verbatim through compaction", controller.pin_command
            ),
            SlashCommand("unpin", "Unpin the latest pinned message", controller.unpin_command),
        ),
        item_widgets={COMPACTION_ITEM: CompactionMarker},
        bindings=(PIN_BINDING,),
        busy_states={COMPACTING: BusyState("compacting history…", stopped="compacting")},
    )


compaction_extension = ExtensionFactory(
    COMPACTION, _build, features=frozenset({COMPACTION}), keys=lambda: (PIN_BINDING,)
)
"""Compaction: /compact, /pin, /unpin, ctrl+p and the marker, on the assembled hook."""
