"""Long-term memory in the app: its notices, /memory, /remember and /forget.

The service, the prefetch and extraction hooks and the save_memory tool are built by
memory's registration (`features/memory/feature.py`); `MemoryAccess` opens the service in
the background, since loading (or rebuilding) the vector index must not hold the first
frame. This module tells the user how the opening goes and runs the commands, which
await the service in their workers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from textual.binding import Binding, BindingType

from qwenmem_tui.features.memory.access import MemoryAccess, MemoryUnavailable
from qwenmem_tui.features.memory.confirmation import clip_value as _clip
from qwenmem_tui.features.memory.confirmation import memory_name as _name
from qwenmem_tui.features.memory.confirmation import remember_confirmation
from qwenmem_tui.features.memory.feature import MEMORY, MEMORY_SESSION, MEMORY_STATE
from qwenmem_tui.memory.model import Memory, RememberRequest
from qwenmem_tui.features.memory.receipts import (
    EDITED,
    FORGOT,
    NOT_RELEVANT,
    RECEIPT_ITEM,
    receipt_of,
)
from qwenmem_tui.memory.review import review_plan, waiting_label
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.memory.writer import MemoryRejected
from qwenmem_tui.tui.extensions import AppContext, Extension, ExtensionFactory
from qwenmem_tui.tui.features.memory.receipt import MemoryReceipt
from qwenmem_tui.tui.host import SlashCommand
from qwenmem_tui.memory.settings import MEMORY_SETTINGS

if TYPE_CHECKING:
    from textual.notifications import SeverityLevel

    from qwenmem_tui.storage.sessions import Item
    from qwenmem_tui.tui.host import Host

log = logging.getLogger("qwenmem.tui")

REBUILD_NOTICE_MIN = 500
"""Rebuilds of fewer vectors end before anyone could read a notice about them."""
SAMPLE_BADGE = "memory.review_sample"
"""The status line's "N memories to review" of the sampled review (memory/review.py)."""
RECEIPT_KEYS = (
    ("enter / click", "On a receipt: list its memories"),
    ("f", "On a listed memory: forget it"),
    ("e", "On a listed memory: edit its value (replaces it at once)"),
    ("n", "On a listed memory: not relevant here (not recalled for messages like it)"),
)
"""The receipt's keys, for /help (they are the focused list's, not the screen's)."""

REVIEW_BADGE = "memory.review"
"""The status badge counting memories held for review."""


def review_label(count: int) -> str:
    """ "1 memory awaits review", "3 memories await review"."""
    return f"{count} memory awaits review" if count == 1 else f"{count} memories await review"


class MemoryController:
    """Shows the opening of the app's memory service and runs the memory commands."""

    def __init__(self, context: AppContext, memory: MemoryAccess) -> None:
        self._context = context
        self._memory = memory
        self._app: Host | None = None
        self._pending_notices: list[tuple[str, SeverityLevel]] = []
        self._rebuilding: int | None = None  # vectors in a rebuild worth a notice
        self._review: int | None = None  # memories awaiting review, as last shown
        memory.progress_listeners.append(self._progress)
        # PostgreSQL store: server down at start, write retries, reconnects.
        memory.notice_listeners.append(lambda text: self._notify(text, "warning"))
        memory.start().add_done_callback(self._opened)

    @property
    def project(self) -> str:
        return self._context.project

    @property
    def clock(self) -> Callable[[], float]:
        return self._context.clock

    async def service(self) -> MemoryService:
        """The open service, once its index is loaded (raises MemoryUnavailable)."""
        return await self._memory.service()

    async def _service_for(self, app: Host) -> MemoryService | None:
        """The open service for a command; None once the conversation says why not."""
        try:
            return await self.service()
        except MemoryUnavailable as exc:
            app.show_error(str(exc))
            return None

    # -- lifecycle ---------------------------------------------------------------------

    def _progress(self, done: int, total: int) -> None:
        if self._rebuilding is None and total >= REBUILD_NOTICE_MIN:
            self._rebuilding = total
            self._notify(f"Rebuilding the memory index ({total} memories)…")
        if self._rebuilding is not None and done >= total:
            self._notify(f"Memory index rebuilt ({self._rebuilding} memories).")
            self._rebuilding = None

    def _opened(self, task: asyncio.Task[MemoryService]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("[MEMORY] could not open the memory service: %s", exc, exc_info=exc)
            self._notify(f"Long-term memory is off: {exc}", "error")
            return
        task.result().review_listeners.append(self._review_changed)
        self._review_changed()
        self._warm()

    def _notify(self, text: str, severity: SeverityLevel = "information") -> None:
        if self._app is None:
            self._pending_notices.append((text, severity))
        else:
            self._app.notify(text, severity=severity)

    def attach(self, app: Host) -> None:
        """The chat screen is up: notices can show now."""
        self._app = app
        pending, self._pending_notices = self._pending_notices, []
        for text, severity in pending:
            self._notify(text, severity)
        self._review_changed()
        self._warm()

    def _warm(self) -> None:
        """Once the screen is up and the store open: load the vectors (the embedder, an
        index of a store of years) in the background, so the first recall finds them.
        Never before: they would compete with the first frame and the first keys."""
        if self._app is not None and self._memory.opened is not None:
            self._memory.warm_vectors()

    def _review_changed(self) -> None:
        """A write was held, or a memory approved or forgotten: recount what awaits review."""
        if self._app is not None and self._memory.opened is not None:
            self._app.run_worker(
                self._show_review, group="memory-review", exclusive=True, exit_on_error=False
            )

    async def _show_review(self) -> None:
        """The status line's review badges, a line in the log if they cannot be counted:
        a badge is never worth a crash. (A count still running as the app quit met the
        database closed: Ctrl+Q printed a traceback and exited with status 1.)"""
        try:
            await self._count_review()
        except Exception as exc:
            log.warning("[MEMORY] the review badges were not updated: %s", exc, exc_info=True)

    async def _count_review(self) -> None:
        """The status line says how many memories await review; a new one gets a notice."""
        service = await self.service()
        count = await service.awaiting_review(project=self.project)
        if self._app is None:
            return
        # Held before this app started: the status line says so; a notice is for news.
        if self._review is not None and count > self._review:
            self._notify(f"{review_label(count)}: open /memory to approve or forget it.", "warning")
        self._review = count
        self._app.set_badge(REVIEW_BADGE, review_label(count) if count else None)
        if self._app.state not in ("responding", "running_tool"):  # never during a reply
            sample = await self._sample_count(service)
            self._app.set_badge(SAMPLE_BADGE, waiting_label(sample) if sample else None)

    async def _sample_count(self, service: MemoryService) -> int:
        """How many memories the sampled review offers now (0: none is due)."""
        settings = MEMORY_SETTINGS.of(self._context.settings)
        if settings.review_every_days <= 0:
            return 0
        plan = await review_plan(
            service,
            project=self.project,
            every_days=settings.review_every_days,
            size=settings.review_sample,
        )
        return len(plan.sample)

    # -- commands ----------------------------------------------------------------------

    async def memory_command(self, app: Host, args: str) -> None:
        """/memory: the Memory screen."""
        from qwenmem_tui.tui.features.memory.screen import MemoryScreen

        service = await self._service_for(app)
        if service is None:
            return
        settings = MEMORY_SETTINGS.of(self._context.settings)
        await app.push_screen(
            MemoryScreen(
                service,
                self.project,
                self.clock,
                review_every_days=settings.review_every_days,
                review_sample=settings.review_sample,
            )
        )

    async def remember_command(self, app: Host, args: str) -> None:
        """/remember <text>: the person's own words, stored with origin user."""
        if not args:
            app.show_info("Usage: /remember <text>, e.g. /remember I prefer tabs over spaces")
            return
        try:
            service = await self.service()
            result = await service.remember(RememberRequest(args, project=self.project))
        except MemoryUnavailable as exc:
            app.show_error(str(exc))
            return
        except MemoryRejected as exc:
            app.show_error(f"Not remembered: {exc}.")
            return
        app.show_info(remember_confirmation(result))

    async def forget_command(self, app: Host, args: str) -> None:
        """/forget <id>: delete one memory of this user (audited)."""
        if not args.isdigit():
            app.show_info("Usage: /forget <id> (the ids are on the /memory screen)")
            return
        memory_id = int(args) if len(args) <= 20 else 0  # longer: out of range anyway
        service = await self._service_for(app)
        if service is None:
            return
        # The service checks ownership (user and project) for every face alike.
        forgotten = await service.forget(memory_id, project=self.project, reason="/forget")
        if forgotten is None:
            app.show_info(f"No memory with id {_clip(args)}")
        else:
            app.show_info(f"Forgot memory #{memory_id} ({_name(forgotten)}).")


    # -- receipts --------------------------------------------------------------------

    def receipt_widget(self, item: Item) -> MemoryReceipt:
        return MemoryReceipt(item, receipt_of(item), now=self.clock, correct=self.correct)

    async def receipt_command(self, app: Host, args: str) -> None:
        """/receipt (Ctrl+O): open the latest reply's receipt and put the keys on it."""
        receipts = list(app.screen.query(MemoryReceipt))
        if not receipts:
            app.show_info("No reply on screen used or saved a memory yet.")
            return
        receipts[-1].open()

    async def correct(self, widget: MemoryReceipt, action: str, memory_id: int) -> None:
        """A correction key on a receipt entry: forget, edit or not relevant here. It runs
        in a worker: the key returns at once, and a failure is one line, never a crash."""
        if self._app is not None:
            self._app.run_worker(
                self._correct(widget, action, memory_id), group="memory-correct", exit_on_error=False
            )

    async def _correct(self, widget: MemoryReceipt, action: str, memory_id: int) -> None:
        app = self._app
        assert app is not None
        try:
            await self._apply(app, widget, action, memory_id)
        except MemoryUnavailable as exc:
            app.show_error(str(exc))
        except NotImplementedError as exc:  # a store without it (PostgreSQL: not relevant)
            app.show_error(f"Not done: {exc}.")
        except Exception as exc:
            log.exception("[MEMORY_RECEIPT] correction %s of #%d failed", action, memory_id)
            app.show_error(f"Could not {action.replace('_', ' ')} memory #{memory_id}: {exc}")

    async def _apply(
        self, app: Host, widget: MemoryReceipt, action: str, memory_id: int
    ) -> None:
        service = await self.service()
        memory = await service.get(memory_id, project=self.project)
        if memory is None:
            app.notify(f"Memory #{memory_id} is not in this project's memory any more.")
            return
        if action == "forget":
            await service.forget(memory_id, project=self.project, reason="forgotten from a reply's receipt")
            await self._corrected(widget, memory_id, FORGOT)
            app.notify(f"Forgot #{memory_id} {_name(memory)}.")
        elif action == "edit":
            from qwenmem_tui.tui.features.memory.edit import EditMemoryScreen

            async def edited(value: str | None) -> None:
                if value is not None and value.strip() and value.strip() != memory.value:
                    await self._edit(widget, service, memory, value.strip())

            await app.push_screen(EditMemoryScreen(memory), edited)
        elif action == "not_relevant":
            receipt = widget.receipt
            await service.dismiss(memory_id, project=self.project, query=receipt.query)
            hooks = self._context.features.handle(MEMORY_SESSION)
            if hooks is not None:
                hooks.prefetch.hide({memory_id})  # out of this session's requests from now on
            await self._corrected(widget, memory_id, NOT_RELEVANT)
            app.notify(f"#{memory_id} {_name(memory)} will not be recalled for messages like this one.")

    async def _edit(
        self, widget: MemoryReceipt, service: MemoryService, memory: Memory, value: str
    ) -> None:
        assert self._app is not None
        try:
            result = await service.edit(
                memory.id, value, project=self.project, reason="from a reply's receipt"
            )
        except MemoryRejected as exc:
            self._app.show_error(f"Not changed: {exc}.")
            return
        if result is None:
            self._app.notify(f"Memory #{memory.id} is no longer active: nothing to edit.")
            return
        await self._corrected(widget, memory.id, EDITED, result.memory.value)
        self._app.notify(remember_confirmation(result))

    async def _corrected(
        self, widget: MemoryReceipt, memory_id: int, action: str, value: str | None = None
    ) -> None:
        """Record the correction in the stored receipt, so /resume shows it too."""
        receipt = widget.receipt
        receipt.correct(memory_id, action, self.clock(), value)
        widget.item.meta.update(receipt.to_meta())
        if self._app is not None:
            await self._app.store.update_item(widget.item)
        widget.show_receipt(receipt)


MEMORY_CSS = Path(__file__).with_name("memory.tcss")
"""The memory screens' stylesheet (their `CSS_PATH`), read by the app at startup."""

RECEIPT_BINDING = Binding("ctrl+o", "command('receipt')", "Memories used", id="memory.receipt")
"""Module level so `[keys]` validation knows its id before the extension is built."""


async def _build(context: AppContext) -> Extension:
    memory = context.state(MEMORY_STATE)
    if memory is None:
        raise RuntimeError("the memory extension needs the memory feature assembled")
    controller = MemoryController(context, memory)
    return Extension(
        name=MEMORY,
        css_paths=(MEMORY_CSS,),
        item_widgets={RECEIPT_ITEM: controller.receipt_widget},
        help_keys=RECEIPT_KEYS,  # Ctrl+O is a binding: /help lists it already
        bindings=(RECEIPT_BINDING,),
        commands=(
            SlashCommand(
                "receipt", "List the memories the latest reply used (Ctrl+O)", controller.receipt_command
            ),
            SlashCommand("memory", "Browse, approve and forget long-term memories", controller.memory_command),
            SlashCommand("remember", "Save a note to long-term memory", controller.remember_command, "<text>"),
            SlashCommand("forget", "Delete a memory by id", controller.forget_command, "<id>"),
        ),
        on_ready=controller.attach,
    )


def _keys() -> tuple[BindingType, ...]:
    from qwenmem_tui.tui.features.memory.screen import ConfirmForget, MemoryScreen

    return (RECEIPT_BINDING, *MemoryScreen.BINDINGS, *ConfirmForget.BINDINGS)


memory_extension = ExtensionFactory(MEMORY, _build, features=frozenset({MEMORY}), keys=_keys)
"""Long-term memory: its notices and commands, on the assembled service and hooks."""
