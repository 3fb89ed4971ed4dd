"""LoCoMo evidence recall: data nobody here tuned on (issue 39).

    .venv/bin/python bench/bench_locomo.py DIR [--conversations 10] [--embedding auto]

``--homes DIR`` keeps each conversation's imported home and reuses it on the next run
(the import is most of the run's time; two builds compared on one import), ``--only``
picks conversations by file stem; ``--import-only`` only imports (several processes
can share one ``--homes``: a conversation whose home exists is left to the process
that made it; ``--reverse`` takes them from the end). The last line (``counts:``)
holds every question's rank, so runs over parts of the ten add up: ``--sum FILE...``
prints the table of several runs' outputs together. Issue 39 tuned on 26, 30, 41, 42,
43 and reports 44, 47, 48, 49, 50 apart.

DIR holds LoCoMo's ten conversations (``26.json`` … ``50.json`` of
``data/locomo10.zip`` in github.com/snap-research/locomo, locomo10_v2; CC BY-NC 4.0,
so it is not copied into this repository). Each conversation goes into a fresh home
as a user would bring it: ``memory import`` of one JSON line per turn, category
``reference``, ``"Name: text"``, ``stated_at`` the session's date — untrusted (no
``--trust``), so the guard judges every turn. Then every question with evidence
(categories 1-4; 5 is adversarial and has none) is asked of recall: evidence recall@k
is the share of questions for which at least one evidence turn is among the first k,
beside BM25 (the store's FTS5 bm25 alone) on the same rows. Also MRR, recall latency
p50/p95 and the memory tokens a question would carry (its top 5 as the block).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import qwenmem_tui.features.registry  # noqa: F401 (registers the features' settings sections)
from qwenmem_tui.config import Settings
from qwenmem_tui.memory import backup
from qwenmem_tui.memory.lexical import query_terms
from qwenmem_tui.memory.model import GLOBAL_SCOPE
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.paths import Paths

PROJECT = "/bench/locomo"


def when(text: str) -> str:
    """LoCoMo's "1:56 pm on 8 May, 2023" as ISO 8601."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").isoformat()


def turns(conversation: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(import lines, dia_id of each line)."""
    lines, dia = [], []
    for name, session in conversation.items():
        if not name.startswith("session_") or not isinstance(session, list):
            continue
        stated = when(conversation[f"{name}_date_time"])
        for turn in session:
            value = f"{turn['speaker']}: {turn['text']}"
            key = f"{name}_{turn['dia_id'].replace(':', '_')}".lower()
            lines.append(json.dumps({"category": "reference", "key": key, "value": value, "stated_at": stated}))
            dia.append(turn["dia_id"])
    return lines, dia


class Tally:
    def __init__(self) -> None:
        self.ranks: list[int | None] = []

    def add(self, ranked: list[int], wanted: set[int]) -> None:
        self.ranks.append(next((i + 1 for i, m in enumerate(ranked) if m in wanted), None))

    def at(self, k: int) -> float:
        return sum(1 for r in self.ranks if r is not None and r <= k) / len(self.ranks)

    def mrr(self) -> float:
        return sum(1 / r for r in self.ranks if r is not None) / len(self.ranks)


async def imported(svc: MemoryService, home: Path, lines: list[str], dia: list[str]) -> tuple[dict[str, int], int]:
    """(dia_id -> memory id, turns held): imported now, or read from ``home``'s record
    of an earlier run's import (``--homes``: the import is the slow part, and the same
    rows let two builds' rankings be compared on one import)."""
    record = home / "bench-import.json"
    if record.exists():
        done = json.loads(record.read_text(encoding="utf-8"))
        return done["ids"], done["held"]
    report = await backup.import_lines(svc, lines, project=PROJECT)
    by_dia = dict(zip(dia, report.ids, strict=False))
    held = report.counts.get("quarantined", 0)
    record.write_text(json.dumps({"ids": by_dia, "held": held}), encoding="utf-8")
    return by_dia, held


async def conversation_run(
    path: Path, args: argparse.Namespace, fused: Tally, bm25: Tally, stats: dict[str, list[float]]
) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    lines, dia = turns(data)
    with tempfile.TemporaryDirectory(prefix="qwenmem-bench-locomo-") as tmp:
        home = Path(args.homes) / path.stem if args.homes else Path(tmp)
        if args.import_only:
            try:
                home.mkdir(parents=True)
            except FileExistsError:
                return  # imported, or being imported by another process
        paths = Paths(home)
        paths.ensure()
        settings = Settings.model_validate(
            {"general": {"user": "bench"}, "memory": {"embedding": args.embedding, "max_tokens": 0}}
        )
        svc = await MemoryService.open(settings, paths)
        svc.recaller.remove_language = args.language == "on"
        try:
            by_dia, held = await imported(svc, home, lines, dia)
            if args.import_only:
                return
            # A home imported by a build before dialogue turns' second vectors gets
            # them in the background at its first start: asked only once they are in.
            await svc.vectors.reembedded()
            stats["held"].append(held)
            stats["turns"].append(len(lines))
            for qa in data["qa"]:
                if qa.get("category") == 5 or not qa.get("evidence"):
                    continue
                wanted = {by_dia[e] for e in qa["evidence"] if e in by_dia}
                started = time.perf_counter()
                result = await svc.recall(qa["question"], project=PROJECT, k=10, record=False)
                stats["latency"].append((time.perf_counter() - started) * 1000)
                stats["tokens"].append(float(svc_tokens(result, 5)))
                fused.add(result.ids, wanted)
                hits = await svc.store.lexical_search(
                    query_terms(qa["question"]), user="bench", scopes=(GLOBAL_SCOPE, PROJECT),
                    now=svc.clock(), exclude=(), limit=10,
                )
                bm25.add([i for i, _ in hits], wanted)
        finally:
            await svc.close()


def svc_tokens(result: Any, k: int) -> int:
    from qwenmem_tui.memory.render import render_block
    from qwenmem_tui.text import estimate_text_tokens

    return estimate_text_tokens(render_block(result.memories[:k], result.rendered_at))


async def run(args: argparse.Namespace) -> None:
    files = sorted(Path(args.dir).glob("*.json"))[: args.conversations]
    if args.only:
        files = [f for f in files if f.stem in args.only.split(",")]
    if args.import_only:
        for path in files[:: -1 if args.reverse else 1]:
            await conversation_run(path, args, Tally(), Tally(), {})
        return
    fused, bm25 = Tally(), Tally()
    stats: dict[str, list[float]] = {"latency": [], "tokens": [], "held": [], "turns": []}
    for path in files:
        await conversation_run(path, args, fused, bm25, stats)
        print(f"  {path.name}: {len(fused.ranks)} questions so far, R@5 {fused.at(5):.3f} "
              f"vs BM25 {bm25.at(5):.3f}", file=sys.stderr, flush=True)
    report(files, fused, bm25, stats, args.embedding)


def report(files: list[Path], fused: Tally, bm25: Tally, stats: dict[str, list[float]], embedding: str) -> None:
    """The table, after every conversation."""
    lat = sorted(stats["latency"])
    print(f"{len(files)} conversations, {int(sum(stats['turns']))} turns imported "
          f"({int(sum(stats['held']))} held), {len(fused.ranks)} questions, embedder {embedding}\n")
    print("| | R@5 | R@10 | MRR | p50 ms | p95 ms | tokens/question (top 5) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    print(f"| BM25 (FTS5) | {bm25.at(5):.3f} | {bm25.at(10):.3f} | {bm25.mrr():.3f} | | | |")
    print(f"| qwenmem recall | {fused.at(5):.3f} | {fused.at(10):.3f} | {fused.mrr():.3f} | "
          f"{statistics.median(lat):.0f} | {lat[int(0.95 * (len(lat) - 1))]:.0f} | "
          f"{statistics.median(stats['tokens']):.0f} |")
    print(f"\nR@5 ratio to BM25: {fused.at(5) / bm25.at(5):.2f}x")
    # Counts, so runs over parts of the ten (the tuned half, the other) add up exactly.
    print("counts: " + json.dumps({
        "questions": len(fused.ranks),
        "ranks": [r or 0 for r in fused.ranks],
        "bm25_ranks": [r or 0 for r in bm25.ranks],
        "latency_ms": [round(x, 1) for x in stats["latency"]],
        "tokens": stats["tokens"],
        "held": sum(stats["held"]),
        "turns": sum(stats["turns"]),
    }))


def summed(outputs: list[str]) -> None:
    """The table of several runs (their ``counts:`` lines), as if one run."""
    fused, bm25 = Tally(), Tally()
    stats: dict[str, list[float]] = {"latency": [], "tokens": [], "held": [], "turns": []}
    for output in outputs:
        for line in Path(output).read_text(encoding="utf-8").splitlines():
            if line.startswith("counts: "):
                counts = json.loads(line.removeprefix("counts: "))
                fused.ranks += [r or None for r in counts["ranks"]]
                bm25.ranks += [r or None for r in counts["bm25_ranks"]]
                stats["latency"] += counts["latency_ms"]
                stats["tokens"] += counts["tokens"]
                stats["held"].append(counts.get("held", 0))
                stats["turns"].append(counts.get("turns", 0))
    if not fused.ranks:
        sys.exit("no counts: line in " + ", ".join(outputs))
    report([Path(o) for o in outputs], fused, bm25, stats, "as run")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", nargs="?", default="",
                        help="the directory of LoCoMo's conversation JSON files")
    parser.add_argument("--sum", nargs="+", default=[], metavar="FILE",
                        help="print the table of these runs' outputs together")
    parser.add_argument("--conversations", type=int, default=10)
    parser.add_argument("--embedding", default="auto", choices=("auto", "hash"))
    parser.add_argument("--only", default="", help="these conversations (file stems, comma-separated)")
    parser.add_argument("--import-only", action="store_true")
    parser.add_argument("--language", default="on", choices=("on", "off"),
                        help="recall's dense channel without the language subspace (memory/language_space.py)")
    parser.add_argument("--reverse", action="store_true")
    parser.add_argument("--homes", default="", help="keep each conversation's home here and "
                        "reuse its import on the next run (the same rows for two builds)")
    args = parser.parse_args(argv)
    if args.import_only and not args.homes:
        parser.error("--import-only keeps the imports in --homes DIR")
    if args.sum:
        summed(args.sum)
    elif args.dir:
        asyncio.run(run(args))
    else:
        parser.error("DIR (or --sum FILE...) is required")
    return 0


if __name__ == "__main__":
    sys.exit(main())
