"""PostgreSQL vs SQLite memory store: write and recall latency, cross-process propagation.

    .venv/bin/python bench/bench_postgres.py [--size 10000] [--queries 300] [--writes 200] [--hops 30]

Both stores are seeded with ``--size`` active memories (bulk insert, hash-embedder
vectors); then the full service paths are timed — ``save`` (guard, embed, supersede
transaction, index update) and ``recall`` (generation check, hard filters, embed,
FAISS, fetch; with and without the recall bookkeeping write). Propagation: a second
process (``tests/postgres/pg_worker.py watch``) with its own home listens; the time
from a supersede's commit in this process to that process printing a recall that
already shows the new value. The server is a throwaway cluster started by the same
helper the tests use (``tests/postgres/pgcluster.py``), or QWENMEM_TEST_POSTGRES_DSN.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import asyncpg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "postgres"))

from bench_memory import PROJECT, USER, _pct, _seed, _sentence, _vocabulary  # noqa: E402
from pgcluster import DSN_ENV, PostgresServer, why_unavailable  # noqa: E402

from qwenmem_tui.config import Settings  # noqa: E402

from qwenmem_tui.features import registry  # noqa: E402, F401 -- registers the features' settings
from qwenmem_tui.memory.embed import HashEmbedder  # noqa: E402
from qwenmem_tui.memory.model import DAY, WriteRequest, content_hash, embed_text  # noqa: E402
from qwenmem_tui.memory.service import MemoryService  # noqa: E402
from qwenmem_tui.paths import Paths  # noqa: E402

WORKER = ROOT / "tests" / "postgres" / "pg_worker.py"
WATCH_PROJECT = "/work/alpha-project"  # the project pg_worker.py recalls for


async def _seed_postgres(dsn: str, n: int, rng: random.Random, words: list[str]) -> None:
    """The same rows as bench_memory's SQLite seed, through COPY."""
    embedder = HashEmbedder()
    now = time.time()
    rows = []
    for i in range(n):
        category = ("user", "feedback", "project", "reference")[i % 4]
        scope = "global" if category in ("user", "feedback") else ("/bench/other" if i % 5 == 0 else PROJECT)
        rows.append((category, f"fact_{i}", _sentence(rng, words), scope))
    vectors = await asyncio.to_thread(embedder.embed_sync, [embed_text(c, k, v) for c, k, v, _ in rows])
    conn = await asyncpg.connect(dsn)
    try:
        await conn.copy_records_to_table(
            "memories",
            columns=[
                "username", "scope", "category", "key", "value", "origin", "status", "flags", "created_at",
                "updated_at", "expires_at", "content_hash", "embedding_model", "embedding",
            ],
            records=[
                (USER, s, c, k, v, "tool", "active", [], now, now, now + 365 * DAY, content_hash(v), embedder.id,
                 vec.astype("<f4").tobytes())
                for (c, k, v, s), vec in zip(rows, vectors, strict=True)
            ],
        )
        await conn.execute("UPDATE memory_meta SET value = value + 1 WHERE name = 'generation'")
    finally:
        await conn.close()


async def _latencies(svc: MemoryService, rng: random.Random, words: list[str], queries: int, writes: int) -> dict[str, float]:
    texts = [_sentence(rng, words) for _ in range(queries)]
    await svc.recall(texts[0], project=PROJECT, record=False)  # warm the filter cache
    plain, recorded, saves = [], [], []
    for text in texts:
        t0 = time.perf_counter()
        await svc.recall(text, project=PROJECT, record=False)
        plain.append((time.perf_counter() - t0) * 1000)
    for text in texts[: queries // 2]:
        t0 = time.perf_counter()
        await svc.recall(text, project=PROJECT)
        recorded.append((time.perf_counter() - t0) * 1000)
    for i in range(writes):
        value = _sentence(rng, words)
        t0 = time.perf_counter()
        await svc.save(
            WriteRequest("project", f"bench_write_{i % 50}", value, origin="tool", project=PROJECT)
        )  # mostly supersedes
        saves.append((time.perf_counter() - t0) * 1000)
    return {
        "write p50": _pct(saves, 0.5), "write p99": _pct(saves, 0.99),
        "recall p50": _pct(plain, 0.5), "recall p99": _pct(plain, 0.99),
        "recall+record p50": _pct(recorded, 0.5), "recall+record p99": _pct(recorded, 0.99),
    }


async def _propagation(dsn: str, home: Path, hops: int) -> list[float]:
    """Commit in this process -> a recall showing it printed by another process, in ms."""
    settings = Settings.model_validate({"general": {"user": "ana"}, "memory": {"store": "postgres", "postgres_dsn": dsn, "embedding": "hash"}})
    paths = Paths(home / "writer")
    paths.ensure()
    writer = await MemoryService.open(settings, paths)
    watcher = await asyncio.create_subprocess_exec(
        sys.executable, str(WORKER), "watch", str(home / "watcher"), dsn,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )
    assert watcher.stdout is not None and watcher.stdin is not None
    delays: list[float] = []
    try:
        await asyncio.wait_for(watcher.stdout.readline(), 60)  # ready
        for i in range(hops):
            value = f"Project number {i}, stack Python"
            result = await writer.save(
                WriteRequest(
                    "project",
                    "current_project",
                    value,
                    origin="tool",
                    project=WATCH_PROJECT,
                )
            )
            committed = time.time()
            while True:
                report = json.loads(await asyncio.wait_for(watcher.stdout.readline(), 10))
                if report["generation"] >= result.generation and value in report["values"]:
                    delays.append(max(0.0, report["at"] - committed) * 1000)
                    break
    finally:
        watcher.stdin.close()
        await watcher.wait()
        await writer.close()
    return delays


async def run(size: int, queries: int, writes: int, hops: int) -> dict[str, dict[str, float]]:
    external = os.environ.get(DSN_ENV)
    server: PostgresServer | None = None
    if external:
        server = PostgresServer.external(external)
    else:
        reason = why_unavailable()
        if reason is not None:
            raise SystemExit(f"bench_postgres: {reason}")
        server = PostgresServer.start_new()
    results: dict[str, dict[str, float]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="qwenmem-bench-pg-") as tmp:
            for backend in ("sqlite", "postgres"):
                rng = random.Random(size)
                words = _vocabulary(rng)
                memory: dict[str, object] = {"embedding": "hash"}
                if backend == "postgres":
                    dsn = await server.create_database("qwenmem_bench")
                    memory = {**memory, "store": "postgres", "postgres_dsn": dsn}
                settings = Settings.model_validate({"general": {"user": USER}, "memory": memory})
                paths = Paths(Path(tmp) / backend)
                paths.ensure()
                await (await MemoryService.open(settings, paths)).close()  # schema only
                if backend == "postgres":
                    await _seed_postgres(dsn, size, rng, words)
                else:
                    await _seed(paths, size, rng, words)
                t0 = time.perf_counter()
                svc = await MemoryService.open(settings, paths)
                results[backend] = {"open+reindex s": time.perf_counter() - t0}
                try:
                    results[backend].update(await _latencies(svc, rng, words, queries, writes))
                finally:
                    await svc.close()
            dsn = await server.create_database("qwenmem_bench")
            delays = await _propagation(dsn, Path(tmp) / "propagation", hops)
            results["postgres"]["propagation p50"] = _pct(delays, 0.5)
            results["postgres"]["propagation p99"] = _pct(delays, 0.99)
    finally:
        if server.root is not None:
            server.destroy()
    return results


def main(argv: Sequence[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--writes", type=int, default=200)
    parser.add_argument("--hops", type=int, default=30)
    args = parser.parse_args(argv)
    results = asyncio.run(run(args.size, args.queries, args.writes, args.hops))
    metrics = list(results["postgres"])
    print(f"memory store at {args.size:,} memories (ms unless noted)")
    print(f"{'metric':<22}{'sqlite':>10}{'postgres':>10}")
    for metric in metrics:
        cells = [results[b].get(metric) for b in ("sqlite", "postgres")]
        print(f"{metric:<22}" + "".join(f"{c:>10.2f}" if c is not None else f"{'-':>10}" for c in cells))
    return results


if __name__ == "__main__":
    main()
