"""The local FAISS index: a cache of the store's vectors, never the source of truth.

``IndexIDMap2`` over inner product (vectors are L2-normalised, so it is cosine) keyed
by memory id; flat while small — exact, and fast enough at 100k — and HNSW beyond
``hnsw_threshold``. HNSW cannot delete, so removals there are tombstones until the
next rebuild; they are harmless meanwhile because every search runs behind an
IDSelector built from the store's hard filters, which never allow a removed row.

On disk: ``<index_dir>/<embedder>.faiss``, a JSON header (embedder, dimension, kind,
tombstones, the store generation it reflects) followed by the serialised index.

The index also keeps the sum of its live vectors (updated on every add and removal,
recomputed at load), so recall can rank by ``p·(q − mean)``: a small multilingual
embedder puts every sentence of one language in a shared direction, and the store's
mean is dominated by those directions; removing it from the query stops a question
from preferring any memory written in its own language (``search(debias=True)``).
FAISS calls run in a thread: they release the GIL and can take a while.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

import faiss
import numpy as np

from qwenmem_tui.memory.dense import DEBIAS_WIDTH, SearchHit, debiased
from qwenmem_tui.paths import private_dir, private_file

log = logging.getLogger("qwenmem.memory")

Progress = Callable[[int, int], None]  # (done, total)

FLAT = "flat"
HNSW = "hnsw"
_BATCH = 4096
_MAGIC = b"QWENMEM-FAISS-1\n"
_TOMBSTONE_REBUILD_RATIO = 0.25

# One query is too small to split across threads: OpenMP's fork/join made p99 four
# times worse than single-threaded search on 2 cores. The setting is per OS thread,
# and FAISS runs in a worker pool thread, so each call sets what it needs.
_THREADS = faiss.omp_get_max_threads()


def _search_one(
    index: faiss.Index, query: np.ndarray, k: int, params: faiss.SearchParameters
) -> tuple[np.ndarray, np.ndarray]:
    faiss.omp_set_num_threads(1)
    distances, ids = index.search(query, k, params=params)
    return distances, ids


def _add_batch(index: faiss.Index, vectors: np.ndarray, ids: np.ndarray) -> None:
    faiss.omp_set_num_threads(_THREADS)
    index.add_with_ids(vectors, ids)


def _bitmap_selector(allowed: np.ndarray) -> tuple[faiss.IDSelector, np.ndarray]:
    """An IDSelectorBitmap over memory ids; the bitmap must outlive the search."""
    bits = np.zeros(int(allowed.max()) + 1, dtype=bool)
    bits[allowed] = True
    packed = np.packbits(bits, bitorder="little")
    return faiss.IDSelectorBitmap(len(packed) * 8, faiss.swig_ptr(packed)), packed


class VectorIndex:
    """One embedder's index, with the generation of the store it reflects."""

    def __init__(self, directory: Path, embedder_id: str, *, hnsw_threshold: int = 200_000) -> None:
        self.directory = directory
        self.embedder_id = embedder_id
        self.hnsw_threshold = hnsw_threshold
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", embedder_id)
        self.path = directory / f"{safe}.faiss"
        self.generation = -1  # reflects no store state until built or loaded
        self.kind = FLAT
        self.dim = 0
        self._index: faiss.IndexIDMap2 | None = None
        self._tombstones: set[int] = set()
        self._sum: np.ndarray | None = None  # float64 sum of live vectors, for the mean
        self._lock = asyncio.Lock()

    # state -------------------------------------------------------------------------
    @property
    def loaded(self) -> bool:
        return self._index is not None

    def ids(self) -> np.ndarray:
        """Live ids (tombstones excluded), sorted."""
        if self._index is None:
            return np.zeros(0, dtype=np.int64)
        ids = faiss.vector_to_array(self._index.id_map).astype(np.int64)
        if self._tombstones:
            ids = np.setdiff1d(ids, np.fromiter(self._tombstones, dtype=np.int64))
        return np.sort(ids)

    def __len__(self) -> int:
        return 0 if self._index is None else self._index.ntotal - len(self._tombstones)

    # load / save -------------------------------------------------------------------
    async def load(self) -> bool:
        """Load the file if present, intact and built with this embedder."""
        try:
            raw = await asyncio.to_thread(self.path.read_bytes)
        except FileNotFoundError:
            return False
        try:
            if not raw.startswith(_MAGIC):
                raise ValueError("not a qwenmem index file")
            size = int.from_bytes(raw[len(_MAGIC) : len(_MAGIC) + 4], "little")
            body = len(_MAGIC) + 4 + size
            meta = json.loads(raw[len(_MAGIC) + 4 : body])
            if meta.get("embedder") != self.embedder_id:
                log.info(
                    "[MEMORY_INDEX] index built with %s, need %s",
                    meta.get("embedder"),
                    self.embedder_id,
                )
                return False
            blob = np.frombuffer(raw, dtype=np.uint8, offset=body)
            index = await asyncio.to_thread(faiss.deserialize_index, blob)
            if index.ntotal != meta["count"] or index.d != meta["dim"]:
                raise ValueError(
                    f"index holds {index.ntotal}x{index.d}, header says {meta['count']}x{meta['dim']}"
                )
        except Exception as exc:  # a corrupt cache is rebuilt, never fatal
            log.warning("[MEMORY_INDEX] unreadable index %s, rebuilding: %s", self.path, exc)
            self._index = None
            return False
        self._index = index
        self.dim = int(meta["dim"])
        self.kind = meta["kind"]
        self.generation = int(meta["generation"])
        self._tombstones = set(meta.get("tombstones", []))
        self._sum = await asyncio.to_thread(self._live_sum)
        return True

    def _live_sum(self) -> np.ndarray | None:
        """Sum of the live vectors, read back in batches (the file does not hold it)."""
        if self._index is None or self._index.ntotal == 0:
            return None
        total = np.zeros(self._index.d, dtype=np.float64)
        for start in range(0, self._index.ntotal, _BATCH):
            n = min(_BATCH, self._index.ntotal - start)
            total += self._index.index.reconstruct_n(start, n).sum(axis=0, dtype=np.float64)
        if self._tombstones:
            total -= self._vectors(self._tombstones).sum(axis=0, dtype=np.float64)
        return total

    def _vectors(self, ids: Collection[int]) -> np.ndarray:
        """The stored vectors of those ``ids`` the index holds (order not kept)."""
        assert self._index is not None
        rows = []
        for memory_id in ids:
            try:
                rows.append(self._index.reconstruct(int(memory_id)))
            except RuntimeError:  # "key not found"
                continue
        return np.asarray(rows, dtype=np.float32).reshape(-1, self._index.d)

    def mean(self) -> np.ndarray | None:
        """Mean of the live vectors; None while the index is empty."""
        count = len(self)
        if self._sum is None or count <= 0:
            return None
        return (self._sum / count).astype(np.float32)

    async def save(self) -> None:
        """One file, header and vectors together, replaced atomically: two processes
        saving at once leave one complete file, never a header from one and vectors
        from the other."""
        if self._index is None:
            return
        private_dir(self.directory)
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        async with self._lock:
            blob = await asyncio.to_thread(faiss.serialize_index, self._index)
            header = json.dumps(
                {
                    "embedder": self.embedder_id,
                    "dim": self.dim,
                    "kind": self.kind,
                    "count": int(self._index.ntotal),
                    "generation": self.generation,
                    "tombstones": sorted(self._tombstones),
                }
            ).encode()
        data = b"".join((_MAGIC, len(header).to_bytes(4, "little"), header, blob.tobytes()))
        try:
            private_file(tmp)  # memories: 0600 whatever the umask (write_bytes keeps the mode)
            await asyncio.to_thread(tmp.write_bytes, data)
            os.replace(tmp, self.path)
        except BaseException as exc:
            tmp.unlink(missing_ok=True)  # never a half-written (or 0-byte) file left behind
            if not isinstance(exc, OSError):
                raise
            # A full disk (or a read-only home) loses nothing: the index is a cache of the
            # database, the previous file stays whole, and a stale one is rebuilt at open.
            log.info("[MEMORY_INDEX] could not save %s (caught up from the database at the next open): %s", self.path, exc)

    # build / change ----------------------------------------------------------------
    def _new_index(self, dim: int, count: int) -> faiss.IndexIDMap2:
        if count >= self.hnsw_threshold:
            inner = faiss.IndexHNSWFlat(dim, 32, faiss.METRIC_INNER_PRODUCT)
            inner.hnsw.efConstruction = 40
            self.kind = HNSW
        else:
            inner = faiss.IndexFlatIP(dim)
            self.kind = FLAT
        return faiss.IndexIDMap2(inner)  # the wrapper keeps a reference to inner

    async def rebuild(
        self,
        ids: np.ndarray,
        vectors: np.ndarray,
        generation: int,
        progress: Progress | None = None,
    ) -> None:
        """Replace the whole index with ``vectors``; reports progress per batch."""
        dim = vectors.shape[1] if len(ids) else self.dim
        async with self._lock:
            index = self._new_index(dim, len(ids)) if dim else None
            total = len(ids)
            for start in range(0, total, _BATCH):
                end = min(start + _BATCH, total)
                await asyncio.to_thread(_add_batch, index, vectors[start:end], ids[start:end])
                if progress is not None:
                    progress(end, total)
            if progress is not None and total == 0:
                progress(0, 0)
            self._index = index
            self.dim = dim
            self._tombstones = set()
            self._sum = vectors.sum(axis=0, dtype=np.float64) if len(ids) else None
            self.generation = generation

    async def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        if len(ids) == 0:
            return
        async with self._lock:
            if self._index is None or self.dim != vectors.shape[1]:
                self.dim = vectors.shape[1]
                self._index = self._new_index(self.dim, len(ids))
                self._sum = None
            # Idempotent: a sync woken by another process's change (LISTEN/NOTIFY) may
            # already have added a row between its commit and this write's own add.
            fresh = ~np.isin(ids, faiss.vector_to_array(self._index.id_map))
            fresh |= np.isin(ids, np.fromiter(self._tombstones, dtype=np.int64))
            ids, vectors = ids[fresh], vectors[fresh]
            if len(ids) == 0:
                return
            revived = self._tombstones.intersection(ids.tolist())
            if revived:
                # HNSW keeps a tombstoned vector; adding the id again would duplicate it.
                keep = ~np.isin(ids, np.fromiter(revived, dtype=np.int64))
                ids, vectors = ids[keep], vectors[keep]
                self._tombstones -= revived
                if len(ids) == 0:
                    return
            vectors = np.ascontiguousarray(vectors, dtype=np.float32)
            await asyncio.to_thread(_add_batch, self._index, vectors, ids)
            added = vectors.sum(axis=0, dtype=np.float64)
            self._sum = added if self._sum is None else self._sum + added

    async def remove(self, ids: np.ndarray) -> None:
        if self._index is None or len(ids) == 0:
            return
        async with self._lock:
            gone = self._vectors(set(ids.tolist()) - self._tombstones)
            if self._sum is not None and len(gone):
                self._sum = self._sum - gone.sum(axis=0, dtype=np.float64)
            if self.kind == HNSW:
                present = set(faiss.vector_to_array(self._index.id_map).tolist())
                self._tombstones.update(i for i in ids.tolist() if i in present)
            else:
                await asyncio.to_thread(self._index.remove_ids, np.asarray(ids, dtype=np.int64))

    def needs_rebuild(self) -> bool:
        """Grown past flat, or HNSW carrying too many tombstones."""
        if self._index is None:
            return True
        total: int = self._index.ntotal  # faiss is read untyped
        if self.kind == FLAT:
            return total >= self.hnsw_threshold
        return len(self._tombstones) > _TOMBSTONE_REBUILD_RATIO * max(1, total)

    # search ------------------------------------------------------------------------
    def _debiased(
        self, query: np.ndarray, mean: np.ndarray, ids: Sequence[int], k: int
    ) -> list[SearchHit]:
        """``dense.debiased`` over the vectors this index holds for ``ids``."""
        assert self._index is not None
        if not ids:
            return []
        vectors = np.stack([self._index.reconstruct(int(i)) for i in ids])
        return debiased(query, mean, ids, vectors, k)

    async def scores(self, query: np.ndarray, ids: Sequence[int]) -> dict[int, float]:
        """Cosine of ``query`` with each of ``ids`` that the index holds (tombstones
        excluded). Reconstructing a handful of vectors costs microseconds: no thread."""
        if self._index is None or not ids:
            return {}
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        out: dict[int, float] = {}
        async with self._lock:  # FAISS is not safe against a concurrent add
            for memory_id in ids:
                if memory_id in self._tombstones:
                    continue
                try:
                    out[int(memory_id)] = float(self._index.reconstruct(int(memory_id)) @ q)
                except RuntimeError:  # "key not found": no vector for this row
                    continue
        return out

    async def search(
        self, query: np.ndarray, k: int, allowed: np.ndarray, *, debias: bool = False
    ) -> list[SearchHit]:
        """Top ``k`` among ``allowed`` ids only: the selector makes FAISS skip the rest.

        ``debias`` ranks by ``p·(q − mean)`` instead of ``p·q`` (see the module
        docstring); the scores returned are still the plain cosines ``p·q``, which
        recall's calibrated threshold is measured on.
        """
        if self._index is None or len(allowed) == 0 or k <= 0 or self._index.ntotal == 0:
            return []
        mean = None
        if debias:
            async with self._lock:  # the sum and the count of one state, not mid-add
                mean = self.mean()
        if mean is not None:
            wide = await self.search(query - mean, k * DEBIAS_WIDTH, allowed)
            async with self._lock:
                return self._debiased(query, mean, [h.id for h in wide], k)
        selector, bitmap = _bitmap_selector(allowed)
        if self.kind == HNSW:
            params = faiss.SearchParametersHNSW(sel=selector, efSearch=max(64, 2 * k))
        else:
            params = faiss.SearchParameters(sel=selector)
        q = np.ascontiguousarray(query.reshape(1, -1), dtype=np.float32)
        k = min(k, len(allowed))
        async with self._lock:  # FAISS is not safe against a concurrent add
            scores, ids = await asyncio.to_thread(_search_one, self._index, q, k, params)
        del bitmap  # only now may the selector's memory go
        return [
            SearchHit(int(i), float(s)) for s, i in zip(scores[0], ids[0], strict=True) if i >= 0
        ]
