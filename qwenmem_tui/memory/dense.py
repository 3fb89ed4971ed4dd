"""The dense channel's ranking, wherever the vectors are searched.

The local FAISS index (``index.py``) and a server searching its own vectors
(pgvector, ``store_index.py``) rank the same way: candidates by ``p·(q − mean)``,
then a few times ``k`` of them reordered by the exact mean-centred cosine
(``debiased``). Kept free of FAISS so a client searching in the database never
loads it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# A debiased search reranks this many times k candidates exactly (see ``debiased``).
DEBIAS_WIDTH = 4


@dataclass(frozen=True)
class SearchHit:
    id: int
    score: float


def row_dots(matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """Each row's dot product with ``vector``, each computed alone: a matrix product
    rounds a row differently by where it sits in the matrix (BLAS blocks rows), and a
    batch's lookups (``memory/bulk.py``) must rank a row as one lookup alone does."""
    dots: np.ndarray = np.multiply(matrix, vector).sum(axis=1)
    return dots


def debiased(
    query: np.ndarray, mean: np.ndarray, ids: Sequence[int], vectors: np.ndarray, k: int
) -> list[SearchHit]:
    """Rank ``ids`` (with their ``vectors``) by the cosine of the mean-centred passage
    with the mean-centred query; return the top ``k`` with their plain cosines. A
    search ranked them by ``p·(q − mean)``, which leaves out the division by
    ``|p − mean|``; this reorders a few times ``k`` candidates by the exact centred cosine."""
    if not len(ids):
        return []
    centred = vectors - mean
    norms = np.maximum(np.linalg.norm(centred, axis=1), 1e-6)
    ranking = row_dots(centred, query - mean) / norms
    cosines = row_dots(vectors, query)
    order = sorted(range(len(ids)), key=lambda j: (-ranking[j], ids[j]))[:k]
    return [SearchHit(int(ids[j]), float(cosines[j])) for j in order]
