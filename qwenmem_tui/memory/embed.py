"""Embedders: text -> L2-normalised float32 vectors, so inner product is cosine."""

from __future__ import annotations

import asyncio
import re
import unicodedata
import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from qwenmem_tui.llm.client import LLMClient

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

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dim) float32, rows L2-normalised."""


def _normalise_rows(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (matrix / norms).astype(np.float32, copy=False)


class HashEmbedder:
    """Signed feature hashing of words, word bigrams and character n-grams.

    Offline, deterministic across processes (crc32, not Python's salted ``hash``)
    and fast enough to embed on every keystroke. Character n-grams make "projects"
    find "project"; signs keep collisions from adding up to fake similarity.
    """

    # Calibrated on paraphrase vs unrelated pairs (tests/unit/memory/test_embed.py):
    # related facts mostly score 0.25-0.75, 95% of unrelated pairs stay under 0.17.
    DEFAULT_THRESHOLD = 0.2
    VERSION = 1

    def __init__(self, dim: int = 256) -> None:
        self.dim = dim

    @property
    def id(self) -> str:
        return f"hash-v{self.VERSION}-{self.dim}"

    @property
    def default_threshold(self) -> float:
        return self.DEFAULT_THRESHOLD

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
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            out[i] = self.embed_one(text)
        return out

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        # A handful of texts costs microseconds; only bulk work is worth a thread hop.
        if len(texts) > 64:
            return await asyncio.to_thread(self.embed_sync, texts)
        return self.embed_sync(texts)


class OpenAIEmbedder:
    """The ``/embeddings`` endpoint through LLMClient.embed, in batches.

    Batches stay small because some OpenAI-compatible providers (DashScope) reject
    more than 10 inputs per call.
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

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        rows: list[list[float]] = []
        for start in range(0, len(texts), self._batch_size):
            batch = list(texts[start : start + self._batch_size])
            rows.extend(await self._llm.embed(batch, model=self._model, base_url=self._base_url))
        if not rows:
            return np.zeros((0, 0), dtype=np.float32)
        return _normalise_rows(np.asarray(rows, dtype=np.float32))
