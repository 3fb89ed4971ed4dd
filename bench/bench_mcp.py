"""`qwenmem mcp` as a client sees it: start to first answer, and search_memory latency.

Each run spawns the real server (`python -m qwenmem_tui mcp`) with the official SDK's
stdio client on a temporary home, as Claude Code does once per session, and times:

- start -> initialized, and start -> the first tool answer (`list_memories`, which
  reads rows only) and -> the first `search_memory` answer (which needs the embedder
  and the vector index);
- `search_memory` round trips (protocol included) at N memories, p50/p95.

Memories are seeded with one bulk insert (random unit vectors under the embedder's id,
real words for the lexical channel), as bench_recall.py does, so 10k load in seconds.
Asserts nothing; targets (issue 27): first tool answer < 1.5 s, search p50 < 50 ms at 10k.

    .venv/bin/python bench/bench_mcp.py [--memories 10000] [--searches 50] [--starts 3]
        [--embedding auto|hash]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_memory import _pct  # same directory: run as a script
from bench_recall import insert_rows
from mcp.client import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from qwenmem_tui.config import load_settings
from qwenmem_tui.memory.model import DAY, GLOBAL_SCOPE, content_hash
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.paths import Paths, project_id

REPO = Path(__file__).resolve().parent.parent
USER = "bench"


def _home(tmp: Path, embedding: str) -> Path:
    home = tmp / "home"
    home.mkdir(mode=0o700)
    config = home / "config.toml"
    config.write_text(
        '[llm]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "none"\n'
        f'[general]\nuser = "{USER}"\n[memory]\nembedding = "{embedding}"\n',
        encoding="utf-8",
    )
    config.chmod(0o600)
    return home


async def _seed(home: Path, project: Path, n: int) -> None:
    paths = Paths(home)
    settings = load_settings(paths.config_file)
    service = await MemoryService.open(settings, paths)  # the schema, and the embedder's id
    embedder_id = service.embedder.id
    dim = (await service.embedder.embed_queries(["dimension"])).shape[1]
    await service.close()
    rng = random.Random(n)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9))) for _ in range(3000)]
    vectors = np.random.default_rng(n).standard_normal((n, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    now, scope = time.time(), project_id(project)
    rows = []
    for i in range(n):
        category = ("user", "feedback", "project", "reference")[i % 4]
        value = " ".join(rng.choice(words) for _ in range(rng.randint(6, 16)))
        rows.append(
            (USER, GLOBAL_SCOPE if i % 4 < 2 else scope, category, f"fact_{i}", value, now, now,
             now + 365 * DAY, content_hash(value), embedder_id, vectors[i].astype("<f4").tobytes())
        )
    await insert_rows(paths, rows)
    # The index is a cache: build it once, as the user's first session would.
    service = await MemoryService.open(settings, paths)
    await service.close()
    globals()["_WORDS"] = words


def _params(home: Path, project: Path) -> StdioServerParameters:
    env = {**os.environ, "QWENMEM_HOME": str(home), "PYTHONPATH": str(REPO), "QWENMEM_DEBUG_LOG_FILE": "0"}
    return StdioServerParameters(
        command=sys.executable, args=["-m", "qwenmem_tui", "mcp"], env=env, cwd=project
    )


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def _start(home: Path, project: Path) -> tuple[float, float, float, float]:
    """Seconds from spawn to: initialized, first list_memories answer, first search
    answer; and the CPU seconds the server used in all (it has exited by then)."""
    cpu = _children_cpu()
    started = time.perf_counter()
    with open(os.devnull, "w") as errlog:
        async with stdio_client(_params(home, project), errlog=errlog) as (read, write):
            async with ClientSession(read, write, read_timeout_seconds=120) as session:
                await session.initialize()
                ready = time.perf_counter() - started
                await session.call_tool("list_memories", {"category": "reference"})
                listed = time.perf_counter() - started
                await session.call_tool("search_memory", {"query": "deploy script location"})
                searched = time.perf_counter() - started
    return ready, listed, searched, _children_cpu() - cpu


async def _searches(home: Path, project: Path, count: int) -> list[float]:
    rng = random.Random(7)
    words = globals().get("_WORDS") or ["deploy"]
    samples = []
    with open(os.devnull, "w") as errlog:
        async with stdio_client(_params(home, project), errlog=errlog) as (read, write):
            async with ClientSession(read, write, read_timeout_seconds=120) as session:
                await session.initialize()
                await session.call_tool("search_memory", {"query": "warm up"})
                for _ in range(count):
                    query = " ".join(rng.choice(words) for _ in range(4))
                    t0 = time.perf_counter()
                    result = await session.call_tool("search_memory", {"query": query, "k": 5})
                    samples.append((time.perf_counter() - t0) * 1000)
                    assert not result.is_error, result.content
    return samples


async def run(memories: int, searches: int, starts: int, embedding: str) -> None:
    with tempfile.TemporaryDirectory(prefix="qwenmem-bench-mcp-") as tmp:
        home = _home(Path(tmp), embedding)
        project = Path(tmp) / "project"
        (project / ".git").mkdir(parents=True)
        empty = [await _start(home, project) for _ in range(starts)]
        await _seed(home, project, memories)
        full = [await _start(home, project) for _ in range(starts)]
        samples = await _searches(home, project, searches)
    print(f"embedder setting: {embedding}; medians of {starts} starts")
    print(f"{'memories':>9} {'initialized':>12} {'first list':>11} {'first search':>13} {'server CPU':>11}")
    for label, runs in (("0", empty), (f"{memories:,}", full)):
        ready, listed, searched, cpu = (statistics.median(r[i] for r in runs) for i in range(4))
        print(f"{label:>9} {ready:>10.2f} s {listed:>9.2f} s {searched:>11.2f} s {cpu:>9.2f} s")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} (on {os.cpu_count()} CPUs)")
    print(
        f"search_memory at {memories:,} memories (stdio round trip, {len(samples)} queries): "
        f"p50 {statistics.median(samples):.1f} ms, p95 {_pct(samples, 0.95):.1f} ms"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--searches", type=int, default=30)
    parser.add_argument("--starts", type=int, default=3)
    parser.add_argument("--embedding", default="auto", choices=["auto", "hash"])
    args = parser.parse_args(argv)
    asyncio.run(run(args.memories, args.searches, args.starts, args.embedding))
    return 0


if __name__ == "__main__":
    sys.exit(main())
