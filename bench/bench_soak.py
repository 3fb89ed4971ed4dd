"""A day in one session (issue 41): 5,000 turns of one real chat against the fake
server, with memory writes and forgets, compaction, recaps and resumes
(tests/reliability/soak.py says what each turn does).

Prints a row every `--every` turns: RSS, open fds, threads, asyncio tasks, database
and index size, turn time p50/p95 (the fake answers at once: the time is qwenmem's
own; its CPU beside it, which the machine's load does not change), and the chat's items
held in memory beside those stored. Then the goals: RSS and turn CPU within 20 % from
turn 500 to the end, no growth in fds, threads or tasks, a bounded window held, and
every message and memory accounted for; exits 1 when one is missed.

    .venv/bin/python bench/bench_soak.py [--turns 5000] [--every 500]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "reliability"))

from soak import POOL_MAX, Checkpoint, SoakReport, soak  # noqa: E402


def row(point: Checkpoint) -> None:
    print(f"| {point.turn} | {point.rss_mb:.1f} | {point.fds} | {point.threads}+{point.pool_threads} | {point.tasks} "
          f"| {point.db_kb / 1024:.1f} | {point.index_kb:.0f} | {point.turn_ms_p50:.1f} | {point.turn_ms_p95:.1f} "
          f"| {point.turn_cpu_ms_p50:.1f} | {point.held} / {point.stored} |",
          flush=True)


def goals(report: SoakReport, turns: int) -> list[tuple[str, bool]]:
    warm = next((p for p in report.checkpoints if p.turn >= 500), report.checkpoints[0])
    last = report.checkpoints[-1]
    return [
        (f"RSS {warm.rss_mb:.0f} -> {last.rss_mb:.0f} MB (<= +20 %)", last.rss_mb <= warm.rss_mb * 1.2),
        # CPU, not wall time: on a shared machine the wall time follows the load.
        (f"turn CPU p50 {warm.turn_cpu_ms_p50:.1f} -> {last.turn_cpu_ms_p50:.1f} ms (<= +20 %; wall p50 "
         f"{warm.turn_ms_p50:.0f} -> {last.turn_ms_p50:.0f} ms)", last.turn_cpu_ms_p50 <= warm.turn_cpu_ms_p50 * 1.2),
        (f"items held in memory {last.held} of {last.stored} stored", last.held < last.stored // 10),
        (f"fds/threads/tasks {warm.fds}/{warm.threads}/{warm.tasks} -> {last.fds}/{last.threads}/{last.tasks}",
         (last.fds, last.threads, last.tasks) <= (warm.fds, warm.threads, warm.tasks)),
        (f"default executor threads {last.pool_threads} (<= {POOL_MAX})", last.pool_threads <= POOL_MAX),
        (f"user messages stored {report.user_items}/{turns}", report.user_items == turns),
        (f"memories written {report.writes}/{turns * 2 // 5}, forgotten {report.memories_deleted}/{report.forgets}",
         report.writes == turns * 2 // 5 and report.memories_deleted == report.forgets == report.writes),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=5000)
    parser.add_argument("--every", type=int, default=500)
    args = parser.parse_args(argv)
    print("| turn | RSS MB | fds | threads (+pool) | tasks | DB MB | index KB | turn p50 ms | turn p95 ms "
          "| turn CPU p50 ms | items held / stored |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|", flush=True)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="qwenmem-soak-") as workdir:
        report = asyncio.run(soak(Path(workdir), turns=args.turns, every=args.every, on_checkpoint=row))
    print(f"\n{report.turns} turns in {time.perf_counter() - started:.0f} s: {report.writes} memory writes, "
          f"{report.forgets} forgets, {report.compactions} compactions, {report.recaps} recaps, "
          f"{report.resumes} resumes")
    missed = 0
    for text, met in goals(report, args.turns):
        print(f"{'ok  ' if met else 'MISS'} {text}")
        missed += not met
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
