"""The dense channel answered by the store, for a store that searches its own vectors.

A team's PostgreSQL with pgvector holds every vector already; a local FAISS copy of
what one client may see would cost that client a download at its first start, a
diff at every change anyone makes, and memory for as long as it runs. ``StoreIndex``
stands where ``VectorIndex`` would: it keeps nothing but the store generation it has
seen and the mean vector recall debiases with, and asks the store for each search
with the hard filters in the same query (``MemoryStore.nearest_vectors``). The
ranking is the local index's own (``dense.debiased``), so both give the same top k.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

import numpy as np

from qwenmem_tui.memory.dense import DEBIAS_WIDTH, SearchHit, best_scores, debiased, ranking_query
from qwenmem_tui.memory.store import ChannelQuery, MemoryStore, StoreChannels

# How long a mean vector serves after the store changed, and for how many of this
# process's own changes (a share of the vectors it was taken over). Over thousands of
# memories one write moves it by a thousandth. The generation counts every user's
# changes: in a team's store it moves with each of twenty people's writes, and
# re-reading the mean on that (an aggregate over all of this user's vectors, ~300 ms
# with twenty clients busy) was part of one recall in twenty. Own changes are those
# this process applied (``add``/``remove``); this user's other processes and every
# other user reach the mean within ``MEAN_REFRESH_S``. A small store reads it each
# time the generation moves.
MEAN_REFRESH_S = 60.0
MEAN_REFRESH_SHARE = 0.01
# The rows of this many times k dense candidates, the store's best by the centred
# cosine, come with the search (``channels``); the exact rerank here may pick one it
# did not send (a near tie at the edge), which recall then reads.
ROWS_WITH_SEARCH = 1


class StoreIndex:
    """``VectorIndex``'s place in recall, answered by the store (see the module doc)."""

    kind = "store"

    def __init__(
        self,
        store: MemoryStore,
        directory: Path,
        embedder_id: str,
        *,
        user: str,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.directory = directory  # what sits beside an index (the meaning reader's files)
        self.embedder_id = embedder_id
        self.user = user
        self.generation = -1
        self._monotonic = monotonic
        self._mean: np.ndarray | None = None
        # (generation, monotonic time, vectors averaged) when the mean was read
        self._mean_seen: tuple[int, float, int] | None = None
        self._own_changes = 0  # rows this process added or removed since then

    # What recall's freshness steps call on an index; the store is always current.
    loaded = True

    async def load(self) -> bool:
        return True

    async def save(self) -> None:
        return None

    def needs_rebuild(self) -> bool:
        return False

    async def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        self._own_changes += len(ids)  # the store wrote the vector with the row

    async def remove(self, ids: np.ndarray) -> None:
        self._own_changes += len(ids)

    def ids(self) -> np.ndarray:
        return np.zeros(0, dtype=np.int64)  # nothing held here

    def __len__(self) -> int:
        return 0

    # search --------------------------------------------------------------------------
    async def mean(self, dim: int) -> np.ndarray | None:
        """The mean of this user's vectors, read again once the store changed and
        either ``MEAN_REFRESH_S`` passed or this process changed more than a
        ``MEAN_REFRESH_SHARE`` of the vectors it averaged (see the constants)."""
        now = self._monotonic()
        seen = self._mean_seen
        if seen is not None:
            generation, at, count = seen
            share = count * MEAN_REFRESH_SHARE
            if self.generation == generation or (
                share >= 1 and now - at < MEAN_REFRESH_S and self._own_changes < share
            ):
                return self._mean
        self._mean, count = await self.store.vector_mean(self.embedder_id, user=self.user, dim=dim)
        self._mean_seen = (self.generation, now, count)
        self._own_changes = 0
        return self._mean

    async def search_where(
        self,
        query: np.ndarray,
        k: int,
        *,
        scopes: Collection[str],
        now: float,
        exclude: Collection[int],
        debias: bool,
        remove: np.ndarray | None = None,
    ) -> list[SearchHit]:
        """Top ``k`` of this user's rows in ``scopes`` passing the hard filters,
        ranked as ``VectorIndex.search`` ranks (scores: plain cosines). The stored
        vectors stay plain: the store is asked with the centred query without the
        ``remove`` directions (the language subspace), which orders them as the
        projected cosine does up to its norm, and the exact cosine reorders the few
        times ``k`` it returns (``dense.debiased``)."""
        if k <= 0:
            return []
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        centre = await self._centre(q, debias, remove)
        ids, vectors = await self.store.nearest_vectors(
            q if centre is None else ranking_query(q, centre, remove),
            embedding_model=self.embedder_id,
            user=self.user,
            scopes=scopes,
            now=now,
            exclude=exclude,
            limit=k if centre is None else k * DEBIAS_WIDTH,
        )
        return _ranked(q, centre, ids, vectors, k, remove)

    async def _centre(
        self, q: np.ndarray, debias: bool, remove: np.ndarray | None
    ) -> np.ndarray | None:
        """What the query is centred on: the store's mean when debiased, the origin
        when only directions are removed, else nothing."""
        centre = await self.mean(len(q)) if debias else None
        if centre is None and remove is not None:
            centre = np.zeros_like(q)
        return centre

    async def channels(
        self,
        query: np.ndarray,
        terms: Sequence[str],
        k: int,
        *,
        scopes: Collection[str],
        now: float,
        exclude: Collection[int],
        debias: bool,
        lexical_limit: int,
        links: bool = False,
        remove: np.ndarray | None = None,
    ) -> tuple[list[SearchHit], StoreChannels]:
        """``search_where``'s top ``k`` and the lexical channel's hits from one query
        of the store, with the rows of both (``MemoryStore.search_channels``), and
        the user's links when ``links``; ``remove``: the directions the ranking
        leaves out (``dense.debiased``), the store's pick of rows too."""
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        centre = await self._centre(q, debias, remove)
        found = await self.store.search_channels(ChannelQuery(
            q if centre is None else ranking_query(q, centre, remove), terms, self.embedder_id, self.user, scopes, now,
            exclude, dense_limit=k if centre is None else k * DEBIAS_WIDTH,
            lexical_limit=lexical_limit, centre=centre, rows_for=k * ROWS_WITH_SEARCH, links=links,
            remove=remove,
        ))  # fmt: skip
        return _ranked(q, centre, found.dense_ids, found.dense_vectors, k, remove), found

    async def scores(self, query: np.ndarray, ids: Sequence[int]) -> dict[int, float]:
        """Score of ``query`` (``dense.scoring_query``: the cosine, or the best of two)
        with each of ``ids`` that is active with a vector."""
        if not ids:
            return {}
        found, vectors = await self.store.vectors(self.embedder_id, list(ids), user=self.user)
        if not len(found):
            return {}
        return {int(i): float(c) for i, c in zip(found, best_scores(vectors, query), strict=True)}


def _ranked(
    query: np.ndarray,
    centre: np.ndarray | None,
    ids: np.ndarray,
    vectors: np.ndarray,
    k: int,
    remove: np.ndarray | None = None,
) -> list[SearchHit]:
    """The store's candidates ranked as ``VectorIndex.search`` ranks (plain cosines)."""
    if centre is not None:
        return debiased(query, centre, ids.tolist(), vectors, k, remove)
    cosines = vectors @ query if len(ids) else np.zeros(0, dtype=np.float32)
    return [SearchHit(int(i), float(c)) for i, c in zip(ids, cosines, strict=True)][:k]
