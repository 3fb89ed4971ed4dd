"""The FAISS index is a cache of the store: it heals itself and follows other processes."""

from __future__ import annotations

import json

import numpy as np
from memtest_support import PROJECT_A, Clock, make_settings

from qwenmem_tui.memory.embed import HashEmbedder
from qwenmem_tui.memory.index import HNSW, VectorIndex
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


async def test_hnsw_removals_are_tombstones_that_search_never_returns(tmp_path) -> None:
    embedder = HashEmbedder()
    index = VectorIndex(tmp_path, embedder.id, hnsw_threshold=10)
    texts = [f"fact number {i} about topic {i % 7}" for i in range(40)]
    ids = np.arange(1, 41, dtype=np.int64)
    await index.rebuild(ids, embedder.embed_sync(texts), generation=1)
    assert index.kind == HNSW
    await index.remove(np.asarray([5], dtype=np.int64))
    assert 5 not in index.ids() and len(index) == 39
    allowed = np.setdiff1d(ids, [5])
    hits = await index.search(embedder.embed_one(texts[4]), 10, allowed)
    assert hits and all(h.id != 5 for h in hits)
    await index.save()
    reloaded = VectorIndex(tmp_path, embedder.id, hnsw_threshold=10)
    assert await reloaded.load() and 5 not in reloaded.ids() and reloaded.kind == HNSW


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
