"""The local FAISS index: a cache of the store's vectors, never the source of truth.

Inner product (vectors are L2-normalised, so it is cosine), keyed by memory id. Flat
(``IndexIDMap2`` over ``IndexFlatIP``: exact, float32) while small; from
``approximate_threshold`` on, inverted lists of float16 codes (``IVF…,SQfp16``: half
the memory, and a search scans the few lists nearest the query instead of every
vector). An approximate search only proposes: recall re-scores its candidates with
the store's exact vectors (``search(exact=...)``), and an allowed set small enough is
scored exactly outright. Both kinds delete for real (the IVF through a hash direct
map), and every search runs behind an IDSelector built from the store's hard filters.

On disk: ``<index_dir>/<embedder>.faiss``: a JSON header (embedder, dimension, kind,
count, the store generation it reflects, the sum of its vectors), the ids, then the
FAISS index, read and written in pieces (never a second copy of the whole file).

The sum of the live vectors (kept on every add and removal, saved in the header) gives
the store's mean, so recall can rank by ``p·(q − mean)``: a small multilingual embedder
puts every sentence of one language in a shared direction, and the store's mean is
dominated by those directions; removing it from the query stops a question from
preferring any memory written in its own language (``search(debias=True)``).
FAISS calls run in a thread: they release the GIL and can take a while.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import BinaryIO

import faiss
import numpy as np

from qwenmem_tui.llm.wire import JSONObject
from qwenmem_tui.memory.dense import (
    DEBIAS_WIDTH,
    SearchHit,
    best_scores,
    debiased,
    ranking_query,
    ranking_scores,
    scoring_query,
)
from qwenmem_tui.paths import private_dir, private_file

log = logging.getLogger("qwenmem.memory")

Progress = Callable[[int, int], None]  # (done, total)
ExactVectors = Callable[[Sequence[int]], Awaitable[tuple[np.ndarray, np.ndarray]]]
"""(ids, float32 vectors) of some ids, from the store: an approximate search's re-scoring."""
Batches = AsyncIterator[tuple[np.ndarray, np.ndarray]]

FLAT = "flat"
IVF = "ivf"
APPROXIMATE_THRESHOLD = 50_000
"""From this many vectors the index is approximate (IVF, float16): 77 MB at 50k."""
_BATCH = 4096
_MAGIC = b"QWENMEM-FAISS-2\n"
# Lists an approximate search scans (more when the filters allow a small share).
_NPROBE = 16
# An allowed set this small is scored exactly even in the approximate index.
_EXACT_BELOW = 8_000
_INLINE_ADD = 16
_FLUSH_AT = 256
"""Removed vectors left in FAISS before they are taken out at once (or 5 % of the
index, whichever is more)."""
"""Vectors added on the event loop itself: a write's one vector costs FAISS
microseconds, and a hop to a worker thread and back cost an import's line ~0.1 ms."""
# Training points per list (FAISS asks for 39 at least), k-means iterations, and how
# far the index may grow past what it was trained for before a rebuild.
_TRAIN_PER_LIST = 40
_TRAIN_ITERATIONS = 10
_REGROW = 4

# One query is too small to split across threads: OpenMP's fork/join made p99 four
# times worse than single-threaded search on 2 cores. The setting is per OS thread,
# and FAISS runs in a worker pool thread, so each call sets what it needs.
_THREADS = faiss.omp_get_max_threads()


def lists_for(count: int) -> int:
    """Inverted lists of an approximate index over ``count`` vectors."""
    return max(1, int(math.sqrt(count)))


def training_size(count: int) -> int:
    """How many vectors train an approximate index over ``count`` (a sample)."""
    return min(count, _TRAIN_PER_LIST * lists_for(count))


def _search_one(
    index: faiss.Index, query: np.ndarray, k: int, params: faiss.SearchParameters
) -> tuple[np.ndarray, np.ndarray]:
    faiss.omp_set_num_threads(1)
    distances, ids = index.search(query, k, params=params)
    return distances, ids


def _add_batch(index: faiss.Index, vectors: np.ndarray, ids: np.ndarray) -> None:
    faiss.omp_set_num_threads(_THREADS)
    index.add_with_ids(np.ascontiguousarray(vectors, dtype=np.float32), ids)


def in_sorted(values: np.ndarray, within: np.ndarray) -> np.ndarray:
    """Which of ``values`` the sorted ``within`` holds (a mask). By binary search:
    numpy's set operations sort (and unique) both sides, ~200 ms at 100k ids."""
    at = np.searchsorted(within, values)
    inside = at < len(within)
    inside[inside] = within[at[inside]] == values[inside]
    return inside


def _bitmap_selector(allowed: np.ndarray) -> tuple[faiss.IDSelector, np.ndarray]:
    """An IDSelectorBitmap over memory ids; the bitmap must outlive the search. Its
    size is in bytes (FAISS: an id is selected iff id / 8 < n and its bit is set): a
    size in bits let FAISS read past the bitmap, and ids above the largest allowed
    one passed or not by whatever memory followed it."""
    bits = np.zeros(int(allowed.max()) + 1, dtype=bool)
    bits[allowed] = True
    packed = np.packbits(bits, bitorder="little")
    return faiss.IDSelectorBitmap(len(packed), faiss.swig_ptr(packed)), packed


def _trained(dim: int, count: int, sample: np.ndarray) -> faiss.Index:
    """An empty approximate index, its lists trained on ``sample``."""
    faiss.omp_set_num_threads(_THREADS)
    index = faiss.index_factory(dim, f"IVF{lists_for(count)},SQfp16", faiss.METRIC_INNER_PRODUCT)
    faiss.extract_index_ivf(index).cp.niter = _TRAIN_ITERATIONS
    index.train(np.ascontiguousarray(sample, dtype=np.float32))
    index.set_direct_map_type(faiss.DirectMap.Hashtable)  # reconstruct and remove by id
    return index


async def _in_batches(ids: np.ndarray, vectors: np.ndarray) -> Batches:
    for start in range(0, len(ids), _BATCH):
        yield ids[start : start + _BATCH], vectors[start : start + _BATCH]


class VectorIndex:
    """One embedder's index, with the generation of the store it reflects."""

    def __init__(
        self, directory: Path, embedder_id: str, *, approximate_threshold: int = APPROXIMATE_THRESHOLD
    ) -> None:
        self.directory = directory
        self.embedder_id = embedder_id
        self.approximate_threshold = approximate_threshold
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", embedder_id)
        self.path = directory / f"{safe}.faiss"
        self.generation = -1  # reflects no store state until built or loaded
        self.kind = FLAT
        self.dim = 0
        self._index: faiss.Index | None = None
        self._ids = np.zeros(0, dtype=np.int64)  # sorted: what the index holds
        self._trained_for = 0  # vectors the approximate index's lists were trained on
        self._sum: np.ndarray | None = None  # float64 sum of live vectors, for the mean
        # Removed from ``_ids`` and the sum, still in FAISS until the next flush: a flat
        # index's removal moves every vector after it (~2 ms at 20k), and a search
        # never reaches them (its selector holds active ids only).
        self._unflushed: list[int] = []
        self._lock = asyncio.Lock()

    # state -------------------------------------------------------------------------
    @property
    def loaded(self) -> bool:
        return self._index is not None

    @property
    def approximate(self) -> bool:
        """Searches propose candidates to re-score (``search(exact=...)``)."""
        return self.kind == IVF

    def ids(self) -> np.ndarray:
        """The ids the index holds, sorted."""
        return self._ids.copy()

    def __len__(self) -> int:
        return len(self._ids)

    def mean(self) -> np.ndarray | None:
        """Mean of the live vectors; None while the index is empty."""
        if self._sum is None or not len(self._ids):
            return None
        return (self._sum / len(self._ids)).astype(np.float32)

    # load / save -------------------------------------------------------------------
    async def load(self) -> bool:
        """Load the file if present, intact and built with this embedder."""
        try:
            loaded = await asyncio.to_thread(self._read)
        except FileNotFoundError:
            return False
        except Exception as exc:  # a corrupt (or older) cache is rebuilt, never fatal
            log.warning("[MEMORY_INDEX] unreadable index %s, rebuilding: %s", self.path, exc)
            return False
        if loaded is None:
            return False
        meta, ids, index = loaded
        self._index, self._ids = index, ids
        self.dim, self.kind = int(meta["dim"]), meta["kind"]
        self.generation = int(meta["generation"])
        self._trained_for = int(meta.get("trained_for", 0))
        self._sum = np.asarray(meta["sum"], dtype=np.float64) if meta.get("sum") else None
        return True

    def _read(self) -> tuple[JSONObject, np.ndarray, faiss.Index] | None:
        with self.path.open("rb") as f:
            if f.read(len(_MAGIC)) != _MAGIC:
                raise ValueError("not a qwenmem index file of this version")
            meta = json.loads(f.read(int.from_bytes(f.read(4), "little")))
            if meta.get("embedder") != self.embedder_id:
                log.info("[MEMORY_INDEX] index built with %s, need %s", meta.get("embedder"), self.embedder_id)
                return None
            if meta.get("kind") not in (FLAT, IVF):
                raise ValueError(f"an index of kind {meta.get('kind')!r}")
            count = int(meta["count"])
            ids = np.frombuffer(f.read(8 * count), dtype="<i8").astype(np.int64)
            index = faiss.read_index(faiss.PyCallbackIOReader(f.read))
        if index.ntotal != count or len(ids) != count or index.d != meta["dim"]:
            raise ValueError(f"index holds {index.ntotal}x{index.d}, header says {count}x{meta['dim']}")
        return meta, ids, index

    async def save(self) -> None:
        """One file, header, ids and index together, replaced atomically: two processes
        saving at once leave one complete file, never a header from one and vectors
        from the other."""
        if self._index is None:
            return
        private_dir(self.directory)
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        try:
            private_file(tmp)  # memories: 0600 whatever the umask
            async with self._lock:  # one state: the index, its ids and its sum
                await asyncio.to_thread(self._write, tmp)
            os.replace(tmp, self.path)
        except BaseException as exc:
            tmp.unlink(missing_ok=True)  # never a half-written (or 0-byte) file left behind
            if not isinstance(exc, OSError):
                raise
            # A full disk (or a read-only home) loses nothing: the index is a cache of the
            # database, the previous file stays whole, and a stale one is rebuilt at open.
            log.info("[MEMORY_INDEX] could not save %s (caught up from the database at the next open): %s", self.path, exc)

    def _write(self, path: Path) -> None:
        assert self._index is not None
        self._flush()  # the file holds exactly ``_ids``
        header = json.dumps({
            "embedder": self.embedder_id, "dim": self.dim, "kind": self.kind,
            "count": len(self._ids), "generation": self.generation,
            "trained_for": self._trained_for,
            "sum": None if self._sum is None else self._sum.tolist(),
        }).encode()  # fmt: skip
        with path.open("wb") as f:
            f.write(_MAGIC + len(header).to_bytes(4, "little") + header)
            f.write(self._ids.astype("<i8").tobytes())
            faiss.write_index(self._index, faiss.PyCallbackIOWriter(_writer(f)))

    # build / change ----------------------------------------------------------------
    async def rebuild(
        self,
        ids: np.ndarray,
        vectors: np.ndarray,
        generation: int,
        progress: Progress | None = None,
    ) -> None:
        """Replace the whole index with ``vectors``; reports progress per batch."""
        sample = None
        if len(ids) >= self.approximate_threshold:
            pick = np.random.default_rng(0).choice(len(ids), training_size(len(ids)), replace=False)
            sample = vectors[np.sort(pick)]
        await self.rebuild_from(
            _in_batches(ids, vectors), total=len(ids), sample=sample, generation=generation,
            progress=progress, dim=vectors.shape[1] if len(ids) else self.dim,
        )  # fmt: skip

    async def rebuild_from(
        self,
        batches: Batches,
        *,
        total: int,
        sample: np.ndarray | None,
        generation: int,
        dim: int,
        progress: Progress | None = None,
    ) -> None:
        """Replace the whole index with the vectors of ``batches`` (``total`` of them,
        read a batch at a time: a store of years never sits in memory twice);
        approximate when ``sample`` (a training sample) is given."""
        async with self._lock:
            index: faiss.Index | None = None
            kind = FLAT
            if sample is not None and len(sample):
                index = await asyncio.to_thread(_trained, dim, total, sample)
                kind = IVF
            elif dim:
                index = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))
            held: list[np.ndarray] = []
            added = np.zeros(dim, dtype=np.float64) if dim else None
            done = 0
            async for ids, vectors in batches:
                if index is None or not len(ids):
                    continue
                await asyncio.to_thread(_add_batch, index, vectors, ids)
                held.append(np.asarray(ids, dtype=np.int64))
                added = added + vectors.sum(axis=0, dtype=np.float64)
                done += len(ids)
                if progress is not None:
                    progress(done, total)
            if progress is not None and total == 0:
                progress(0, 0)
            self._index, self.kind, self.dim = index, kind, dim
            self._unflushed = []
            self._ids = np.sort(np.concatenate(held)) if held else np.zeros(0, dtype=np.int64)
            self._sum = added if done else None
            self._trained_for = total if kind == IVF else 0
            self.generation = generation

    async def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        if len(ids) == 0:
            return
        async with self._lock:
            if self._index is None or self.dim != vectors.shape[1]:
                self.dim = vectors.shape[1]
                self._index, self.kind = faiss.IndexIDMap2(faiss.IndexFlatIP(self.dim)), FLAT
                self._ids, self._sum, self._unflushed = np.zeros(0, dtype=np.int64), None, []
            # Idempotent: a sync woken by another process's change (LISTEN/NOTIFY) may
            # already have added a row between its commit and this write's own add.
            ids = np.asarray(ids, dtype=np.int64)
            fresh = ~in_sorted(ids, self._ids)
            ids, vectors = ids[fresh], vectors[fresh]
            if len(ids) == 0:
                return
            if self._unflushed and np.isin(ids, self._unflushed).any():
                await asyncio.to_thread(self._flush)  # back again (restored): its old vector goes first
            if len(ids) <= _INLINE_ADD:  # a write's own vector: microseconds, less than a hop
                self._index.add_with_ids(np.ascontiguousarray(vectors, dtype=np.float32), ids)
            else:
                await asyncio.to_thread(_add_batch, self._index, vectors, ids)
            # Inserted where they sort (new rows go last): one copy, not a sort of every
            # id at each write (~5 ms at 100k, paid by every line of an import).
            ids = np.unique(ids)
            self._ids = np.insert(self._ids, np.searchsorted(self._ids, ids), ids)
            added = vectors.sum(axis=0, dtype=np.float64)
            self._sum = added if self._sum is None else self._sum + added

    async def remove(self, ids: np.ndarray) -> None:
        if self._index is None or len(ids) == 0:
            return
        async with self._lock:
            wanted = np.unique(np.asarray(ids, dtype=np.int64))
            present = wanted[in_sorted(wanted, self._ids)]
            if not len(present):
                return
            gone = self._reconstruct(present)
            if self._sum is not None:
                self._sum = self._sum - gone.sum(axis=0, dtype=np.float64)
            self._ids = self._ids[~in_sorted(self._ids, present)]
            self._unflushed += present.tolist()
            if len(self._unflushed) >= max(_FLUSH_AT, len(self._ids) // 20):
                await asyncio.to_thread(self._flush)

    def _flush(self) -> None:
        """Remove the vectors of removed ids from FAISS itself (lock held)."""
        if self._index is not None and self._unflushed:
            self._index.remove_ids(np.asarray(self._unflushed, dtype=np.int64))
        self._unflushed = []

    def needs_rebuild(self) -> bool:
        """Grown past flat, or far past what the approximate index was trained for."""
        if self._index is None:
            return True
        if self.kind == FLAT:
            return len(self._ids) >= self.approximate_threshold
        return len(self._ids) > _REGROW * max(1, self._trained_for)

    # search ------------------------------------------------------------------------
    def _reconstruct(self, ids: np.ndarray) -> np.ndarray:
        """The stored vectors of ``ids`` (all held by the index), in their order."""
        assert self._index is not None
        if not len(ids):
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors: np.ndarray = self._index.reconstruct_batch(np.ascontiguousarray(ids, dtype=np.int64))
        return vectors

    async def scores(self, query: np.ndarray, ids: Sequence[int]) -> dict[int, float]:
        """Score of ``query`` (``dense.scoring_query``: the cosine, or the best of two)
        with each of ``ids`` that the index holds.
        Reconstructing a handful of vectors costs microseconds: no thread."""
        if self._index is None or not ids:
            return {}
        async with self._lock:  # FAISS is not safe against a concurrent add
            wanted = np.unique(np.asarray(ids, dtype=np.int64))
            held = wanted[in_sorted(wanted, self._ids)]
            cosines = best_scores(self._reconstruct(held), query)
        return {int(i): float(c) for i, c in zip(held, cosines, strict=True)}

    async def ranked(
        self, query: np.ndarray, ids: Sequence[int], *, debias: bool, remove: np.ndarray | None
    ) -> dict[int, tuple[float, float]]:
        """(ranking score, score) of each of ``ids`` the index holds: what ``search``
        orders by (``dense.ranking_scores``) and the cosine it returns."""
        if self._index is None or not ids:
            return {}
        async with self._lock:  # FAISS is not safe against a concurrent add
            wanted = np.unique(np.asarray(ids, dtype=np.int64))
            held = wanted[in_sorted(wanted, self._ids)]
            vectors = self._reconstruct(held)
            mean = self.mean() if debias else None
        ranking = ranking_scores(query, mean, vectors, remove)
        cosines = best_scores(vectors, scoring_query(query, remove))
        return {int(i): (float(r), float(c)) for i, r, c in zip(held, ranking, cosines, strict=True)}

    async def search(
        self,
        query: np.ndarray,
        k: int,
        allowed: np.ndarray,
        *,
        debias: bool = False,
        exact: ExactVectors | None = None,
        remove: np.ndarray | None = None,
    ) -> list[SearchHit]:
        """Top ``k`` among ``allowed`` ids only: the selector makes FAISS skip the rest.

        ``debias`` ranks by ``p·(q − mean)`` instead of ``p·q`` (see the module
        docstring), ``remove`` (orthonormal columns: the language subspace) by the
        cosine without those directions (``dense.debiased``); the scores returned are
        still the plain cosines ``p·q``, which recall's calibrated threshold is
        measured on. ``exact``: the store's vectors, with which an approximate
        index's candidates are re-scored.
        """
        if self._index is None or len(allowed) == 0 or k <= 0 or not len(self._ids):
            return []
        async with self._lock:  # the sum and the count of one state, not mid-add
            mean = self.mean() if debias else None
        if mean is None and remove is not None:
            mean = np.zeros_like(query, dtype=np.float32)
        q = query if mean is None else ranking_query(query, mean, remove)
        wide = k * DEBIAS_WIDTH if mean is not None or self.approximate else k
        async with self._lock:  # FAISS is not safe against a concurrent add
            found = await self._candidates(q, wide, allowed)
            ids = [h.id for h in found]
            vectors = self._reconstruct(np.asarray(ids, dtype=np.int64))
        if self.approximate and exact is not None and ids:
            got, vectors = await exact(ids)
            ids = [int(i) for i in got]
        if mean is not None:
            return debiased(query, mean, ids, vectors, k, remove)
        if wide == k and not self.approximate:
            return found
        cosines = vectors @ np.asarray(query, dtype=np.float32) if len(ids) else np.zeros(0)
        order = sorted(range(len(ids)), key=lambda j: (-cosines[j], ids[j]))[:k]
        return [SearchHit(ids[j], float(cosines[j])) for j in order]

    async def search_many(
        self, queries: np.ndarray, k: int, allowed: np.ndarray
    ) -> list[tuple[np.ndarray, np.ndarray]] | None:
        """FAISS's top ``k`` among ``allowed`` for each row of ``queries`` in one
        search (a batch of lookups): (ids, scores) each, best first, the scores FAISS's
        own. None for an approximate index: its lists make a wider search no superset
        of a narrower one."""
        if self._index is None or self.approximate:
            return None
        if not len(allowed) or not len(self._ids) or k <= 0:
            return [(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32))] * len(queries)
        selector, bitmap = _bitmap_selector(allowed)
        params = faiss.SearchParameters(sel=selector)
        q = np.ascontiguousarray(queries, dtype=np.float32)
        async with self._lock:
            scores, ids = await asyncio.to_thread(_search_one, self._index, q, min(k, len(allowed)), params)
        del bitmap  # only now may the selector's memory go
        return [(row_ids[row_ids >= 0], row_scores[row_ids >= 0]) for row_scores, row_ids in zip(scores, ids, strict=True)]

    def holds(self, ids: np.ndarray) -> np.ndarray:
        """Which of ``ids`` the index holds (a mask)."""
        return in_sorted(np.asarray(ids, dtype=np.int64), self._ids)

    def vectors_of(self, ids: np.ndarray) -> np.ndarray:
        """The stored vectors of ``ids`` (all held by the index), in their order."""
        return self._reconstruct(ids)

    async def _candidates(self, q: np.ndarray, k: int, allowed: np.ndarray) -> list[SearchHit]:
        """FAISS's top ``k`` among ``allowed`` for ``q`` (lock held)."""
        assert self._index is not None
        q = np.ascontiguousarray(q.reshape(1, -1), dtype=np.float32)
        if self.approximate and len(allowed) <= _EXACT_BELOW:
            # A few thousand allowed: scoring each exactly costs less than the lists
            # would miss (a scope's rows are a small share of every list).
            held = allowed[in_sorted(allowed, self._ids)]
            cosines = self._reconstruct(held) @ q[0]
            top = np.argsort(-cosines, kind="stable")[:k]
            return [SearchHit(int(held[j]), float(cosines[j])) for j in top]
        selector, bitmap = _bitmap_selector(allowed)
        params: faiss.SearchParameters
        if self.approximate:
            lists = faiss.extract_index_ivf(self._index).nlist
            # The filters let a share of each list through: scan more lists for less.
            probe = math.ceil(_NPROBE * len(self._ids) / max(1, len(allowed)))
            params = faiss.SearchParametersIVF(sel=selector, nprobe=min(lists, probe))
        else:
            params = faiss.SearchParameters(sel=selector)
        scores, ids = await asyncio.to_thread(_search_one, self._index, q, min(k, len(allowed)), params)
        del bitmap  # only now may the selector's memory go
        return [SearchHit(int(i), float(s)) for s, i in zip(scores[0], ids[0], strict=True) if i >= 0]


def _writer(f: BinaryIO) -> Callable[[bytes], int]:
    """FAISS's writer callback: it may hand over a memoryview; ``write`` takes both."""

    def write(data: bytes) -> int:
        return f.write(data)

    return write
