"""The dense channel's ranking, wherever the vectors are searched.

The local FAISS index (``index.py``) and a server searching its own vectors
(pgvector, ``store_index.py``) rank the same way: candidates by ``p·ranking_query``
(the query centred on the store's mean, with the language subspace of
``language_space.py`` projected out: ``p·P(q − mean)`` orders passages as
``P(p − mean)·P(q − mean)`` does, so neither index holds anything but the plain
vectors), then a few times ``k`` of them reordered by the exact cosine of the centred,
projected vectors (``debiased``). Kept free of FAISS so a client searching in the
database never loads it.
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


def without(vectors: np.ndarray, basis: np.ndarray | None) -> np.ndarray:
    """``vectors`` (rows, or one) with their components along ``basis`` (orthonormal
    columns) removed."""
    if basis is None:
        return vectors
    removed: np.ndarray = vectors - (vectors @ basis) @ basis.T
    return removed


def ranking_query(query: np.ndarray, mean: np.ndarray, basis: np.ndarray | None) -> np.ndarray:
    """The vector a first-stage search takes in place of ``query``: its inner product
    with a plain passage ``p`` is ``P(p − mean)·P(q − mean)`` plus a constant."""
    ranked: np.ndarray = without(query - mean, basis).astype(np.float32)
    return ranked


def scoring_query(query: np.ndarray, basis: np.ndarray | None) -> np.ndarray:
    """What a passage's score (the cosine the threshold reads) is taken from
    (``best_scores``): the query itself, or, with the language subspace removed, the
    query and its copy without it (unit length), the passage's score the larger of
    its two products. The copy keeps a question's fact in another language from
    being marked down for its language; the query itself keeps a request in the
    language of its memories from losing what they share (the language's part of
    the cosine: on the multilingual tuning half, 3 of 22 work requests lost all
    their memories under 0.81 without it). The passage stays whole, so the
    products come from any stored vector (``scores`` of either index, a store's rows)."""
    if basis is None:
        return query
    q = np.asarray(query, dtype=np.float32).reshape(-1)
    kept = without(q, basis)
    unit = kept / max(float(np.linalg.norm(kept)), 1e-6)
    both: np.ndarray = np.stack([q, unit]).astype(np.float32)
    return both


def best_scores(vectors: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Each row's score for ``scoring_query``'s one or two queries: the larger product
    (each row computed alone, ``row_dots``)."""
    rows = np.atleast_2d(np.asarray(queries, dtype=np.float32))
    best: np.ndarray = np.max([row_dots(vectors, q) for q in rows], axis=0)
    return best


def ranking_scores(
    query: np.ndarray, mean: np.ndarray | None, vectors: np.ndarray, basis: np.ndarray | None = None
) -> np.ndarray:
    """What a search orders ``vectors`` by: the cosine of the mean-centred passage with
    the mean-centred query, both without ``basis`` (``debiased``); without a mean (and
    no ``basis``), the plain product."""
    if mean is None:
        if basis is None:
            return row_dots(vectors, np.asarray(query, dtype=np.float32))
        mean = np.zeros_like(query, dtype=np.float32)
    centred = without(vectors - mean, basis)
    norms = np.maximum(np.linalg.norm(centred, axis=1), 1e-6)
    centred_query = query - mean if basis is None else ranking_query(query, mean, basis)
    ranking: np.ndarray = row_dots(centred, centred_query) / norms
    return ranking


def hubness(
    vectors: np.ndarray, mean: np.ndarray | None, basis: np.ndarray | None, bank: np.ndarray, k: int
) -> np.ndarray:
    """Each passage's mean cosine with its ``k`` nearest questions of ``bank`` (questions
    of every kind, in many languages), all as ``ranking_scores`` reads them (centred,
    without ``basis``): how near a passage sits to questions in general. A hub — a short
    sentence in a language the embedder knows less ("Bố tôi sống ở Huế.") — sits near
    every question and outranks the fact a question asks for; the penalty is the
    passage half of CSLS (Conneau et al., 2018), which cross-lingual retrieval uses
    against exactly that."""

    def unit(x: np.ndarray) -> np.ndarray:
        centred = x if mean is None else x - mean
        if basis is not None:  # ``without``, in plain loops (as below)
            centred = centred - np.einsum("ij,kj->ik", np.einsum("ij,jk->ik", centred, basis), basis)
        scaled: np.ndarray = centred / np.maximum(np.linalg.norm(centred, axis=1, keepdims=True), 1e-6)
        return scaled

    if not len(vectors) or not len(bank):
        return np.zeros(len(vectors), dtype=np.float32)
    # einsum's own loops, not BLAS: a matrix product this size woke BLAS's threads, and on
    # a busy 2-core machine their spinning cost recall's p95 50 ms (the loops: < 2 ms).
    near = np.einsum("ij,kj->ik", unit(np.asarray(vectors, dtype=np.float32)), unit(np.asarray(bank, dtype=np.float32)))
    k = min(k, near.shape[1])
    nearest: np.ndarray = np.sort(near, axis=1)[:, -k:].mean(axis=1)
    return nearest


def debiased(
    query: np.ndarray,
    mean: np.ndarray,
    ids: Sequence[int],
    vectors: np.ndarray,
    k: int,
    basis: np.ndarray | None = None,
) -> list[SearchHit]:
    """Rank ``ids`` (with their ``vectors``) by the cosine of the mean-centred passage
    with the mean-centred query, both without their components along ``basis``
    (the language subspace) when given; return the top ``k`` with their scores
    (``scoring_query``: the plain cosines without a ``basis``).
    A search ranked them by ``p·ranking_query``, which leaves out the division by
    ``|P(p − mean)|``; this reorders a few times ``k`` candidates by the exact cosine."""
    if not len(ids):
        return []
    ranking = ranking_scores(query, mean, vectors, basis)
    cosines = best_scores(vectors, scoring_query(query, basis))
    order = sorted(range(len(ids)), key=lambda j: (-ranking[j], ids[j]))[:k]
    return [SearchHit(int(ids[j]), float(cosines[j])) for j in order]
