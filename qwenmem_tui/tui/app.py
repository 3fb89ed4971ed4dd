"""The Textual app: presents the runtime's chat session, one at a time.

`create_app` is the one factory for the CLI and the tests: settings, paths, clock and
(optionally) the LLM client are injected, so tests run the real app against the fake
server in a temp home.

Startup order: the chat screen is drawn and the prompt takes keys first; the runtime
(`qwenmem_tui.runtime`: the database, the model, the features) opens afterwards in a
worker (state "starting"), its imports in a thread: the chat core and the runtime,
the reply's Markdown widgets (`_startup_imports`), then the SDK and numpy/FAISS. The
first frame loads only what it draws (tests/unit/test_launch_imports.py).
Anything typed meanwhile is queued and runs once the session is open. A model that
has to start first (the bundled local one) is a `ModelStarter` the runtime runs, its
progress shown as a line in the conversation.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import signal
import sys
import time
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from textual import events
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.content import Content
from textual.driver import Driver
from textual.message import Message
from textual.reactive import reactive
from textual.screen import Screen
from textual.widget import Widget
from textual.worker import get_current_worker

from qwenmem_tui import collector, debuglog
from qwenmem_tui.config import ConfigError, Settings
from qwenmem_tui.paths import Paths, project_id, project_root
from qwenmem_tui.tui.commands import BUILTIN_COMMANDS
from qwenmem_tui.tui.extensions import AppContext, Extension, ExtensionFactory
from qwenmem_tui.tui.host import BusyState, CommandTable
from qwenmem_tui.tui.keymap import checked_keymap
from qwenmem_tui.tui.terminal_text import terminal_safe
from qwenmem_tui.tui.theme_choice import remember_theme, remembered_theme
from qwenmem_tui.tui.widgets.plain_items import DimItem, InfoItem, ItemWidgetFactory

if TYPE_CHECKING:
    from textual.theme import Theme

    from qwenmem_tui.llm.wire import JSONObject

    # The chat core and the runtime load after the first frame, in the startup
    # worker's thread (`_startup_imports`).
    from qwenmem_tui.chat.session import ChatSession, QueryHook
    from qwenmem_tui.chat.tools import Tool
    from qwenmem_tui.features.assembly import SessionFeatures
    from qwenmem_tui.llm.client import LLMClient
    from qwenmem_tui.llm.local_server import LocalChatDefaults
    from qwenmem_tui.runtime import ModelStarter, Runtime
    from qwenmem_tui.storage.sessions import Item, SessionInfo, SessionStore
    from qwenmem_tui.tui.screens.chat import (
        ChatScreen,  # the screen imports this module
    )

log = logging.getLogger("qwenmem.tui")

ChatState = Literal["starting", "idle", "responding", "running_tool"]
"""The chat's own states; an extension's command adds its busy states (`BusyState`)."""


QUIT_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)
)
"""Signals that end qwenmem the way Ctrl+Q does (Windows has no SIGHUP)."""

NOTHING_TO_RESUME = "No earlier session in this project to resume: this is a new one."


class QwenmemApp(App[None]):
    """A chat with one session at a time; features attach through extensions."""

    # The chat screen's own stylesheet (its `CSS_PATH`) is read with the app's: read at
    # the screen's push, as Textual does, it reparsed every source and restyled the
    # screen before the first frame (34 M instructions of that frame's ~1,860 M).
    CSS_PATH = ["app.tcss", "screens/chat.tcss"]
    TITLE = "qwenmem"
    # Textual's palette (themes, keys, every slash command), on a key the chat leaves
    # free: ctrl+p, its usual one, pins a message here. Listed at the footer's right.
    ENABLE_COMMAND_PALETTE = True
    COMMAND_PALETTE_BINDING = "ctrl+g"
    BINDINGS = [
        Binding("ctrl+q", "quit", "Quit", id="app.quit", priority=True),
        Binding("ctrl+r", "resume", "Resume", id="app.resume"),
    ]

    terminal_focused: reactive[bool] = reactive(True)
    """Whether the terminal has focus (focus reporting; a key press counts as focus).

    Not called `focused`: `App.focused` is Textual's focused widget.
    """
    state: reactive[str] = reactive("starting")
    """What the app is busy with: a `ChatState` or an extension's busy state (`busy`);
    anything but "idle" means a new query must wait ("starting" until the session is
    open)."""

    @dataclass
    class SessionOpened(Message):
        """A session is on screen: at startup or after a switch (/resume)."""

        session: ChatSession
        resumed: bool

    def __init__(
        self,
        *,
        settings: Settings,
        paths: Paths,
        cwd: Path,
        resume: str | bool | None,
        clock: Callable[[], float],
        llm: LLMClient | None,
        hooks: Sequence[QueryHook],
        extra_tools: Sequence[Tool],
        extensions: Sequence[ExtensionFactory] | None,
        model_defaults: LocalChatDefaults | None = None,
        start_model: ModelStarter | None = None,
        long_lived: bool = False,
        early_input: bytes = b"",
    ) -> None:
        super().__init__()
        self.settings = settings
        self.paths = paths
        self.project_root = project_root(cwd)
        self._cwd = cwd  # the instruction files are read from the root down to it
        self.project = project_id(self.project_root)
        self.clock = clock
        self.commands = CommandTable(BUILTIN_COMMANDS)
        # The widget for each stored item type: the defaults (the assistant's is
        # Markdown, loaded by the startup worker in a thread), then the extensions'.
        self.item_widgets: dict[str, ItemWidgetFactory] = {}
        self.busy_states: dict[str, BusyState] = {}
        """The extensions' busy states by name (their commands run in them)."""
        self.help_keys: list[tuple[str, str]] = []  # extensions' keys for /help
        self._hooks = tuple(hooks)
        self._extra_tools = list(extra_tools)
        # None: the features `settings` turn on, resolved in the startup worker (their
        # modules import numpy/FAISS; the first frame must not wait for that).
        self._extension_factories = None if extensions is None else list(extensions)
        self._extensions: list[Extension] = []
        self._resume = resume
        self._llm = llm
        self._start_model = start_model
        self._model_notice: str | None = None
        # The app owns its process (the CLI, not a test): it tunes the collector.
        self._long_lived = long_lived
        self.early_input = early_input
        """What was typed before the app took the terminal (`cli.typed_before`): its
        driver parses it before anything typed later (`CleanInputDriver`)."""
        self._exiting_on: int | None = None  # the signal that is ending the app, if one
        # The bundled local model: a short system prompt, and no tools it cannot call.
        self._model_defaults = model_defaults
        self._runtime: Runtime | None = None
        self._session: ChatSession | None = None
        self._session_features: SessionFeatures | None = None
        # ConfigError for an unknown id or key name: reported before anything is drawn.
        self._user_keys = checked_keymap(settings, self.BINDINGS)
        self.set_keymap(self._user_keys)
        if settings.ui.theme is not None:
            if settings.ui.theme not in self.available_themes:
                names = ", ".join(sorted(self.available_themes))
                raise ConfigError(
                    f"{settings.source or 'config'}: ui.theme: expected one of: {names}, "
                    f"got {settings.ui.theme!r}"
                )
            self.theme = settings.ui.theme
        elif (picked := remembered_theme(paths)) in self.available_themes:
            self.theme = picked  # the one picked in the palette last time
        self.kept_session_id: str | None = None
        """The session left on screen at exit, when it was kept (it had items)."""

    def get_driver_class(self) -> type[Driver]:
        """Textual's driver for this terminal; on Linux and macOS the same driver with
        its input made whole first (Alt+Enter, split mouse reports: terminal_input)."""
        driver = super().get_driver_class()
        if sys.platform != "win32":  # the Linux driver's module needs termios
            from qwenmem_tui.tui.terminal_input import CleanInputDriver

            if driver is CleanInputDriver.__base__:
                return CleanInputDriver
        return driver

    # -- what extensions and commands use -------------------------------------------

    @property
    def has_session(self) -> bool:
        """A session is open (not yet while starting)."""
        return self._session is not None

    @property
    def session(self) -> ChatSession:
        """The chat session on screen."""
        if self._session is None:
            raise RuntimeError("no session open yet")
        return self._session

    @property
    def store(self) -> SessionStore:
        """The session store (open once the app is mounted)."""
        if self._runtime is None:
            raise RuntimeError("storage not open yet")
        return self._runtime.store

    @property
    def llm(self) -> LLMClient:
        """The LLM client (built from settings unless injected)."""
        if self._llm is None:
            raise RuntimeError("LLM client not created yet")
        return self._llm

    @property
    def session_features(self) -> SessionFeatures:
        """The app's assembled features: its hooks, tools and handles (warm recall)."""
        if self._session_features is None:
            raise RuntimeError("features not assembled yet")
        return self._session_features

    @property
    def model_label(self) -> str:
        """What the status line calls the model (before the client exists, too)."""
        if self._llm is not None:
            return self._llm.status_label
        if self._start_model is not None:
            return self._start_model.label
        return self.settings.llm.model

    @property
    def idle(self) -> bool:
        """True when nothing is running and a query may start."""
        return self.state == "idle"

    def widget_for_item(self, item: Item) -> Widget | None:
        """The widget showing a stored display item (registered per type, else dimmed)."""
        factory = self.item_widgets.get(item.type)
        if factory is None:
            return DimItem(item.content)
        return factory(item)

    def show(self, widget: Widget) -> None:
        """Append a widget to the conversation without storing anything."""
        if (screen := self._chat_screen_if_up()) is not None:
            screen.show(widget)

    def model_changed(self) -> None:
        """The chat model was switched (/model): the status line names the new one."""
        if (screen := self._chat_screen_if_up()) is not None:
            screen.show_model(self.llm.status_label)

    def show_info(self, text: str) -> None:
        """A note in the conversation, not stored (command output, hints)."""
        if (screen := self._chat_screen_if_up()) is not None:
            screen.show_info(text)

    def show_error(self, text: str) -> None:
        """A one-line error in the conversation, not stored."""
        if (screen := self._chat_screen_if_up()) is not None:
            screen.show_error(text)
        else:
            log.warning("[TUI] not shown (the chat screen is gone): %s", text)

    @property
    def selected_item_id(self) -> int | None:
        """The stored message highlighted in the log (Alt+Up/Down, a click), if any."""
        return self._chat_screen().selected_item_id

    def item_changed(self, item: Item) -> None:
        """Show a stored item's new state (e.g. its pin) wherever it is on screen."""
        if (screen := self._chat_screen_if_up()) is not None:
            screen.item_changed(item)

    async def add_display_item(
        self, type: str, content: str, meta: JSONObject | None = None
    ) -> Item:
        """Store a display item with the session (never sent to the model) and show it."""
        item = await self.session.add_display_item(type, content, meta)
        widget = self.widget_for_item(item)
        if widget is not None:
            self.show(widget)
        return item

    def set_badge(self, name: str, text: str | None) -> None:
        """An extension's status badge (e.g. memories awaiting review); None drops it."""
        if (screen := self._chat_screen_if_up()) is not None:
            screen.set_badge(name, text)

    @asynccontextmanager
    async def busy(self, state: str, progress: str) -> AsyncIterator[None]:
        """Run an extension's work in its busy `state` (messages typed meanwhile queue,
        the status line says it) with a `progress` line shown, both undone however it
        ends. The caller checks first that the app may start (`idle`, else
        `busy_notice`)."""
        self.state = state
        line = InfoItem(progress)
        self.show(line)
        try:
            yield
        finally:
            line.remove()
            if self.state == state:
                self.state = "idle"

    def action_command(self, name: str, args: str = "") -> None:
        """Run a slash command: the action behind keys extensions bind."""
        self._chat_screen().run_command(name, args)

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """The palette's commands: Textual's (theme, keys, quit) and every slash command."""
        yield from super().get_system_commands(screen)
        for command in self.commands:
            if not command.usage.startswith("<"):  # a required argument needs the prompt
                yield SystemCommand(
                    command.signature.split()[0],
                    command.description,
                    partial(self.action_command, command.name),
                )

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "resume":
            return self._session is not None  # the picker needs the open store
        # Extension keys (e.g. ctrl+p: pin) act on the conversation and answer in it; on
        # another screen (/memory) they acted unseen, so there they are off the footer.
        if action == "command":
            from qwenmem_tui.tui.screens.chat import ChatScreen

            return isinstance(self.screen, ChatScreen)
        return True

    def describe_keys(self) -> Iterator[tuple[str, str]]:
        """(key, description) of the bindings active now, after the user's remapping.

        Those in the footer and qwenmem's own hidden ones (they carry an id, like the
        message selection keys); Textual's editing keys stay out.
        """
        for active in self.screen.active_bindings.values():
            binding = active.binding
            if (binding.show or binding.id is not None) and binding.description:
                yield self.get_key_display(binding), binding.description

    # -- lifecycle -----------------------------------------------------------------

    async def on_mount(self) -> None:
        from qwenmem_tui.tui.screens.chat import ChatScreen

        if self._long_lived:
            self._quit_on_signals()
        # The screen first: the prompt takes keys while the rest opens behind it.
        await self.push_screen(ChatScreen())
        self.theme_changed_signal.subscribe(self, self._theme_picked)
        if self._long_lived:
            collector.release(freeze=True)  # held by the CLI since launch
        self.run_worker(self._start(), group="startup", exclusive=True, exit_on_error=False)

    def _theme_picked(self, theme: Theme) -> None:
        """A theme chosen now (the palette): kept for the next start."""
        self.run_worker(
            asyncio.to_thread(remember_theme, self.paths, theme.name),
            group="theme", exclusive=True, exit_on_error=False,
        )
        configured = self.settings.ui.theme
        if configured is not None and configured != theme.name:
            self.show_info(
                f"Theme {theme.name} for now: {self.settings.source or 'the config'} sets "
                f"ui.theme = {configured!r} for every start."
            )

    def _quit_on_signals(self) -> None:
        """SIGTERM (kill, a shutdown) and SIGHUP (the terminal window closed) quit as
        Ctrl+Q does, through the app's own exit: a reply being streamed is stored as
        far as it came, marked interrupted. By default either signal ended the process
        on the spot and the reply's tail was lost."""
        loop = asyncio.get_running_loop()
        for signum in QUIT_SIGNALS:
            try:
                loop.add_signal_handler(signum, self._signalled, signum)
            except (NotImplementedError, RuntimeError, ValueError):  # no such signal here
                pass

    def _signalled(self, signum: int) -> None:
        if self._exiting_on is not None:
            # A hangup comes twice when the terminal closes (the emulator's, then the
            # kernel's): only a second SIGTERM insists, and ends the process at once.
            if signum == signal.SIGTERM:
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)
            return
        self._exiting_on = signum
        log.info("[TUI] %s: quitting", signal.Signals(signum).name)
        self.exit(return_code=128 + signum)

    async def _start(self) -> None:
        """Open storage, the features and the model, then show the session."""
        try:
            defaults = await asyncio.to_thread(_startup_imports)
        except Exception as exc:  # a broken install: nothing to open
            log.exception("[TUI] startup failed")
            self.exit(return_code=1, message=f"qwenmem could not start: {exc}")
            return
        from qwenmem_tui.chat.tools import broad_root_notice
        from qwenmem_tui.runtime import StartupError

        # The defaults first: an extension's widget for a type replaces the default.
        self.item_widgets = {**defaults, **self.item_widgets}
        try:
            await self._open()
            session, resumed = await self._open_chat(self._resume)
        except StartupError as exc:
            self.exit(return_code=1, message=str(exc))
            return
        except Exception as exc:
            log.exception("[TUI] startup failed")
            self.exit(return_code=1, message=f"qwenmem could not start: {exc}")
            return
        for extension in self._extensions:
            if extension.on_ready is not None:
                await _maybe_await(extension.on_ready(self))
        await self._set_session(session, resumed=resumed)
        if self._resume is True and not resumed:
            # `--resume` found nothing: say so, or it looks like the history was lost.
            self.show_info(NOTHING_TO_RESUME)
        if self._model_notice is not None:  # what the started model is (the offline one)
            self.show_info(self._model_notice)
        # Said once when the root is the home or /: the file tools then keep to cwd.
        if (root_notice := broad_root_notice(self.project_root, self._cwd)) is not None:
            self.show_info(root_notice)
        if self._long_lived:
            collector.settle_after_startup()
        self.state = "idle"  # what was typed meanwhile is sent now (ChatScreen's queue)

    async def _open(self) -> None:
        """Open the runtime, then build each extension on what it assembled."""
        from qwenmem_tui.runtime import ModelStarter, Runtime  # imported by _start

        start_model = self._start_model
        if self._llm is None and start_model is not None:
            # The runtime runs it while the database opens; its progress is a line here.
            starter = start_model

            def start(progress: Callable[[str], None]) -> Awaitable[LLMClient]:
                return self._started_model(starter)

            start_model = ModelStarter(label=starter.label, start=start, notice=starter.notice)
        runtime = self._runtime = await Runtime.open(
            self.settings,
            self.paths,
            self.project_root,
            llm=self._llm,
            start_model=start_model,
            model_defaults=self._model_defaults,
            features=self._extension_features(),
            extra_tools=self._extra_tools,
            hooks=self._hooks,
            clock=self.clock,
            on_database_retry=self._database_busy,
            cwd=self._cwd,
        )
        self._llm = runtime.llm
        self._chat_screen().show_model(runtime.llm.status_label)
        # One set of hooks and tools for the app: it follows the session on screen
        # (across /resume).
        features = self._session_features = runtime.session_features()
        context = AppContext(
            settings=self.settings,
            paths=self.paths,
            project_root=self.project_root,
            project=self.project,
            db=runtime.db,
            store=runtime.store,
            llm=runtime.llm,
            clock=self.clock,
            features=features,
            states=runtime.assembly.states,
            prompt_parts=runtime.prompt_parts,
        )
        assert self._extension_factories is not None  # resolved by _extension_features
        for factory in self._extension_factories:
            extension = await factory(context)
            self._extensions.append(extension)
            for command in extension.commands:
                self.commands.register(command)
            for binding in extension.bindings:
                self._bind_extension_key(binding)
            self.item_widgets.update(extension.item_widgets)
            self.busy_states.update(extension.busy_states)
            self.help_keys.extend(extension.help_keys)
        self._read_extension_css()
        self._chat_screen().add_busy_states(self.busy_states)

    def _read_extension_css(self) -> None:
        """The extensions' screen stylesheets, read now, while the app holds few
        widgets: read on a screen's first push instead, Textual reparses every source
        and restyles every widget (the whole conversation) before that screen paints.
        Kept under the resolved path Textual gives a screen's `CSS_PATH`, so the push
        finds it read already."""
        paths = [str(path.resolve()) for extension in self._extensions for path in extension.css_paths]
        unread = [path for path in dict.fromkeys(paths) if not self.stylesheet.has_source(path)]
        if not unread:
            return
        for path in unread:
            self.stylesheet.read(path)
        self.stylesheet.reparse()
        self.stylesheet.update(self)

    def _bind_extension_key(self, binding: Binding) -> None:
        """An extension's app-level key, through Textual's public `App.bind`.

        Textual takes bindings with ids (the ones its keymap remaps) only from a class's
        `BINDINGS`; an extension's keys are known once it is built, after the app is.
        `bind` takes no id, so the user's `[keys]` remapping of the id is applied here,
        the way the keymap applies it to the class bindings (a clash with a remapped
        class binding is Textual's to settle, as for any other key).
        """
        if binding.priority:
            raise ValueError(f"extension key {binding.key!r}: app-level keys cannot be priority")
        keys = self._user_keys.get(binding.id, binding.key) if binding.id else binding.key
        self.bind(
            keys,
            binding.action,
            description=binding.description,
            show=binding.show,
            key_display=binding.key_display,
        )

    async def _extension_features(self) -> set[str]:
        """The core features the extensions present (the runtime assembles them); the
        default extensions import in a thread (numpy/FAISS), after the database opened."""
        if self._extension_factories is None:
            self._extension_factories = await asyncio.to_thread(_default_extensions, self.settings)
        return {
            name
            for factory in self._extension_factories
            # A plain async callable is an extension presenting no core feature.
            for name in getattr(factory, "features", ())
        }

    async def _started_model(self, start: ModelStarter) -> LLMClient:
        """Run `start`, its progress as one dimmed line in the conversation meanwhile."""
        line = DimItem("")
        self.show(line)
        try:
            client = await start.start(lambda text: line.update(Content(terminal_safe(text))))
        finally:
            await line.remove()
        self._model_notice = start.notice  # said once the session is on screen
        return client

    def _database_busy(self, attempt: int, delay: float) -> None:
        # Another qwenmem holds the write lock; say why the UI may pause.
        if attempt == 1:
            self.notify("Database busy (another qwenmem?), retrying…", severity="warning")

    async def _open_chat(self, resume: str | bool | None) -> tuple[ChatSession, bool]:
        """The session to show: the requested one, the latest one, or a new one."""
        from qwenmem_tui.runtime import find_session  # imported by _start

        info: SessionInfo | None = None
        if resume is True:
            info = await self.store.latest_session(self.project)
        elif isinstance(resume, str) and resume:
            info = await find_session(self.store, self.project, resume)
        if info is None:
            return (
                await self._runtime_open().open_chat(features=self.session_features, interactive=True),
                False,
            )
        return await self._load_chat(info.id), True

    async def _load_chat(self, session_id: str) -> ChatSession:
        return await self._runtime_open().open_chat(
            session_id, features=self.session_features, interactive=True
        )

    def _runtime_open(self) -> Runtime:
        if self._runtime is None:
            raise RuntimeError("the runtime is not open yet")
        return self._runtime

    async def _set_session(self, session: ChatSession, *, resumed: bool) -> None:
        self._session = session
        secret = self.settings.api_key_value()
        debuglog.configure(self.paths, session.info.id, secrets=[secret] if secret else [])
        log.info("[TUI] session %s (%s)", session.info.id, "resumed" if resumed else "new")
        await self._chat_screen().show_session(session)
        self.post_message(self.SessionOpened(session, resumed))

    async def _close_session(self) -> None:
        if self._session is not None:
            try:
                await self._session.close()
                # Opening qwenmem and leaving without a word must not leave an
                # "(untitled)" session behind in `qwenmem sessions`.
                if await self.store.delete_if_empty(self._session.info.id):
                    log.info("[TUI] empty session %s discarded", self._session.info.id)
                    self.kept_session_id = None
                else:
                    self.kept_session_id = self._session.info.id
            except Exception:
                log.exception("[TUI] closing the session failed")

    async def on_unmount(self) -> None:
        await self._close_session()
        for extension in self._extensions:
            if extension.close is not None:
                try:
                    await extension.close()
                except Exception:
                    log.exception("[TUI] closing extension %s failed", extension.name)
        if self._runtime is not None:
            await self._runtime.close()  # lets extraction finish, closes memory, llm, db

    async def on_qwenmem_app_session_opened(self, event: SessionOpened) -> None:
        # Every extension's on_ready ran before the first session was set.
        for extension in self._extensions:
            if extension.on_session_opened is not None:
                await _maybe_await(extension.on_session_opened(self, event.resumed))

    # -- focus -----------------------------------------------------------------------

    async def on_event(self, event: events.Event) -> None:
        # Keys and pastes from the terminal, before Textual hands each to the focused
        # widget: the chat screen may move the focus to its prompt first (see
        # ChatScreen.take_typing), so every key of a burst lands where it was meant.
        if isinstance(event, (events.Key, events.Paste)) and not event.is_forwarded:
            from qwenmem_tui.tui.screens.chat import ChatScreen

            screen = self.screen
            if isinstance(screen, ChatScreen):
                screen.take_typing(event)
        await super().on_event(event)

    def watch_app_focus(self, app_focus: bool) -> None:
        # Textual sets app_focus from AppFocus/AppBlur and also on any key or click
        # while blurred (tmux without focus-events never reports focus-in).
        self.terminal_focused = app_focus

    # -- session switching ---------------------------------------------------------

    def action_resume(self) -> None:
        """Open the resume picker; the chosen session replaces the current one."""
        from qwenmem_tui.tui.screens.resume import ResumeScreen

        def chosen(session_id: str | None) -> None:
            if session_id:
                # Ctrl+R works on any screen (e.g. /memory): the session opens in the
                # chat, so show the chat rather than leave the chosen session hidden.
                chat = self._chat_screen()
                while self.screen is not chat:
                    self.pop_screen()
                self.open_session(session_id)

        picker = ResumeScreen(self.store, self.project, self.clock, exclude=self.session.info.id)
        self.push_screen(picker, chosen)

    def open_session(self, session_id: str) -> None:
        """Switch to another session of this project (cancels a running reply)."""
        self.run_worker(self._switch_session(session_id), group="session", exclusive=True)

    async def _switch_session(self, session_id: str) -> None:
        from qwenmem_tui.runtime import StartupError, find_session  # imported by _start

        screen = self._chat_screen()
        try:
            session_id = (await find_session(self.store, self.project, session_id)).id
        except StartupError as exc:
            self.show_error(str(exc))  # before cancelling: a typo must not stop a reply
            return
        await screen.cancel_turn()
        try:
            session = await self._load_chat(session_id)
        except Exception as exc:
            log.exception("[TUI] resume failed")
            self.show_error(f"Could not open session {session_id}: {exc}")
            return
        if get_current_worker().is_cancelled:
            return
        await self._close_session()
        await self._set_session(session, resumed=True)

    async def clear_conversation(self) -> None:
        """/clear: the model forgets the conversation; the screen starts empty."""
        screen = self._chat_screen()
        await screen.cancel_turn()
        marker = await self.session.reset()
        await screen.clear_log()
        widget = self.widget_for_item(marker)
        if widget is not None:
            self.show(widget)

    def _chat_screen(self) -> ChatScreen:
        screen = self._chat_screen_if_up()
        if screen is None:
            raise RuntimeError("the chat screen is not up")
        return screen

    def _chat_screen_if_up(self) -> ChatScreen | None:
        """The chat screen; None once quitting has taken it down. What extensions show
        (notes, badges, an item's new state) may come from work that finishes while
        the app exits: it has nowhere to go then, and must not turn a clean quit
        into exit status 1."""
        from qwenmem_tui.tui.screens.chat import ChatScreen

        for screen in self.screen_stack:
            if isinstance(screen, ChatScreen):
                return screen
        return None


def _startup_imports() -> Mapping[str, ItemWidgetFactory]:
    """What the first frame does not need, imported in a thread by the startup worker
    (the loop keeps taking keys): the runtime with the chat core, the chat screen's
    view of a query and the reply's Markdown widgets (markdown-it, Pygments, Rich's
    Markdown). Returns the default
    item widgets. `tests/unit/test_launch_imports.py` keeps them out of the first frame.
    """
    import qwenmem_tui.runtime  # noqa: F401  (the chat core, the storage, the LLM client)
    import qwenmem_tui.tui.screens.reply_view  # noqa: F401  (what a query shows)
    from qwenmem_tui.tui.widgets.items import DEFAULT_ITEM_WIDGETS

    return DEFAULT_ITEM_WIDGETS


def _default_extensions(settings: Settings) -> list[ExtensionFactory]:
    # Imported when called (in a thread, by the startup worker): the feature modules
    # load numpy/FAISS, which the first frame must not wait for.
    from qwenmem_tui.tui.default_extensions import default_extensions

    return default_extensions(settings)


async def _maybe_await(result: Awaitable[None] | None) -> None:
    if inspect.isawaitable(result):
        await result


def create_app(
    settings: Settings,
    paths: Paths,
    *,
    cwd: Path,
    resume: str | bool | None = None,
    clock: Callable[[], float] = time.time,
    llm: LLMClient | None = None,
    hooks: Sequence[QueryHook] = (),
    extra_tools: Sequence[Tool] = (),
    extensions: Sequence[ExtensionFactory] | None = None,
    model_defaults: LocalChatDefaults | None = None,
    start_model: ModelStarter | None = None,
    long_lived: bool = False,
    early_input: bytes = b"",
) -> QwenmemApp:
    """Build the app. `resume=True` opens this project's latest session, a str that id.

    `hooks` and `extra_tools` are added as given (tests); `extensions` defaults to the
    features `settings` turn on (`tui.default_extensions.default_extensions`). Without
    `llm`, the client is built from `settings`, or by `start_model` when a model must
    start first (it runs behind the drawn TUI).
    """
    return QwenmemApp(
        settings=settings,
        paths=paths,
        cwd=cwd,
        resume=resume,
        clock=clock,
        llm=llm,
        hooks=hooks,
        extra_tools=extra_tools,
        extensions=extensions,
        model_defaults=model_defaults,
        start_model=start_model,
        long_lived=long_lived,
        early_input=early_input,
    )
