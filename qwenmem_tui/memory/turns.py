"""A dialogue turn's second vector: the turn alone, beside the row's own.

A turn's own vector embeds it after the turn before it, as said (``model.embed_text``):
a reply is found by what it answers. A statement is found by its own words, which that
vector dilutes. So a store that keeps them (``MemoryStore.keeps_turn_vectors``) holds a
second vector per dialogue turn, in a second local index, and the dense channel ranks
each candidate by the mean of its two ranking scores (what a debiased search orders
by, each index centred on its own mean); a row without a second vector (a note, a
fact) counts its own twice, so it is neither helped nor hurt. Its score (the cosine
the threshold reads) is the better of the two. On LoCoMo (``bench/bench_locomo.py``,
tuning half: conversations 26, 30, 41, 42, 43) evidence R@5 0.675 -> 0.699, R@10
0.780 -> 0.803, MRR 0.497 -> 0.530; the two as separate dense lists fused, 0.686.
The SQLite store keeps them (migration 12); PostgreSQL does not yet, and ranks a turn
by its own vector alone.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from qwenmem_tui.memory.dense import SearchHit
from qwenmem_tui.memory.embed import Embedder
from qwenmem_tui.memory.index import VectorIndex
from qwenmem_tui.memory.model import Memory
from qwenmem_tui.memory.store import MemoryStore
from qwenmem_tui.llm.errors import LLMError

log = logging.getLogger("qwenmem.memory")

SUFFIX = "#turn-alone"
"""Names the second index beside the embedder's own (``<embedder>#turn-alone.faiss``)."""


def alone_text(memory: Memory) -> str:
    """What a turn's second vector embeds: the row alone, as any memory that is not a
    turn is embedded (behind its category and key). On LoCoMo's tuning half this gave
    R@5 0.693 / R@10 0.811 against 0.682 / 0.792 for its words alone, as said."""
    return memory.embed_text()


class TurnVectors:
    """The second vectors of one user's dialogue turns: their store rows and their index."""

    def __init__(self, store: MemoryStore, embedder: Embedder, index: VectorIndex, *, user: str) -> None:
        self.store = store
        self.embedder = embedder
        self.index = index
        self.user = user

    @classmethod
    def beside(cls, store: MemoryStore, embedder: Embedder, main: VectorIndex, *, user: str) -> TurnVectors:
        return cls(store, embedder, VectorIndex(main.directory, embedder.id + SUFFIX), user=user)

    async def load(self) -> None:
        """The saved index, or one built from the store."""
        if not await self.index.load():
            await self.rebuild(await self.store.generation())

    async def rebuild(self, generation: int) -> None:
        ids, vectors = await self.store.turn_vectors(self.embedder.id, user=self.user)
        await self.index.rebuild(ids, vectors, generation)

    async def sync(self, generation: int) -> None:
        """In step with the store at ``generation`` (rows gone, vectors another process added)."""
        if generation == self.index.generation:
            return
        wanted = await self.store.turn_vector_ids(self.embedder.id, user=self.user)
        have = self.index.ids()
        await self.index.remove(np.setdiff1d(have, wanted, assume_unique=True))
        missing = np.setdiff1d(wanted, have, assume_unique=True)
        if len(missing):
            ids, vectors = await self.store.turn_vectors(self.embedder.id, missing.tolist(), user=self.user)
            await self.index.add(ids, vectors)
        self.index.generation = generation

    async def missing(self) -> list[Memory]:
        return await self.store.missing_turn_vectors(self.embedder.id, user=self.user)

    async def embed(self, rows: Sequence[Memory]) -> bool:
        """Embed and keep these turns' second vectors; a failed embedding (False) leaves
        them to the next start (``missing``): the turn is still found by its own vector."""
        if not rows:
            return True
        try:
            vectors = await self.embedder.embed_passages([alone_text(m) for m in rows])
        except LLMError as exc:
            log.warning("[MEMORY] a turn's second vector was not embedded (%d turns): %s", len(rows), exc)
            return False
        ids = [m.id for m in rows]
        await self.store.set_turn_vectors(ids, vectors, self.embedder.id)
        await self.index.add(np.asarray(ids, dtype=np.int64), np.asarray(vectors, dtype=np.float32))
        return True

    async def merged(
        self,
        query: np.ndarray,
        main: VectorIndex,
        hits: Sequence[SearchHit],
        k: int,
        allowed: np.ndarray,
        *,
        debias: bool,
        remove: np.ndarray | None,
    ) -> list[SearchHit]:
        """The dense channel's top ``k`` over both indexes: the candidates of either,
        ranked by the mean of their two ranking scores, each with the better cosine."""
        if not len(self.index):
            return list(hits)
        own = await self.index.search(query, k, allowed, debias=debias, remove=remove)
        ids = sorted({h.id for h in hits} | {h.id for h in own})
        first = await main.ranked(query, ids, debias=debias, remove=remove)
        second = await self.index.ranked(query, ids, debias=debias, remove=remove)
        scored: list[tuple[float, int, float]] = []
        for i in ids:
            a = first.get(i) or second.get(i)
            b = second.get(i) or a
            if a is not None and b is not None:
                scored.append((-(a[0] + b[0]) / 2, i, max(a[1], b[1])))
        return [SearchHit(i, cosine) for _, i, cosine in sorted(scored)[:k]]

    async def remove(self, ids: np.ndarray) -> None:
        await self.index.remove(ids)

    async def save(self) -> None:
        await self.index.save()
