"""A batch's identity lookups made in bulk (a bulk import): the same candidates each
line's own lookup finds, for a fraction of its cost.

Each line of an import looks up what it may restate against everything before it,
the batch's earlier lines included (``Recaller.candidates``: the dense channel's
FAISS search, the lexical channel's SQL, the rows' fetch). A line at a time, that
was most of an import's cost beyond the embedder. Here a batch's lookups in one
scope share one snapshot of the store, read once when the scope's first line asks:

- dense: one FAISS search for all the batch's vectors (a matrix of queries), wide
  enough for the rows the batch removes; each line re-scores those hits, plus the
  rows the batch added since, with the index's mean as it is then;
- lexical: each word's newest matches read once for the batch (one SQL round), and
  which of the batch's own lines each word matches from a scratch full-text table
  with the store's own tokenizer; each line merges the two, newest first, and ranks
  them with the same BM25 code;
- rows: fetched once and kept until the batch writes them again.

Decisions stay exactly what they are line by line: wherever the snapshot cannot
prove it holds a line's answer (a word whose newest matches the batch removed, a
search whose boundary the moving mean could cross, a row whose text the identity
rewrote, another process's change), that line looks up one at a time, as before.
The snapshot is the store's state at its read plus this batch's own writes: it is
for one writer importing (another process writing meanwhile is noticed by the
generation and falls back).
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from qwenmem_tui.memory.dense import DEBIAS_WIDTH, SearchHit, debiased
from qwenmem_tui.memory.index import VectorIndex, in_sorted
from qwenmem_tui.memory.lexical import query_terms, rank_newest
from qwenmem_tui.memory.model import Memory, Status, WriteAction, WriteResult
from qwenmem_tui.memory.store import NewestMatches, lexical_cap

if TYPE_CHECKING:
    from qwenmem_tui.memory.recall import Candidate, Recaller

log = logging.getLogger("qwenmem.memory")

SLACK = 32
"""Hits (and each word's matches) read beyond what a line needs, for the rows the
batch itself removes before that line asks."""
MARGIN = 1e-4
"""Scores this close at a boundary are a tie FAISS's and numpy's rounding may break
differently: the line looks up alone."""


@dataclass(frozen=True)
class BatchLine:
    """One line of a batch as its lookup will ask: its scope, the text the lookup
    ranks by (``embed_text`` of its category, key and value), the key and value it
    is stored under when created, and its passage vector."""

    scope: str
    text: str
    key: str
    value: str
    vector: np.ndarray | None


@dataclass
class _Scope:
    """One scope's snapshot: what the store held when its first line asked."""

    allowed: np.ndarray  # sorted ids passing the hard filters then
    valid_until: float | None  # the first of them to expire
    mean: np.ndarray | None
    dense: dict[str, tuple[np.ndarray, np.ndarray, float, bool]]  # text -> vector, ids, last score, complete
    newest: NewestMatches
    caps: dict[str, int]  # words -> matches read for each
    texts: list[tuple[str, str]]  # the batch's (key, value) of this scope
    matches: dict[str, set[int]]  # word -> indexes into ``texts`` it matches
    added: dict[int, tuple[str, str]] = field(default_factory=dict)  # rows written since
    # Each word's rows among ``added`` (oldest first), and whether a row was stored
    # under words the batch's own lines do not hold (identity rewrote its key).
    by_term: dict[str, list[tuple[int, str, str]]] = field(default_factory=dict)
    unmatched: bool = False

    def add(self, memory: Memory) -> None:
        """A row this batch wrote in the scope, active: on both channels' sides."""
        kv = (memory.key, memory.value)
        self.added[memory.id] = kv
        try:
            at = self.texts.index(kv)
        except ValueError:
            self.unmatched = True
            return
        for term, held in self.matches.items():
            if at in held:
                bisect.insort(self.by_term.setdefault(term, []), (memory.id, *kv))  # by id


class BatchLookup:
    """The identity lookups of one batch of prepared writes, in order."""

    def __init__(self, recaller: Recaller, index: VectorIndex, lines: Sequence[BatchLine]) -> None:
        """``index``: the recaller's own, a local one (a store searching its own vectors
        looks up one line at a time)."""
        self.recaller = recaller
        self.index = index
        self.lines = list(lines)
        self._scopes: dict[str, _Scope | None] = {}
        self._rows: dict[int, Memory] = {}
        self._gone: set[int] = set()  # rows the batch superseded
        self._generation: int | None = None
        self._top = 0
        self.broken = False
        # Lookups answered from the snapshot, and those made alone, by why.
        self.served = 0
        self.alone: dict[str, int] = {}

    # what the batch writes -----------------------------------------------------------
    def wrote(self, result: WriteResult) -> None:
        """A write of this batch committed: its rows are read again when asked, a new
        active row joins its scope's lexical side (by its text as stored)."""
        memory = result.memory
        for memory_id in result.superseded:
            self._rows.pop(memory_id, None)
        self._rows[memory.id] = memory  # the row as the store read it back in the write
        self._gone.update(result.superseded)
        self._top = max(self._top, memory.id)
        if result.action is not WriteAction.QUARANTINED:
            self._generation = result.generation
        scope = self._scopes.get(memory.scope)
        new = result.action in (WriteAction.CREATED, WriteAction.SUPERSEDED)
        if scope is not None and new and memory.status is Status.ACTIVE:
            scope.add(memory)
            if memory.expires_at is not None:  # the lexical side holds it until then
                until = scope.valid_until
                scope.valid_until = memory.expires_at if until is None else min(until, memory.expires_at)

    # the lookup ----------------------------------------------------------------------
    async def candidates(
        self, text: str, *, scope: str, limit: int, vector: np.ndarray | None
    ) -> list[Candidate] | None:
        """``Recaller.candidates(text, scopes=(scope,), limit=limit, vector=vector)``
        from the snapshot; None when the snapshot cannot prove the answer (the caller
        then looks up alone)."""
        recaller = self.recaller
        if self.broken or vector is None or not text.strip():
            return self._alone("given up" if self.broken else "no vector")
        if self._generation is not None and self.index.generation != self._generation:
            self.broken = True  # another process wrote: the snapshot no longer holds
            return self._alone("store moved")
        snap = await self._snapshot(scope, limit)
        if snap is None:
            return self._alone("no snapshot")
        allowed = (await recaller.allowed_in((scope,))).ids
        now = recaller.clock()
        if snap.valid_until is not None and now >= snap.valid_until:
            return self._alone("a row expired")  # the newest matches read hold it
        if not len(allowed):
            self.served += 1
            return []
        terms = query_terms(text)
        if self.index.approximate:
            # An approximate index's lists make a wider search no superset of the
            # line's own: the line searches alone, its words and rows still in bulk.
            dense: list[SearchHit] | None = (await recaller.dense(text, allowed, limit, vector, None))[1]
        else:
            dense = self._dense(snap, text, vector, allowed, limit)
        if dense is None:
            return self._alone("dense")
        lexical = self._lexical(snap, terms, limit)
        if lexical is None:
            return self._alone("lexical")
        self.served += 1
        return await recaller.assemble(
            terms, vector if recaller.dense_enabled else None, dense, lexical,
            scopes=(scope,), now=now, fetch=self._fetch,
        )  # fmt: skip

    def _alone(self, why: str) -> list[Candidate] | None:
        self.alone[why] = self.alone.get(why, 0) + 1
        log.debug("[MEMORY_IDENTITY] batch lookup made alone: %s", why)
        return None

    async def _snapshot(self, scope: str, limit: int) -> _Scope | None:
        if scope in self._scopes:
            return self._scopes[scope]
        self._scopes[scope] = None
        recaller, index = self.recaller, self.index
        store = recaller.store
        mine = [line for line in self.lines if line.scope == scope]
        if not recaller.dense_enabled or not recaller.debias:
            return None
        async with recaller.lock:
            await recaller.sync()
        self._generation = index.generation
        filtered = await recaller.allowed_in((scope,))
        allowed = filtered.ids
        caps: dict[str, int] = {}
        for line in mine:
            terms = query_terms(line.text)
            for term in terms:
                caps[term] = max(caps.get(term, 0), lexical_cap(len(terms), limit) + SLACK)
        newest = await store.newest_matches(
            caps, user=recaller.user, scope=scope, now=recaller.clock()
        )
        texts = list(dict.fromkeys((line.key, line.value) for line in mine))
        matches = await store.text_matches(texts, list(caps))
        if newest is None or matches is None:
            return None
        self._top = max(self._top, newest.top)
        # An approximate index: each line searches its lists itself (``candidates``).
        queries = {
            line.text: line.vector for line in mine if line.vector is not None and not index.approximate
        }
        mean = index.mean()
        nothing = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32))
        found: list[tuple[np.ndarray, np.ndarray]] | None = [nothing] * len(queries)  # an empty index
        if mean is not None and queries:
            found = await index.search_many(
                np.stack([v - mean for v in queries.values()]) if queries else np.zeros((0, 1)),
                limit * DEBIAS_WIDTH + SLACK,
                allowed,
            )
        if found is None:
            return None
        held = int(index.holds(allowed).sum())  # every one of them reached: complete
        dense = {
            text: (vector, np.sort(ids), float(scores[-1]) if len(ids) else 0.0, len(ids) >= held)
            for (text, vector), (ids, scores) in zip(queries.items(), found, strict=True)
        }
        snap = _Scope(allowed, filtered.valid_until, mean, dense, newest, caps, texts, matches)
        self._scopes[scope] = snap
        return snap

    def _dense(
        self, snap: _Scope, text: str, vector: np.ndarray, allowed: np.ndarray, limit: int
    ) -> list[SearchHit] | None:
        """``VectorIndex.search(vector, limit, allowed, debias=True)`` from the snapshot's
        hits and the rows added since, or None when they cannot prove it."""
        index = self.index
        got = snap.dense.get(text)
        if got is None or not np.array_equal(got[0], vector):
            return None
        _, hits, last, complete = got
        mean = index.mean()
        if mean is None:
            return None
        known = np.union1d(hits, np.fromiter(snap.added, dtype=np.int64, count=len(snap.added)))
        known = known[in_sorted(known, allowed)]
        known = known[index.holds(known)]
        wide = min(limit * DEBIAS_WIDTH, len(allowed))
        if complete:  # every row of the scope is known: it holds them all
            held = int(index.holds(allowed).sum())
            if len(known) != held:
                return None  # a row of the scope the batch cannot account for
            wide = min(wide, held)
        elif len(known) < wide:
            return None  # the batch removed more than the snapshot read beyond
        vectors = index.vectors_of(known)
        scores = vectors @ (vector - mean) if len(known) else np.zeros(0, dtype=np.float32)
        order = np.argsort(-scores, kind="stable")
        ranked = scores[order]
        edge = float(ranked[wide - 1]) if wide else 0.0
        if not complete:
            # A row the snapshot's search did not reach scores at most its last hit
            # there, moved by how far the mean moved since (unit vectors): below the
            # edge, or the line looks up alone.
            assert snap.mean is not None  # an empty index's search is complete
            if last + float(np.linalg.norm(mean - snap.mean)) * 1.001 >= edge - MARGIN:
                return None
        # FAISS takes the ``wide`` best by its own rounding: rows this close to the
        # edge may be in or out. The answer holds when the rerank over all of them
        # picks none of those.
        maybe = int(np.count_nonzero(ranked > edge - MARGIN))
        if maybe <= wide:
            chosen = order[:wide]
            return debiased(vector, mean, [int(i) for i in known[chosen]], vectors[chosen], limit)
        pool = order[:maybe]
        sure = {int(i) for i in known[order[: int(np.count_nonzero(ranked >= edge + MARGIN))]]}
        top = debiased(vector, mean, [int(i) for i in known[pool]], vectors[pool], limit)
        return top if all(hit.id in sure for hit in top) else None

    def _lexical(
        self, snap: _Scope, terms: Sequence[str], limit: int
    ) -> list[tuple[int, float]] | None:
        """``lexical_search(terms, scopes=(scope,), limit=limit)`` from the snapshot's
        newest matches and the rows added since, or None when they cannot prove it."""
        if not terms:
            return []
        if snap.unmatched:
            return None  # a row stored under words the batch did not match
        cap = lexical_cap(len(terms), limit)
        matches: dict[str, list[tuple[int, str, str]]] = {}
        gone = self._gone
        for term in terms:
            if term not in snap.caps:
                return None
            rows = [r for r in reversed(snap.by_term.get(term, ())) if r[0] not in gone]
            read = snap.newest.rows.get(term, [])
            kept = [r for r in read if r[0] not in gone]
            if len(rows) + len(kept) < cap and len(read) >= snap.caps[term]:
                return None  # the batch removed some of the newest the snapshot read
            matches[term] = (rows + kept)[:cap]
        return rank_newest(matches, cap=cap, top=self._top, limit=limit)

    async def _fetch(self, ids: list[int]) -> list[Memory]:
        missing = [i for i in ids if i not in self._rows]
        if missing:
            for memory in await self.recaller.store.fetch(missing):
                self._rows[memory.id] = memory
        return [self._rows[i] for i in ids if i in self._rows]

