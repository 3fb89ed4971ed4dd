"""The runtime: what every face opens once, and the ready chat sessions it hands out.

A face (the TUI, the HTTP daemon, the MCP server, the OpenAI-compatible proxy)
presents qwenmem; it does not wire it. `Runtime.open` opens, in this order and once
per process, the database and its session store, the LLM client (a model that must
start first — the bundled local one — starts while the database opens) and the
assembled features (`qwenmem_tui.features`: hooks in order, tools, each feature's
state); `open_chat` turns a stored or new session into a ready `ChatSession`;
`close` tears everything down in the reverse order. So no face constructs a store, a
client or a hook, and a rule about opening (what to preload off the event loop, which
system prompt a model gets) lives here once.

```python
runtime = await Runtime.open(settings, paths, project_root(Path.cwd()))
try:
    chat = await runtime.open_chat()              # a new session; open_chat(id) resumes
    async for event in chat.run_query("hello"):
        ...
    servers = runtime.state(MCP_STATE)             # a feature's state, typed by its key
finally:
    await runtime.close()
```
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, TypeVar, cast

from qwenmem_tui.chat.session import DEFAULT_SYSTEM_PROMPT, ChatOptions, ChatSession
from qwenmem_tui.chat.view import model_messages
from qwenmem_tui.config import Settings
from qwenmem_tui.features import registry
from qwenmem_tui.features.feature import FeatureKey, PromptPart
from qwenmem_tui.llm.client import LLMClient
from qwenmem_tui.llm.wire import Message
from qwenmem_tui.paths import Paths, project_id, project_root
from qwenmem_tui.reads import StartupError as StartupError  # re-exported for the faces
from qwenmem_tui.reads import check_resume as check_resume
from qwenmem_tui.reads import find_session as find_session
from qwenmem_tui.storage.database import Database, RetryCallback, StorageError
from qwenmem_tui.storage.sessions import Item, SessionInfo, SessionStore

if TYPE_CHECKING:
    # Types only: the features load their stacks (numpy/FAISS); `open` imports them in
    # a thread so a face's event loop keeps serving meanwhile.
    from qwenmem_tui.chat.session import QueryHook
    from qwenmem_tui.chat.tools import Tool
    from qwenmem_tui.features.assembly import Assembly, SessionFeatures
    from qwenmem_tui.llm.local_server import LocalChatDefaults, LocalModelServer

log = logging.getLogger("qwenmem.runtime")

T = TypeVar("T")

FEATURE_MODULES = ("qwenmem_tui.features.assembly",)
PRELOAD_MODULES = ("openai", *FEATURE_MODULES)
"""Imported in a thread by `open`, so the face's event loop keeps serving (keys, HTTP):
the SDK alone takes ~0.4 s to import, the features' cores (numpy, FAISS) as much
again."""


@dataclass(frozen=True)
class ModelStarter:
    """A model that must start before the chat can use it (the bundled local one)."""

    label: str
    """What a face calls it meanwhile, e.g. "local: SmolLM2-135M"."""
    start: Callable[[Callable[[str], None]], Awaitable[LLMClient]]
    """Starts it and returns its client, given a callback that shows one progress line
    (raise StartupError for a one-line failure)."""
    notice: str | None = None
    """What a face says once it started: what this model is (the bundled one is a
    small model to try qwenmem with, not the assistant a newcomer may take it for)."""


def local_model_starter(server: LocalModelServer, settings: Settings) -> ModelStarter:
    """The bundled model as a `ModelStarter`: started while the runtime opens (at once
    if it is running already: `qwenmem serve` starts it first, with its spinner), its
    client the chat's (`LocalModelClient.for_server`); a failure is one StartupError
    line. Every face starts it this way, none builds its client."""
    from qwenmem_tui.llm.local_client import LocalModelClient
    from qwenmem_tui.llm.local_server import LocalModelError

    async def start(progress: Callable[[str], None]) -> LLMClient:
        def show(elapsed: float) -> None:
            progress(f"Loading local model {server.label}… {elapsed:.1f}s")

        try:
            await server.astart(show)
        except LocalModelError as exc:
            raise StartupError(str(exc)) from None
        return LocalModelClient.for_server(server, settings)

    notice = (
        f"Running offline on {server.label}, a small model for trying qwenmem without an "
        "endpoint: set QWENMEM_BASE_URL (or [llm] base_url in config.toml) for a real one."
    )
    return ModelStarter(label=server.display_label, start=start, notice=notice)


def bundled_model(
    settings: Settings, paths: Paths, stack: ExitStack
) -> tuple[LocalChatDefaults | None, ModelStarter | None]:
    """With no endpoint configured, the bundled local model for this run: its defaults
    applied to `settings`, its starter, its server stopped when `stack` closes;
    (None, None) when an endpoint is configured. StartupError when it cannot run."""
    import os

    from qwenmem_tui.llm.provider import resolve_provider

    if resolve_provider(settings, os.environ) != "local":
        return None, None
    from qwenmem_tui.llm.local_server import LocalModelError, LocalModelServer

    try:
        server = LocalModelServer.from_settings(settings, paths)
    except LocalModelError as exc:
        raise StartupError(str(exc)) from None
    stack.callback(server.stop)
    defaults = server.chat_defaults()
    defaults.apply_to(settings)
    return defaults, local_model_starter(server, settings)


def system_prompt_for(model_defaults: LocalChatDefaults | None) -> str:
    """The system prompt of every chat of a runtime: the one place it is chosen.

    The bundled local model gets its own short prompt; every other model the chat's.
    """
    return model_defaults.system_prompt if model_defaults is not None else DEFAULT_SYSTEM_PROMPT


FeatureNames = Collection[str] | Awaitable[Collection[str]] | None
"""Which features to assemble: None, what the settings turn on; an awaitable when the
face learns them while the runtime opens (the TUI imports its extensions in a thread)."""


class Runtime:
    """The opened pieces a face presents: database, sessions, LLM client, features.

    Everything here is open once `open` returns. Attributes: `settings`, `paths`,
    `project_root`, `project` (its `project_id`, the key sessions and memories use),
    `clock`, `db`, `store` (the `SessionStore`), `llm`, `assembly`, `model_defaults`,
    `system_prompt`; a feature's state is `state(KEY)` (None when it does not run),
    opening in the background until someone awaits it (`open(..., wait_ready=True)`).
    """

    def __init__(
        self,
        *,
        settings: Settings,
        paths: Paths,
        project_root: Path,
        clock: Callable[[], float],
        db: Database,
        store: SessionStore,
        llm: LLMClient | None,
        owns_llm: bool,
        assembly: Assembly,
        model_defaults: LocalChatDefaults | None,
        hooks: Sequence[QueryHook],
        prompt_parts: Mapping[str, PromptPart] = MappingProxyType({}),
    ) -> None:
        self.settings = settings
        self.paths = paths
        self.project_root = project_root
        self.project = project_id(project_root)
        self.clock = clock
        self.db = db
        self.store = store
        self._llm = llm
        self._owns_llm = owns_llm
        self.assembly = assembly
        self.model_defaults = model_defaults
        self.prompt_parts = prompt_parts
        """The project instruction files in force (AGENTS.md, QWEN.md, CLAUDE.md)."""
        sections = [part.section() for part in prompt_parts.values()]
        self.system_prompt = "\n\n".join([system_prompt_for(model_defaults), *filter(None, sections)])
        # A test's own hooks, ahead of every chat's feature hooks.
        self._hooks = tuple(hooks)
        self._closed = False

    # -- opening -------------------------------------------------------------------

    @classmethod
    async def open(
        cls,
        settings: Settings,
        paths: Paths,
        root: Path,
        *,
        llm: LLMClient | None = None,
        start_model: ModelStarter | None = None,
        model_progress: Callable[[str], None] = lambda text: None,
        model_defaults: LocalChatDefaults | None = None,
        features: FeatureNames = None,
        extra_tools: Sequence[Tool] = (),
        hooks: Sequence[QueryHook] = (),
        clock: Callable[[], float] = time.time,
        on_database_retry: RetryCallback | None = None,
        wait_ready: bool = False,
        notice: Callable[[str], None] | None = None,
        check_integrity: bool = False,
        cwd: Path | None = None,
        chats: bool = True,
    ) -> Runtime:
        """Open everything a face needs for the project at `root` (a project root,
        see `paths.project_root`); StartupError with one line when it cannot.

        The LLM client: `llm` as given (the caller keeps it: it is not closed here),
        else the one `start_model` starts (concurrently with the database; its progress
        lines go to `model_progress`), else one built from the settings.
        `model_defaults`: the bundled local model's profile (its prompt, no tools it
        cannot call). `features`: see `FeatureNames`. `extra_tools` and `hooks`: a
        test's own, offered and run like a feature's (hooks first).

        The features' states open in the background (the TUI draws before a vector
        index loads); `wait_ready=True` waits until each serves (`Feature.ready`), so a
        broken store fails the opening (the daemon); `check_integrity=True` reads every
        page of the database first (`Database.check_integrity`), for a face that runs
        for days. `notice` hears the features' one-line notices (`Feature.listen`: a
        store down, reconnecting).

        `cwd` (default: `root`): where the user works; the project instruction files
        from `root` down to it go into the system prompt (each feature's `prompt`).

        `chats=False`: a face that serves no chats (`qwenmem mcp`, spawned per client
        session, must answer at once): only the features that serve without chats are
        assembled (`Feature.without_chats`), with `serves_chats=False` in their context;
        no model is started, no SDK or secret scanner is preloaded (the face loads the
        scanner when it needs it), no instruction file is read; a model client is made
        only when such a feature needs one (`Feature.needs_model`). `open_chat` and
        `llm` refuse.
        """
        if not chats and (start_model is not None or hooks or extra_tools):
            raise ValueError("a runtime that serves no chats starts no model and runs no hooks")
        opening = _Opening(settings, paths, root, llm=llm, chats=chats)
        if llm is None and start_model is not None:
            opening.start_model(start_model, model_progress)
        try:
            await opening.open_database(on_database_retry, check_integrity=check_integrity)
            await opening.preload()
            prompt_parts = await opening.prompt_parts(cwd)
            names = await features if inspect.isawaitable(features) else features
            client = await opening.client()
            runtime = opening.build(
                cls,
                client,
                opening.feature_names(names),
                prompt_parts,
                model_defaults=model_defaults,
                extra_tools=extra_tools,
                hooks=hooks,
                clock=clock,
            )
        except BaseException:
            if inspect.iscoroutine(features):
                features.close()  # never awaited when the opening failed before it
            await opening.abandon()
            raise
        await runtime._start(wait_ready=wait_ready, notice=notice)
        return runtime

    async def _start(self, *, wait_ready: bool, notice: Callable[[str], None] | None) -> None:
        """What runs once everything is open: the features' background work (a slow
        server joins when it is ready), their notices heard, their states awaited with
        `wait_ready`."""
        if notice is not None:
            self.assembly.listen(notice)
        self.assembly.start()
        if wait_ready:
            try:
                await self.assembly.ready()
            except BaseException:
                await self.close()
                raise

    # -- what faces use ------------------------------------------------------------

    @property
    def llm(self) -> LLMClient:
        """The chat model's client (a runtime opened with `chats=False` has none)."""
        if self._llm is None:
            raise RuntimeError("this runtime serves no chats: it opened no model client")
        return self._llm

    @property
    def model_client(self) -> LLMClient | None:
        """The model's client, if the runtime has one (without chats: only when a
        feature needs the endpoint)."""
        return self._llm

    def state(self, key: FeatureKey[T]) -> T | None:
        """A feature's state for the runtime's life (None when it does not run),
        typed by its `FeatureKey`."""
        return self.assembly.state(key)

    def prompt_part(self, key: FeatureKey[T]) -> T | None:
        """What feature `key` added to the system prompt (None: nothing read)."""
        return cast("T | None", self.prompt_parts.get(key.name))

    async def tools_settled(self) -> None:
        """Wait for the tools that join late to come up (or fail, within their
        timeouts: `Feature.settled`). A long-lived face lets a slow server join later;
        one that answers a single question (`qwenmem -p`) waits here first."""
        await self.assembly.settled()

    def session_features(self) -> SessionFeatures:
        """A fresh set of the features' hooks and tools for one chat (or one TUI)."""
        return self.assembly.session()

    async def open_chat(
        self,
        session: SessionInfo | str | None = None,
        *,
        features: SessionFeatures | None = None,
        interactive: bool = False,
    ) -> ChatSession:
        """A ready chat: `session` loaded (an id or its info), or a new one (None),
        stored only with its first item (`SessionStore.create_session(lazy=True)`).

        `features`: the hooks and tools to run it with; None, a fresh set. The TUI
        passes its one set (its hooks follow the session on screen across /resume),
        the daemon one set per session it serves.

        `interactive`: a face where a person types and the face warms the chat while
        they do (the TUI). Every other face (the daemon, headless, ACP) leaves it
        False and gets the API faces' rules: the first request of a message waits for
        what its features prepare (the recall) as the API faces do.
        """
        if self._llm is None:
            raise RuntimeError("this runtime serves no chats (Runtime.open(chats=False))")
        features = features if features is not None else self.session_features()
        deps = ChatOptions(
            llm=self.llm,
            tools=features.tools,
            settings=self.settings,
            project_root=self.project_root,
            hooks=(*self._hooks, *features.hooks),
            clock=self.clock,
            system_prompt=self.system_prompt,
            interactive=interactive,
        )
        if session is None:
            info = await self.store.create_session(self.project, lazy=True)
            return ChatSession(info=info, store=self.store, **deps)
        session_id = session.id if isinstance(session, SessionInfo) else session
        return await ChatSession.load(session_id=session_id, store=self.store, **deps)

    async def find_session(self, ref: str) -> SessionInfo:
        """This project's session `ref` (an id or a unique prefix); StartupError else."""
        return await find_session(self.store, self.project, ref)

    def model_view(self, items: Sequence[Item]) -> list[Message]:
        """What the model sees of stored items (after the last /clear, summarised
        history folded), with this runtime's system prompt: a history without opening a chat."""
        return model_messages(items, self.system_prompt)

    # -- closing -------------------------------------------------------------------

    async def close(self) -> None:
        """Tear down in reverse order: the features (background work drained, their
        states closed), the LLM client the runtime made, the database. Chats opened
        from the runtime are the face's to close first. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            await self.assembly.close()
        except Exception:
            log.exception("[RUNTIME] closing the features failed")
        try:
            if self._owns_llm and self._llm is not None:
                await self._llm.aclose()
        finally:
            await self.db.close()


class _Opening:
    """`Runtime.open` in steps, holding what is open so far: a failed opening closes
    exactly that (the model's start cancelled, the client it made, the database)."""

    def __init__(
        self, settings: Settings, paths: Paths, root: Path, *, llm: LLMClient | None, chats: bool
    ) -> None:
        self.settings = settings
        self.paths = paths
        self.root = root
        self.chats = chats
        self.given_llm = llm
        self.starting: asyncio.Task[LLMClient] | None = None
        self.db: Database | None = None
        self.made_llm: LLMClient | None = None

    def start_model(self, start: ModelStarter, progress: Callable[[str], None]) -> None:
        """Start the model now: it loads while the database opens."""
        async def started() -> LLMClient:
            return await start.start(progress)

        self.starting = asyncio.create_task(started(), name="model-start")

    async def open_database(self, on_retry: RetryCallback | None, *, check_integrity: bool) -> None:
        """The home's database, opened and migrated (and read through when asked);
        StartupError naming the file when it cannot be used."""
        self.paths.ensure()
        try:
            self.db = await Database.open(self.paths.db_file, on_retry=on_retry)
            if check_integrity:
                await self.db.check_integrity()
        except StorageError as exc:
            raise StartupError(str(exc)) from exc

    async def preload(self) -> None:
        """Import the heavy modules in a thread (PRELOAD_MODULES; a face serving no
        chats only the features), and for chats the secret scanner's detectors (the
        first message sent is scanned for secrets: they import now, not on the event
        loop then)."""
        for name in PRELOAD_MODULES if self.chats else FEATURE_MODULES:
            await asyncio.to_thread(importlib.import_module, name)
        if self.chats:
            from qwenmem_tui import secrets

            await asyncio.to_thread(secrets.load)

    async def prompt_parts(self, cwd: Path | None) -> dict[str, PromptPart]:
        """What each registered feature adds to the system prompt, read for the project
        from the root down to `cwd` (the instruction files); nothing for a face that
        serves no chats (there is no system prompt)."""
        if not self.chats:
            return {}
        where = cwd if cwd is not None else self.root
        return {
            f.name: await asyncio.to_thread(f.prompt, self.root, where, self.paths.home)
            for f in registry.FEATURES
            if f.prompt is not None
        }

    async def client(self) -> LLMClient | None:
        """The chat's client: the one given, the started model's, or one from the
        settings; serving no chats, one only for an embedder on the endpoint."""
        if self.given_llm is not None:
            return self.given_llm
        if self.starting is not None:
            self.made_llm = await self.starting
        elif self.chats or self._feature_needs_model():
            # In a thread: the SDK's HTTP stack imports as the client is built (~60 ms).
            self.made_llm = await asyncio.to_thread(LLMClient.from_settings, self.settings)
        if self.made_llm is not None and self.chats:
            await asyncio.to_thread(self.made_llm.warm)
        return self.made_llm

    def _feature_needs_model(self) -> bool:
        from qwenmem_tui.features.assembly import needs_model_without_chats  # preloaded

        return needs_model_without_chats(self.settings)

    def build(
        self,
        runtime: type[Runtime],
        client: LLMClient | None,
        names: Collection[str] | None,
        prompt_parts: Mapping[str, PromptPart],
        *,
        model_defaults: LocalChatDefaults | None,
        extra_tools: Sequence[Tool],
        hooks: Sequence[QueryHook],
        clock: Callable[[], float],
    ) -> Runtime:
        """The runtime on what is open: the features assembled on the client."""
        from qwenmem_tui.features.assembly import (
            Assembly,  # loaded (in a thread) by preload
        )

        assert self.db is not None  # opened first
        assembly = Assembly.create(
            self.settings,
            self.paths,
            llm=client,
            project_root=self.root,
            project=project_id(self.root),
            features=names,
            model_defaults=model_defaults,
            extra_tools=extra_tools,
            clock=clock,
            serves_chats=self.chats,
        )
        return runtime(
            settings=self.settings,
            paths=self.paths,
            project_root=self.root,
            clock=clock,
            db=self.db,
            store=SessionStore(self.db, clock=clock),
            llm=client,
            owns_llm=self.given_llm is None,
            assembly=assembly,
            model_defaults=model_defaults,
            hooks=hooks,
            prompt_parts=prompt_parts,
        )

    def feature_names(self, names: Collection[str] | None) -> Collection[str] | None:
        """`names` as asked; serving no chats, the features that serve without them
        (as the settings turn them on)."""
        if self.chats:
            return names
        from qwenmem_tui.features.assembly import enabled_features  # loaded by preload

        serving = enabled_features(self.settings, chats=False)
        if names is not None and set(names) - serving:
            raise ValueError("a runtime that serves no chats assembles only the features serving without them")
        return serving

    async def abandon(self) -> None:
        """The opening failed: close what it opened, the model's start first."""
        if self.starting is not None and not self.starting.done():
            self.starting.cancel()  # the open failed: the model's start stops with it
            await asyncio.wait({self.starting})
        if self.made_llm is not None:
            await self.made_llm.aclose()
        if self.db is not None:
            await self.db.close()

