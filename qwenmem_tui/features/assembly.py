"""A session's features, assembled in one place for every face (TUI, daemon, MCP, proxy).

The faces only decide *which* features run (the settings, or a test's selection); the
runtime opens what they share (the database, the LLM client) and this module builds
the rest from the registry (`features/registry.py`), so a rule lives here once:

- **Order.** Hooks run in their features' `hook_rank` order. Compaction's hook comes
  first: when it compacts it throws the request away and rebuilds it from the (now
  folded) model view, so the memory reminder prefetch adds must come after it — and
  prefetch, re-applying earlier deliveries to the rebuilt request, frees the memories
  whose anchor was summarised away. Then memory (prefetch, receipts, extraction), MCP
  tools, titles.
- **Explicit hand-over.** Features are built in registry order and hand over through
  `SessionWiring`: before a block is summarised away its messages go to memory
  extraction (compaction is *given* the extractor); no feature looks for another
  among the hooks.
- **The local model.** A model that cannot call tools is offered none — neither the
  built-in ones nor a feature's (`offers_tools`); its short system prompt is chosen by
  the runtime (`runtime.system_prompt_for`), with every other chat's.

`Assembly.session()` builds a fresh set of hooks: the TUI calls it once (its hooks
follow the one session on screen, across /resume), the daemon once per session it
serves (sessions there run queries concurrently, and hooks keep per-session state).
A feature's state (memory's `MemoryAccess`, MCP's servers) is shared by every set.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar, cast

from qwenmem_tui.chat.tools import Tool, ToolRegistry, builtin_tools
from qwenmem_tui.config import Settings
from qwenmem_tui.features import registry
from qwenmem_tui.features.feature import (
    AnyFeature,
    FeatureContext,
    FeatureKey,
    SessionPart,
    SessionWiring,
)
from qwenmem_tui.paths import Paths

if TYPE_CHECKING:
    from qwenmem_tui.chat.session import ChatSession, QueryHook
    from qwenmem_tui.llm.client import LLMClient
    from qwenmem_tui.llm.local_server import LocalChatDefaults

log = logging.getLogger("qwenmem.features")

T = TypeVar("T")


def enabled_features(settings: Settings, *, chats: bool = True) -> frozenset[str]:
    """The features this configuration turns on (`chats=False`: of those, the ones
    that serve a runtime without chats)."""
    return frozenset(
        feature.name
        for feature in registry.FEATURES
        if feature.enabled(settings) and (chats or feature.without_chats)
    )


def needs_model_without_chats(settings: Settings) -> bool:
    """Whether a runtime without chats still needs the endpoint's client (a feature
    that serves it embeds there)."""
    return any(
        feature.needs_model(settings)
        for feature in registry.FEATURES
        if feature.without_chats and feature.needs_model is not None and feature.enabled(settings)
    )


@dataclass(frozen=True)
class SessionFeatures:
    """What the features add to a chat session, with a handle on each for the faces."""

    hooks: tuple[QueryHook, ...]
    """In the one correct order; pass them to ChatSession as they are."""
    tools: ToolRegistry
    parts: Mapping[str, SessionPart] = field(default_factory=dict)

    def handle(self, key: FeatureKey[T]) -> T | None:
        """The faces' handle on a feature's part of this session (None when it does
        not run), typed by its `FeatureKey`."""
        part = self.parts.get(key.name)
        return None if part is None else cast("T", part.handle)

    def warm_recall(self, session: ChatSession, text: str) -> None:
        """Typing paused: start what a query sending this text will want (memory
        recall, so a question sent as it stands gets its memory in the first request)."""
        for part in self.parts.values():
            if part.warm is not None:
                part.warm(session, text)

    async def drain(self) -> None:
        """Wait for the features' background work (extraction; shutdown, tests)."""
        await asyncio.gather(*(p.drain() for p in self.parts.values() if p.drain is not None))


@dataclass(frozen=True)
class Assembly:
    """Builds sessions' features from what a face has opened, in the one correct order."""

    context: FeatureContext
    features: frozenset[str]
    states: Mapping[str, object]
    """The state of each feature that runs, by name (what its `open` returned)."""
    extra_tools: Sequence[Tool] = ()  # tests' own tools, offered like a feature's
    registered: tuple[AnyFeature, ...] = ()
    """The registry it was built from (`registry.FEATURES` when it was created)."""

    @classmethod
    def create(
        cls,
        settings: Settings,
        paths: Paths,
        *,
        llm: LLMClient | None,
        project_root: Path,
        project: str,
        features: Collection[str] | None = None,
        model_defaults: LocalChatDefaults | None = None,
        extra_tools: Sequence[Tool] = (),
        clock: Callable[[], float] = time.time,
        serves_chats: bool = True,
    ) -> Assembly:
        """The assembly of `features` (None: what the settings turn on).

        Each feature's state is opened but not started: the runtime starts the ones
        that run in the background (`start`); memory's `MemoryAccess` starts when a
        face listens to its notices (TUI) or awaits it (daemon).
        """
        registered = registry.FEATURES
        names = enabled_features(settings) if features is None else frozenset(features)
        unknown = names - {feature.name for feature in registered}
        if unknown:
            raise ValueError(f"unknown features: {', '.join(sorted(unknown))}")
        context = FeatureContext(
            settings=settings,
            paths=paths,
            llm=llm,
            project_root=project_root,
            project=project,
            model_defaults=model_defaults,
            clock=clock,
            serves_chats=serves_chats,
        )
        states: dict[str, object] = {}
        for feature in registered:
            if feature.name in names:
                state = feature.open(context) if feature.open is not None else True
                if state is not None:
                    states[feature.name] = state
        return cls(
            context=context,
            features=names,
            states=states,
            extra_tools=tuple(extra_tools),
            registered=registered,
        )

    def _running(self) -> list[AnyFeature]:
        return [f for f in self.registered if f.name in self.states]

    def runs(self, name: str) -> bool:
        """Whether feature `name` runs here (its state opened)."""
        return name in self.states

    def state(self, key: FeatureKey[T]) -> T | None:
        """A feature's state (None when it does not run), typed by its `FeatureKey`."""
        return cast("T | None", self.states.get(key.name))

    async def settled(self) -> None:
        """Wait for every running feature's late tools to come up (`Feature.settled`)."""
        for feature in self._running():
            if feature.settled is not None:
                await feature.settled(self.states[feature.name])

    async def ready(self) -> None:
        """Wait until every running feature's state serves (`Feature.ready`)."""
        for feature in self._running():
            if feature.ready is not None:
                await feature.ready(self.states[feature.name])

    def listen(self, notice: Callable[[str], None]) -> None:
        """Hand `notice` to every running feature that tells one-line notices."""
        for feature in self._running():
            if feature.listen is not None:
                feature.listen(self.states[feature.name], notice)

    def start(self) -> None:
        """Start what runs in the background (a slow MCP server joins when ready)."""
        for feature in self._running():
            if feature.start is not None:
                feature.start(self.states[feature.name])

    def session(self) -> SessionFeatures:
        """A fresh set of hooks and tools for one chat session (or one TUI)."""
        with_tools = self.context.offers_tools
        tools = builtin_tools(self.context.project_root) if with_tools else ToolRegistry()
        wiring = SessionWiring()
        parts = {
            f.name: f.session(self.states[f.name], self.context, wiring)
            for f in self._running()
            if f.session is not None
        }
        ranked = sorted(self._running(), key=lambda f: f.hook_rank)
        hooks = tuple(hook for f in ranked if f.name in parts for hook in parts[f.name].hooks)
        offered = [*self.extra_tools, *(t for part in parts.values() for t in part.tools)]
        for tool in offered if with_tools else ():
            tools.register(tool)
        for part in parts.values():
            for provider in part.tool_providers:
                tools.add_provider(provider)
        return SessionFeatures(hooks=hooks, tools=tools, parts=parts)

    async def close(self) -> None:
        """Close the features' states, the last opened first (memory drains extraction)."""
        for feature in reversed(self._running()):
            if feature.close is not None:
                await feature.close(self.states[feature.name])
