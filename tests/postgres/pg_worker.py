"""A second qwenmem process for the cross-process tests (and the benchmark).

    python pg_worker.py write HOME DSN NAME N      save N facts, then recall the other writer's
    python pg_worker.py watch HOME DSN             print a recall after every change it hears

It talks over stdin/stdout, one line (JSON where it carries data) at a time, so the
parent waits on lines instead of sleeping.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from qwenmem_tui.config import Settings

from qwenmem_tui.features import registry  # noqa: F401 -- registers the features' settings
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.paths import Paths
from qwenmem_tui.memory.model import WriteRequest

PROJECT = "/work/alpha-project"


def _settings(dsn: str) -> Settings:
    return Settings.model_validate({"general": {"user": "ana"}, "memory": {"store": "postgres", "postgres_dsn": dsn, "embedding": "hash", "postgres_vector_search": False}})


async def _open(home: str, dsn: str) -> MemoryService:
    paths = Paths(Path(home))
    paths.ensure()
    return await MemoryService.open(_settings(dsn), paths)


async def _line() -> str:
    return await asyncio.to_thread(sys.stdin.readline)


async def write(home: str, dsn: str, name: str, n: int) -> None:
    svc = await _open(home, dsn)
    print("ready", flush=True)
    await _line()  # the parent releases both writers at once
    for i in range(n):
        await svc.save(
            WriteRequest(
                "project",
                f"{name}_fact_{i}",
                f"{name} wrote fact number {i}",
                origin="tool",
                project=PROJECT,
            )
        )
    for i in range(10):  # a key both writers keep overwriting: one row may stay active
        await svc.save(
            WriteRequest(
                "project",
                "shared_key",
                f"{name} value {i}",
                origin="tool",
                project=PROJECT,
            )
        )
    print("written", flush=True)
    other = (await _line()).strip()
    hit = await svc.recall(f"{other} wrote fact number 7", project=PROJECT, k=1, record=False)
    print(json.dumps({"keys": [m.key for m in hit.memories], "index": len(svc.index)}), flush=True)
    await svc.close()


async def watch(home: str, dsn: str) -> None:
    svc = await _open(home, dsn)
    tasks: set[asyncio.Task[None]] = set()

    async def report(generation: int) -> None:
        result = await svc.recall("what is my current project?", project=PROJECT, min_score=-1, record=False)
        print(
            json.dumps(
                {
                    "generation": generation,
                    "at": time.time(),
                    "values": [m.value for m in result.memories],
                    "index_ids": svc.index.ids().tolist(),
                }
            ),
            flush=True,
        )

    def changed(generation: int) -> None:
        task = asyncio.get_running_loop().create_task(report(generation))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    svc.change_listeners.append(changed)
    print(json.dumps({"ready": svc.index.generation}), flush=True)
    await _line()  # runs until the parent closes stdin
    await svc.close()


if __name__ == "__main__":
    command, home, dsn, *rest = sys.argv[1:]
    if command == "write":
        asyncio.run(write(home, dsn, rest[0], int(rest[1])))
    else:
        asyncio.run(watch(home, dsn))
