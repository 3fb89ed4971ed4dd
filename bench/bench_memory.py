"""Memory benchmark: recall latency, write throughput, reindex time and RSS.

    .venv/bin/python bench/bench_memory.py [--sizes 1000,10000,100000] [--queries 300]

Recall latency is the full ``MemoryService.recall`` path with the hash embedder —
generation check, hard filters (cached per generation), embed, FAISS search behind
the IDSelector, threshold, rerank, fetch, render — measured with and without the
recall bookkeeping write. "filter SQL" is the uncached hard-filter query, paid once
per store generation. Rows are seeded with one bulk SQL insert (vectors from the
same embedder) so that 100k rows load in seconds; write throughput is measured
separately through the full save path (guard, TTL, embed, supersede transaction,
index update). Targets (issue 4): p50 < 5 ms at 10k and < 20 ms at 100k.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from qwenmem_tui.config import Settings

from qwenmem_tui.features import registry  # noqa: F401 -- registers the features' settings
from qwenmem_tui.memory.embed import HashEmbedder
from qwenmem_tui.memory.model import DAY, WriteRequest, content_hash, embed_text
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.paths import Paths
from qwenmem_tui.storage.database import Database

PROJECT = "/bench/project"
OTHER_PROJECT = "/bench/other"
USER = "bench"
CATEGORIES = ("user", "feedback", "project", "reference")


def _vocabulary(rng: random.Random, size: int = 3000) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(3, 9))) for _ in range(size)]


def _sentence(rng: random.Random, words: list[str]) -> str:
    return " ".join(rng.choice(words) for _ in range(rng.randint(6, 14)))


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _seed(paths: Paths, n: int, rng: random.Random, words: list[str]) -> None:
    """Bulk-insert ``n`` active rows: 80% visible from PROJECT, 20% in another project."""
    embedder = HashEmbedder()
    now = time.time()
    rows = []
    for i in range(n):
        category = CATEGORIES[i % 4]
        scope = (
            "global"
            if category in ("user", "feedback")
            else (OTHER_PROJECT if i % 5 == 0 else PROJECT)
        )
        key, value = f"fact_{i}", _sentence(rng, words)
        rows.append((category, key, value, scope))
    vectors = await asyncio.to_thread(
        embedder.embed_sync, [embed_text(c, k, v) for c, k, v, _ in rows]
    )
    db = await Database.open(paths.db_file)
    try:

        async def insert(conn) -> None:  # type: ignore[no-untyped-def]
            await conn.executemany(
                "INSERT INTO memories (user, scope, category, key, value, origin, status, flags, created_at,"
                " updated_at, expires_at, content_hash, embedding_model, embedding)"
                " VALUES (?, ?, ?, ?, ?, 'tool', 'active', '[]', ?, ?, ?, ?, ?, ?)",
                [
                    (
                        USER,
                        s,
                        c,
                        k,
                        v,
                        now,
                        now,
                        now + 365 * DAY,
                        content_hash(v),
                        embedder.id,
                        vec.astype("<f4").tobytes(),
                    )
                    for (c, k, v, s), vec in zip(rows, vectors, strict=True)
                ],
            )
            await conn.execute("UPDATE memory_meta SET value = value + 1 WHERE name = 'generation'")

        await db.write(insert)
    finally:
        await db.close()


async def bench_size(n: int, queries: int, writes: int) -> dict[str, float]:
    rng = random.Random(n)
    words = _vocabulary(rng)
    settings = Settings.model_validate({"general": {"user": USER}, "memory": {"embedding": "hash"}})
    with tempfile.TemporaryDirectory(prefix="qwenmem-bench-") as tmp:
        paths = Paths(Path(tmp))
        paths.ensure()
        await (await MemoryService.open(settings, paths)).close()  # schema only
        await _seed(paths, n, rng, words)

        started = time.perf_counter()
        svc = await MemoryService.open(settings, paths)  # no index file yet: full rebuild
        reindex_s = time.perf_counter() - started
        try:
            started = time.perf_counter()
            await svc.store.allowed_ids(user=USER, scopes=("global", PROJECT), now=time.time())
            filter_ms = (time.perf_counter() - started) * 1000

            texts = [_sentence(rng, words) for _ in range(queries)]
            await svc.recall(texts[0], project=PROJECT, record=False)  # warm the filter cache
            plain, recorded = [], []
            for text in texts:
                t0 = time.perf_counter()
                await svc.recall(text, project=PROJECT, record=False)
                plain.append((time.perf_counter() - t0) * 1000)
            for text in texts[: max(1, queries // 3)]:
                t0 = time.perf_counter()
                await svc.recall(text, project=PROJECT)
                recorded.append((time.perf_counter() - t0) * 1000)

            started = time.perf_counter()
            for i in range(writes):
                await svc.save(
                    WriteRequest(
                        "project",
                        f"bench_write_{i}",
                        _sentence(rng, words),
                        origin="tool",
                        project=PROJECT,
                    )
                )
            write_s = time.perf_counter() - started
            rss = _rss_mb()
        finally:
            await svc.close()
    return {
        "n": n,
        "p50": statistics.median(plain),
        "p99": _pct(plain, 0.99),
        "p50_rec": statistics.median(recorded),
        "filter_ms": filter_ms,
        "writes_s": writes / write_s,
        "reindex_s": reindex_s,
        "rss_mb": rss,
    }


def _table(rows: list[dict[str, float]]) -> str:
    head = (
        f"{'memories':>9} {'recall p50':>11} {'p99':>8} {'p50+record':>11} {'filter SQL':>11}"
        f" {'writes/s':>9} {'reindex':>9} {'RSS':>8}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{int(r['n']):>9,} {r['p50']:>8.2f} ms {r['p99']:>5.2f} ms {r['p50_rec']:>8.2f} ms"
            f" {r['filter_ms']:>8.1f} ms {r['writes_s']:>9.0f} {r['reindex_s']:>7.2f} s {r['rss_mb']:>5.0f} MB"
        )
    lines.append(
        f"peak RSS {_peak_rss_mb():.0f} MB; reindex = open with no index file (load vectors + build)"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--writes", type=int, default=500)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON too")
    args = parser.parse_args(argv)
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        rows.append(asyncio.run(bench_size(n, args.queries, args.writes)))
        print(f"  done {n:,}", file=sys.stderr, flush=True)
    print(_table(rows))
    if args.json:
        print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
