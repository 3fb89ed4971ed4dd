"""Recall: hard filters in SQL, then vector search restricted to what passed them.

Most "wrong memory" bugs are filter bugs — another user's or project's row, or an
expired one, found by the vector search. So the filters are never applied after the
search: the store answers which ids are allowed (user, scope, active, unexpired),
surfaced ids are removed, and FAISS only ever scores that set through an IDSelector.
Then the threshold, a lexical rerank and the top ``k``.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import unicodedata
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

import numpy as np

from qwenmem_tui.memory.embed import Embedder
from qwenmem_tui.memory.index import Progress, VectorIndex
from qwenmem_tui.memory.model import GLOBAL_SCOPE, Memory, Status, WriteAction, WriteResult
from qwenmem_tui.memory.render import render_block
from qwenmem_tui.memory.store import AllowedIds, MemoryStore

log = logging.getLogger("qwenmem.memory")

STRATEGY = "vector+lexical"
# Candidates fetched per requested memory: enough for the threshold and the rerank
# to choose from without scoring the whole store.
CANDIDATE_FACTOR = 3
_LEXICAL_WEIGHT = 0.15
_WORD = re.compile(r"\w+")


@dataclass
class RecallResult:
    """What recall found: the §6 block to put in front of the model, and why."""

    block: str  # "" when nothing passed
    ids: list[int]
    memories: list[Memory]
    scores: list[float]  # final (reranked) scores, aligned with ids
    strategy: str = STRATEGY
    latency_ms: float = 0.0
    vector_scores: list[float] = field(default_factory=list)

    @classmethod
    def empty(cls, latency_ms: float = 0.0) -> RecallResult:
        return cls(block="", ids=[], memories=[], scores=[], latency_ms=latency_ms)


def _terms(text: str) -> set[str]:
    # A 5-character prefix is a poor man's stemmer: "projects" meets "project".
    norm = unicodedata.normalize("NFKC", text).casefold()
    return {w[:5] for w in _WORD.findall(norm) if len(w) > 2}


def lexical_overlap(query: str, memory: Memory) -> float:
    """Share of the query's terms found in the memory's key or value."""
    q = _terms(query)
    if not q:
        return 0.0
    return len(q & _terms(f"{memory.key.replace('_', ' ')} {memory.value}")) / len(q)


class Recaller:
    """Owns the index's freshness and the cached allowed-id sets; one per process."""

    def __init__(
        self,
        store: MemoryStore,
        index: VectorIndex,
        embedder: Embedder,
        *,
        user: str,
        top_k: int,
        min_score: float,
        clock: Callable[[], float],
    ) -> None:
        self.store = store
        self.index = index
        self.embedder = embedder
        self.user = user
        self.top_k = top_k
        self.min_score = min_score
        self.clock = clock
        self._allowed: dict[tuple[str, ...], AllowedIds] = {}
        # Held while the index changes as a whole (sync, rebuild, a write applied):
        # a sync diffing ids while a write adds one would otherwise add it twice.
        self.lock = asyncio.Lock()

    @property
    def threshold(self) -> float | None:
        """``min_score`` 0 means the embedder's calibrated default; negative, none."""
        if self.min_score < 0:
            return None
        return self.min_score or self.embedder.default_threshold

    # index freshness -----------------------------------------------------------------
    async def rebuild(self, progress: Progress | None = None) -> None:
        """Re-read every vector of this embedder from the store into a new index."""
        generation = await self.store.generation()
        ids, vectors = await self.store.vectors(self.embedder.id)
        log.info("[MEMORY_INDEX] rebuilding %s from %d vectors", self.index.embedder_id, len(ids))
        await self.index.rebuild(ids, vectors, generation, progress)
        await self.index.save()

    async def apply(self, result: WriteResult, vector: np.ndarray | None) -> None:
        """Put a committed write into the index in the same step.

        When the index was exactly one generation behind, this write is the only
        change in between and the index is now current; otherwise another process
        wrote too and the next sync reconciles.
        """
        async with self.lock:
            if result.superseded:
                await self.index.remove(np.asarray(result.superseded, dtype=np.int64))
            created = result.action in (WriteAction.CREATED, WriteAction.SUPERSEDED)
            if created and vector is not None:
                await self.index.add(
                    np.asarray([result.memory.id], dtype=np.int64), vector.reshape(1, -1)
                )
            if (
                result.action is not WriteAction.QUARANTINED
                and self.index.generation == result.generation - 1
            ):
                self.index.generation = result.generation
                self._advance_allowed(result)

    def _advance_allowed(self, result: WriteResult) -> None:
        """Carry cached allowed sets over our own write instead of re-querying.

        Only valid because the caller checked that this write is the one change
        since the cached generation.
        """
        memory = result.memory
        for scopes, cached in list(self._allowed.items()):
            if cached.generation != result.generation - 1:
                continue
            ids, valid_until = cached.ids, cached.valid_until
            if memory.scope in scopes and memory.user == self.user:
                # ids stay sorted; set operations through np.unique would cost ~40 ms at 100k.
                if result.superseded:
                    ids = ids[~np.isin(ids, result.superseded)]
                at = int(np.searchsorted(ids, memory.id))
                if at == len(ids) or ids[at] != memory.id:
                    ids = np.insert(ids, at, memory.id)
                if memory.expires_at is not None:
                    valid_until = (
                        memory.expires_at
                        if valid_until is None
                        else min(valid_until, memory.expires_at)
                    )
            self._allowed[scopes] = AllowedIds(ids.astype(np.int64), result.generation, valid_until)

    async def remove(self, ids: Collection[int]) -> None:
        """Drop rows that left the active set (forgotten, expired); sync settles the generation."""
        async with self.lock:
            await self.index.remove(np.fromiter(ids, dtype=np.int64))

    async def sync(self) -> None:
        """Bring the index in step with the store when the generation moved; call
        with ``lock`` held.

        Reads the generation before the ids: a change racing this sync bumps the
        generation again, so the next call reconciles once more (it is idempotent).
        """
        generation = await self.store.generation()
        if generation == self.index.generation:
            return
        if self.index.needs_rebuild():
            await self.rebuild()
            return
        wanted = await self.store.vector_ids(self.embedder.id)
        have = self.index.ids()
        stale = np.setdiff1d(have, wanted, assume_unique=True)
        missing = np.setdiff1d(wanted, have, assume_unique=True)
        await self.index.remove(stale)
        if len(missing):
            ids, vectors = await self.store.vectors(self.embedder.id, missing.tolist())
            await self.index.add(ids, vectors)
        self.index.generation = generation

    async def allowed(self, project: str) -> AllowedIds:
        """The hard filters' answer, cached until the generation moves or a row expires."""
        scopes = (GLOBAL_SCOPE, project)
        cached = self._allowed.get(scopes)
        now = self.clock()
        if (
            cached is not None
            and cached.generation == self.index.generation
            and (cached.valid_until is None or now < cached.valid_until)
        ):
            return cached
        fresh = await self.store.allowed_ids(user=self.user, scopes=scopes, now=now)
        self._allowed[scopes] = fresh
        return fresh

    # recall --------------------------------------------------------------------------
    async def record(self, chosen: Sequence[Memory], *, now: float | None = None) -> None:
        """Count one chat-turn recall that returned `chosen` (hit rate, staleness)."""
        now = self.clock() if now is None else now
        ages = [now - m.created_at for m in chosen]
        await self.store.record_recall(
            [m.id for m in chosen],
            now=now,
            metrics={
                "recalls": 1.0,
                "recall_hits": 1.0 if chosen else 0.0,
                "recalled_memories": float(len(chosen)),
                "recalled_age_sum": float(sum(ages)),
            },
        )

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
        started = time.perf_counter()
        k = k or self.top_k
        threshold = self.threshold if min_score is None else (None if min_score < 0 else min_score)
        async with self.lock:
            await self.sync()
        allowed = await self.allowed(project)
        ids = allowed.ids
        if exclude:
            ids = np.setdiff1d(ids, np.fromiter(exclude, dtype=np.int64), assume_unique=True)
        hits = []
        if len(ids) and query.strip():
            vector = (await self.embedder.embed([query]))[0]
            hits = await self.index.search(vector, CANDIDATE_FACTOR * k, ids)
        if threshold is not None:
            hits = [h for h in hits if h.score >= threshold]
        now = self.clock()
        # Re-checked on the rows themselves: another process may have superseded or
        # deleted one between the filter query and this fetch.
        memories = {
            m.id: m
            for m in await self.store.fetch([h.id for h in hits])
            if m.status is Status.ACTIVE
            and m.user == self.user
            and m.scope in (GLOBAL_SCOPE, project)
            and (m.expires_at is None or m.expires_at > now)
        }
        ranked = sorted(
            (
                (
                    h.score + _LEXICAL_WEIGHT * lexical_overlap(query, memories[h.id]),
                    h.score,
                    memories[h.id],
                )
                for h in hits
                if h.id in memories
            ),
            key=lambda t: (-t[0], t[2].id),
        )[:k]
        chosen = [m for _, _, m in ranked]
        if record:
            await self.record(chosen, now=now)
        return RecallResult(
            block=render_block(chosen, now),
            ids=[m.id for m in chosen],
            memories=chosen,
            scores=[round(s, 4) for s, _, _ in ranked],
            vector_scores=[round(v, 4) for _, v, _ in ranked],
            latency_ms=(time.perf_counter() - started) * 1000,
        )
