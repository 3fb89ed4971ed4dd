"""What a feature is: the one registration a feature package makes (`Feature`).

A feature plugs into the chat loop (hooks, tools) and offers each face what it has for
it (the TUI its extension, the daemon its routes, the CLI its commands). Its package
holds all of it but its TUI face, which lives in the TUI (`tui/features/<name>/`) so
that Textual stays there (docs/architecture.md defines the four words: feature, face,
state, extension):

```text
features/<name>/
  feature.py      FEATURE = Feature(...)   <- the registration, and one line in registry.py
  settings.py     its settings section, if it has one
  ...             its core (no Textual, no HTTP): hooks, stores, services
  routes.py       its daemon face (Starlette), if it has one
  mcp_tools.py    its tools in `qwenmem mcp`, if it has them
  cli.py          its `qwenmem` subcommands, if it has them
tui/features/<name>/   its TUI face (Textual): the extension, screens, widgets
```

The core never imports a face, so a registration names its faces by reference
(``"module:attribute"``); the face that wants one loads it (`load_face`). The faces
(`tui/`, `daemon/`, `mcp_server/`) import of a feature only its registration, its own
faces and the modules it lists in `api`. The import contract test checks all of it.
"""

from __future__ import annotations

import argparse
import importlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from qwenmem_tui.llm.wire import Message
from qwenmem_tui.paths import Paths

if TYPE_CHECKING:
    from qwenmem_tui.config import Section, Settings, SettingsSection
    from qwenmem_tui.chat.session import ChatSession, QueryHook
    from qwenmem_tui.chat.tools import Tool
    from qwenmem_tui.llm.client import LLMClient
    from qwenmem_tui.llm.local_server import LocalChatDefaults

FaceRef = str
"""A face a feature offers, as ``"package.module:attribute"`` (loaded by the face)."""

T = TypeVar("T")
S = TypeVar("S")


@dataclass(frozen=True)
class FeatureKey(Generic[T]):
    """A typed handle on what a feature keeps: its state for the runtime's life
    (`Assembly.state`, `Runtime.state`) or its part of one session
    (`SessionFeatures.handle`). Declared once beside the registration
    (``MEMORY_STATE: FeatureKey[MemoryAccess] = FeatureKey(MEMORY)``), so a face reads
    it typed, without a cast or an annotation of its own."""

    name: str


class PromptPart(Protocol):
    """What a feature adds to every chat's system prompt (`Feature.prompt`)."""

    def section(self) -> str:
        """The text after the system prompt ("" adds nothing)."""
        ...


class RuntimeView(Protocol):
    """What a feature's helpers for faces read of an open runtime (`runtime.Runtime`),
    without the feature importing the runtime above it."""

    @property
    def settings(self) -> Settings: ...
    @property
    def project(self) -> str: ...
    @property
    def clock(self) -> Callable[[], float]: ...
    @property
    def model_client(self) -> LLMClient | None: ...
    def state(self, key: FeatureKey[T]) -> T | None: ...


def offers_tools(model_defaults: LocalChatDefaults | None) -> bool:
    """Whether the model is offered tools: not the bundled local model that cannot call them."""
    return model_defaults is None or model_defaults.supports_tools


@dataclass(frozen=True)
class FeatureContext:
    """What a feature opens with, once per runtime."""

    settings: Settings
    paths: Paths
    llm: LLMClient | None
    """None only where no chat is served (`serves_chats`): memory alone opens there."""
    project_root: Path
    project: str  # project_id(project_root): the key sessions and memories use
    model_defaults: LocalChatDefaults | None = None
    clock: Callable[[], float] = time.time
    serves_chats: bool = True
    """False: a face that serves memory, not chats (`qwenmem mcp`): memory counts as
    open with its rows, its vectors load at the first recall or write."""

    @property
    def offers_tools(self) -> bool:
        return offers_tools(self.model_defaults)


BlockExtractor = Callable[[list[Message]], Awaitable[None]]


@dataclass
class SessionWiring:
    """The explicit hand-overs between the features of one session: a feature built
    earlier (registry order) leaves here what a later one is given — nothing finds
    another feature by looking through hooks."""

    extract_block: BlockExtractor | None = None
    """Memory extraction of a block of messages (compaction hands over what it is
    about to summarise away)."""


@dataclass(frozen=True)
class SessionPart:
    """What one feature adds to one chat session."""

    hooks: tuple[QueryHook, ...] = ()
    tools: tuple[Tool, ...] = ()
    tool_providers: tuple[Callable[[], list[Tool]], ...] = ()
    """Tools that join later (MCP servers coming up), asked at each request."""
    handle: object = None
    """The faces' handle on it (the compaction hook, memory's hooks), read typed by
    the feature's `FeatureKey` (`SessionFeatures.handle`)."""
    warm: Callable[[ChatSession, str], None] | None = None
    """Typing paused on this text (the TUI): start work the query will want."""
    drain: Callable[[], Awaitable[None]] | None = None
    """Wait for its background work (shutdown, tests)."""


def _always(settings: Settings) -> bool:
    return True


@dataclass(frozen=True)
class Feature(Generic[S]):
    """One feature's registration: how it opens, what it adds to each session, and
    what it offers each face. Every part but the name is optional: /export adds
    nothing to a session and only offers a TUI extension.

    `S` is its state's type (what `open` returns, what `session`, `close`, ... are
    given): the type checker holds a registration's parts to one state.

    Adding a feature is a package with one of these and one line in `registry.py`.
    """

    name: str
    settings: FaceRef | SettingsSection[Section] | None = None
    """Its settings section, a `config.SettingsSection` in its `settings.py` (its
    package's model; `[name]` or keys of a shared table), validated at start with the
    core's and read typed: `SECTION.of(settings)`. A reference like the faces: the
    registry is read by every `qwenmem` command, `--help` too, before any config."""
    hook_rank: int = 50
    """Where its hooks run in the loop, lowest first (compaction 0, memory 10, MCP 20,
    titles 30)."""
    enabled: Callable[[Settings], bool] = _always
    """Whether this configuration turns it on (its settings section)."""
    session: Callable[[S, FeatureContext, SessionWiring], SessionPart] | None = None
    """A fresh part for one session, given the feature's state (what `open` returned)."""
    open: Callable[[FeatureContext], S | None] | None = None
    """Its state for the runtime's life (e.g. `MemoryAccess`), not started yet; None
    from it: nothing to run here (no MCP server configured). Without `open` the
    feature runs with no state of its own (`session` gets True)."""
    start: Callable[[S], None] | None = None
    """Start the state in the background once the runtime is open (MCP servers)."""
    close: Callable[[S], Awaitable[None]] | None = None
    ready: Callable[[S], Awaitable[None]] | None = None
    """Wait until its state serves (memory: the store open); a face that must not
    start broken asks for it (`Runtime.open(wait_ready=True)`): a failure fails it."""
    settled: Callable[[S], Awaitable[None]] | None = None
    """Wait for the tools it offers late to come up or fail (MCP servers): a face
    answering one question waits for it first (`Runtime.tools_settled`)."""
    listen: Callable[[S, Callable[[str], None]], None] | None = None
    """Hand its state a listener for its one-line notices (a store down, back)."""
    without_chats: bool = False
    """It serves a runtime that opens no chats (`qwenmem mcp`): only such features are
    assembled there."""
    needs_model: Callable[[Settings], bool] | None = None
    """Whether, in a runtime without chats, it still needs the endpoint's client (an
    embedder there)."""
    tui: FaceRef | None = None
    """Its TUI extension: an `ExtensionFactory` in its `tui/` package."""
    routes: FaceRef | None = None
    """Its daemon routes: a sequence of Starlette routes in its `routes.py`."""
    cli: FaceRef | None = None
    """Its `qwenmem` subcommands: a ``register(commands: Commands)`` in its `cli.py`."""
    exchange: FaceRef | None = None
    """What the daemon's OpenAI-compatible proxy adds to the conversations it relays:
    a ``(runtime: RuntimeView, *, extract: bool) -> exchange.Exchange | None`` (memory's
    recall, `views.exchange_memory`)."""
    mcp: FaceRef | None = None
    """Its MCP tools for `qwenmem mcp`: a ``register(server, backend)`` in its
    `mcp_tools.py`."""
    prompt: Callable[[Path, Path, Path], PromptPart] | None = None
    """What it adds to the system prompt, read once per runtime that serves chats:
    ``(project_root, cwd, home) -> PromptPart`` (blocking: run in a thread). Every
    registered feature's is read, whichever are assembled (a chat's prompt does not
    depend on a face's selection)."""
    items: tuple[ItemKind, ...] = ()
    """The display items it stores (a recap line, a memory receipt, a compaction
    marker) and their renderers."""
    api: tuple[str, ...] = ()
    """The modules of its package the faces may import besides `feature.py`, `tui/`
    and `routes.py` (memory's `remote` for the MCP server, ...); the rest is its
    core, which only the feature itself and the assembly reach."""


AnyFeature = Feature[Any]
"""A registration whatever its state: what the registry and the assembly hold. Each
feature's state is its own type and Python has no existential type to say "some
state, the one its own parts take", so here — and only here — the state is `Any`."""


@dataclass(frozen=True)
class ItemKind:
    """A display item a feature stores in a session (`Item.type`), with how it reads
    in an export; the TUI's widget for it comes with the feature's extension
    (`Extension.item_widgets`)."""

    name: str
    markdown: FaceRef | None = None
    """``(item, now) -> str``: the item in a Markdown export ("" leaves it out)."""


@dataclass(frozen=True)
class Commands:
    """Where a feature's `register` adds its subcommands (`Feature.cli`). A command
    sets ``func``: a sync or async callable of ``(args, settings, paths)`` (or just
    ``(args)``) returning an exit code or None."""

    root: argparse._SubParsersAction[argparse.ArgumentParser]
    """`qwenmem NAME ...`"""
    sessions: argparse._SubParsersAction[argparse.ArgumentParser]
    """`qwenmem sessions NAME ...` (export)"""


def _loaded(ref: FaceRef) -> object:
    module, _, attribute = ref.partition(":")
    found: object = getattr(importlib.import_module(module), attribute)
    return found


def load_face(ref: FaceRef, kind: type[T]) -> T:
    """The `kind` a `FaceRef` names (imports its module): a registration that names
    something else fails here, in one line, not at its first use."""
    face = _loaded(ref)
    if not isinstance(face, kind):
        raise TypeError(f"{ref} is a {type(face).__name__}, expected {kind.__name__}")
    return face


def load_faces(ref: FaceRef, kind: type[T]) -> tuple[T, ...]:
    """The sequence of `kind` a `FaceRef` names (a feature's daemon routes)."""
    faces = _loaded(ref)
    if not isinstance(faces, (list, tuple)) or not all(isinstance(face, kind) for face in faces):
        raise TypeError(f"{ref} is not a sequence of {kind.__name__}, as expected")
    return tuple(face for face in faces if isinstance(face, kind))


def load_function(ref: FaceRef) -> Callable[..., object]:
    """The function a `FaceRef` names (a CLI's, MCP tools' or renderer's `register`...).
    A reference is a string, so no checker sees its parameters: the caller checks what
    it returns."""
    function = _loaded(ref)
    if not callable(function):
        raise TypeError(f"{ref} is a {type(function).__name__}, expected a function")
    return function
