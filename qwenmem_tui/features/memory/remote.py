"""One project's memory as a client outside the chat uses it: the MCP tools
(`qwenmem mcp`, contract §8) and the daemon's memory routes (§7).

Both faces answer the same four questions — search, remember, forget, list — with the
same JSON, the same validation and the same guard, so they live here once and each
face only translates errors into its protocol (an MCP tool error, an HTTP 400).

A write from outside is a model's write: another assistant's model chose to call the
tool, and qwenmem never sees what that model had in view. So it carries origin
``agent``, the client's name in the audit trail, and a provenance whose view is
unknown — untrusted — which makes the guard hold it exactly as it holds a chat write
made after reading a file: instruction-like values, and facts that would apply
everywhere (user/feedback) without the user's word for them, and notes naming a link
or an address (where that agent wants data to go). No client's answer makes them the
user's words — an MCP elicitation's "accept" is the client's, which it can give itself —
so they wait for the user's approval in qwenmem.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from pydantic import Field
from typing_extensions import TypedDict  # pydantic needs this one for schemas before 3.12

from qwenmem_tui.features.memory.confirmation import ACTION_NAMES
from qwenmem_tui.memory.model import (
    DAY,
    Category,
    Memory,
    Origin,
    RememberRequest,
    Status,
    WriteAction,
)
from qwenmem_tui.memory.provenance import Provenance, Writer
from qwenmem_tui.memory.render import VersionMarks, version_fields
from qwenmem_tui.memory.versions import later_versions

if TYPE_CHECKING:
    from qwenmem_tui.memory.service import MemoryService

MAX_K = 50
MAX_QUERY_CHARS = 4000
UNKNOWN_VIEW = "(what the client's model had in view is unknown to qwenmem)"
"""The untrusted content of an outside write's provenance: it is never empty, so the
guard treats the write as one made with unvetted content in view."""

class MemoryRequestError(ValueError):
    """The caller's arguments are wrong; ``str(e)`` is one line saying what to fix."""


@dataclass(frozen=True)
class Caller:
    """Who writes: the face ("MCP", "HTTP") and the client's own name, for the audit."""

    face: str
    name: str = ""

    def describe(self) -> str:
        return f"{self.face} client {self.name}" if self.name else f"{self.face} client"


def outside_provenance(caller: Caller) -> Provenance:
    """An outside model's write: unknown view, never the user's words (a client's
    "the user confirmed" is the client's claim); the user approves it in qwenmem."""
    return Provenance(
        Writer.MODEL, sources=(caller.describe(),), untrusted=(UNKNOWN_VIEW,), outside=True
    )


# Declared once: the MCP tools' output schema and the daemon's document are read from
# these (a docstring here is the schema's description a client reads).
class MemoryRow(TypedDict):
    """One memory: what it says, who wrote it, when, and whose it is (its scope)."""

    id: int
    category: str
    key: str
    value: str
    origin: Origin
    age_days: float
    date: Annotated[str, Field(description="when it was saved, YYYY-MM-DD (UTC)")]
    scope: str


class MemoryHit(MemoryRow, VersionMarks):
    """A memory a search found: its score, and whether a newer version may replace it."""

    score: float


class SearchAnswer(TypedDict):
    memories: list[MemoryHit]


class ListedMemory(MemoryRow, VersionMarks):
    """A memory a listing holds, marked as search marks it: a model reading the list
    must not take an earlier version for a current fact."""


class ListAnswer(TypedDict):
    memories: list[ListedMemory]


class RememberAnswer(TypedDict, total=False):
    id: int | None
    category: str | None
    key: str | None
    action: str
    """created, superseded, deduplicated, quarantined or refused"""
    flags: list[str]
    error: str


class ForgetAnswer(TypedDict):
    forgotten: bool


def memory_json(memory: Memory, now: float) -> MemoryRow:
    """A memory as outside clients see it (contract §8)."""
    return {
        "id": memory.id,
        "category": str(memory.category),
        "key": memory.key,
        "value": memory.value,
        "origin": memory.origin,
        "age_days": round(max(0.0, now - memory.created_at) / DAY, 2),
        # The calendar date beside the age: a client's model weighs "said on 2025-03-02"
        # against what it knows of the time, which "412.3 days" makes it compute.
        "date": time.strftime("%Y-%m-%d", time.gmtime(memory.created_at)),
        "scope": memory.scope,
    }


def _category(value: object) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or value not in {c.value for c in Category}:
        names = ", ".join(c.value for c in Category)
        raise MemoryRequestError(f"category must be one of {names}")
    return value


def _text(name: str, value: object, max_chars: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise MemoryRequestError(f"{name} must be a non-empty string")
    if len(value) > max_chars:
        raise MemoryRequestError(f"{name} must be at most {max_chars} characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise MemoryRequestError(f"{name} is not valid Unicode text") from None
    return value


def _whole_number(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, float) and value.is_integer() and math.isfinite(value):
        value = int(value)  # JSON has one number type: 3.0 is 3
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise MemoryRequestError(f"{name} must be a whole number from {low} to {high}")
    return value


class ProjectMemory:
    """The memory of one project (plus the user's global memories), for one caller."""

    def __init__(
        self,
        service: Callable[[], Awaitable[MemoryService]],
        project: str,
        caller: Caller,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._service = service
        self.project = project
        self.caller = caller
        self._clock = clock

    async def search(self, query: object, k: object = 5) -> SearchAnswer:
        """The chat's recall pipeline (filters, both channels, threshold), best first."""
        text = _text("query", query, MAX_QUERY_CHARS)
        count = _whole_number("k", k, 1, MAX_K)
        service = await self._service()
        result = await service.recall(text, project=self.project, k=count)
        now = self._clock()
        return {
            "memories": [
                {**memory_json(m, now), "score": score, **version_fields(m, result.later.get(m.id))}
                for m, score in zip(result.memories, result.scores, strict=True)
            ]
        }

    async def recall_block(self, query: object) -> str:
        """What the chat would put in front of the model for `query`: the §6 block of
        the recalled memories ("" when none passed)."""
        text = _text("query", query, MAX_QUERY_CHARS)
        service = await self._service()
        return (await service.recall(text, project=self.project)).block

    async def read(self, memory_id: object) -> MemoryRow | None:
        """One active memory of this project or a global one (None: no such memory
        here — another user's or project's id reads as none)."""
        service = await self._service()
        memory = await service.get(memory_id, project=self.project)  # type: ignore[arg-type]
        if memory is None or memory.status != Status.ACTIVE:
            return None
        return memory_json(memory, self._clock())

    async def remember(
        self,
        text: object,
        category: object = None,
        key: object = None,
    ) -> RememberAnswer:
        """Save a note through the one write path; the guard may hold or refuse it."""
        from qwenmem_tui.memory.guard import KEY_PATTERN, MAX_VALUE_CHARS
        from qwenmem_tui.memory.writer import MemoryRejected

        value = _text("text", text, MAX_VALUE_CHARS)
        chosen = _category(category)
        if key is not None and key != "" and not (isinstance(key, str) and KEY_PATTERN.fullmatch(key)):
            raise MemoryRequestError("key must be snake_case: a-z, 0-9 and _, starting with a letter")
        named = key if isinstance(key, str) and key else None
        service = await self._service()
        try:
            result = await service.remember(
                RememberRequest(
                    value,
                    project=self.project,
                    category=chosen,
                    key=named,
                    origin=Origin.AGENT,
                    provenance=outside_provenance(self.caller),
                    reason=f"remember by {self.caller.describe()}",
                )
            )
        except MemoryRejected as exc:
            return {"id": None, "category": chosen, "key": named, "action": "refused", "error": str(exc)}
        memory = result.memory
        answer: RememberAnswer = {
            "id": memory.id,
            "category": str(memory.category),
            "key": memory.key,
            "action": ACTION_NAMES[result.action],
        }
        if result.action is WriteAction.QUARANTINED:
            answer["flags"] = list(memory.flags)
        return answer

    async def forget(self, memory_id: object) -> ForgetAnswer:
        """Delete one memory (audited); another user's or project's id is not found."""
        if isinstance(memory_id, str) and memory_id.isascii() and memory_id.isdigit():
            memory_id = int(memory_id) if len(memory_id) <= 20 else 0
        if isinstance(memory_id, float) and memory_id.is_integer() and math.isfinite(memory_id):
            memory_id = int(memory_id)
        if isinstance(memory_id, bool) or not isinstance(memory_id, int):
            raise MemoryRequestError("id must be a memory id (a whole number)")
        service = await self._service()
        forgotten = await service.forget(
            memory_id,
            project=self.project,
            origin=Origin.AGENT,
            reason=f"forget by {self.caller.describe()}",
        )
        return {"forgotten": forgotten is not None}

    async def list(self, category: object = None) -> ListAnswer:
        """Active memories of this project and the global ones, newest first; an
        earlier version (a newer one listed may restate it) marked as search marks it."""
        chosen = _category(category)
        service = await self._service()
        rows = await service.list(project=self.project, statuses=[Status.ACTIVE])
        if chosen is not None:
            rows = [m for m in rows if m.category == chosen]
        rows.sort(key=lambda m: m.updated_at, reverse=True)
        now = self._clock()
        later = later_versions(rows)
        return {"memories": [{**memory_json(m, now), **version_fields(m, later.get(m.id))} for m in rows]}
