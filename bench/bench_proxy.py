"""What the OpenAI-compatible proxy of `qwenmem serve` adds to a streamed completion.

One run, the same fake upstream (scripted SSE at a fixed chunk rate) called two ways,
alternating request by request: directly, and through the proxy (the real daemon app on
uvicorn with `qwenmem serve`'s socket and settings). Times to the first content token
and to the end of the stream, p50/p95, for three proxy setups:

- memory off: forwarding alone;
- memory on, `initial_wait_ms = 0` (the default): recall starts, the request never waits;
- memory on, `initial_wait_ms = 200`: the request waits for recall (its real cost).

Memories: a few hundred seeded through the save path, the hash embedder (the embedder
is not what this measures; bench_recall.py is). Asserts nothing; target (issue 27):
< 5 ms added to the first token when recall is ready or skipped.

    .venv/bin/python bench/bench_proxy.py [--requests 40] [--memories 300]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import uvicorn
from bench_memory import _pct  # same directory: run as a script

from qwenmem_tui.config import Settings

from qwenmem_tui.features import registry  # noqa: F401 -- registers the features' settings
from qwenmem_tui.daemon.cli import bind_socket
from qwenmem_tui.daemon.connections import uvicorn_config
from qwenmem_tui.daemon.server import create_app
from qwenmem_tui.memory.model import Origin, WriteRequest
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.paths import Paths, project_id
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply

ANSWER = "The deploy script lives in tools/ship.sh; run it from the repository root. " * 3


@contextmanager
def serving(settings: Settings, paths: Paths, project: Path, features: set[str]) -> Iterator[str]:
    app = create_app(settings, paths, project_root=project, features=features)
    sock = bind_socket("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn_config(app))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        for _ in range(200):  # the lifespan opens memory before the first answer
            try:
                httpx.get(f"{url}/health", timeout=5)
                break
            except httpx.TransportError:
                time.sleep(0.05)
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def _stream(client: httpx.Client, url: str, question: str) -> tuple[float, float]:
    body = {"model": "test-model", "stream": True, "messages": [{"role": "user", "content": question}]}
    started = time.perf_counter()
    first = None
    with client.stream("POST", f"{url}/chat/completions", json=body) as response:
        for line in response.iter_lines():
            if first is None and line.startswith("data:") and '"content"' in line:
                first = time.perf_counter()
    end = time.perf_counter()
    return ((first or end) - started) * 1000, (end - started) * 1000


async def _seed(settings: Settings, paths: Paths, project: Path, n: int) -> None:
    service = await MemoryService.open(settings, paths)
    try:
        for i in range(n):
            await service.save(
                WriteRequest(
                    ("project", "reference")[i % 2],
                    f"fact_{i}",
                    f"Fact number {i}: module {i} handles deploy step {i % 17} of the pipeline",
                    origin=Origin.USER,
                    project=project_id(project),
                )
            )
    finally:
        await service.close()


def run(requests: int, memories: int) -> None:
    with FakeOpenAI() as fake, tempfile.TemporaryDirectory(prefix="qwenmem-bench-proxy-") as tmp:
        fake.responder = lambda body: Reply(ANSWER, chunk_size=8, rate=400.0)
        paths = Paths(Path(tmp) / "home")
        paths.ensure()
        project = Path(tmp) / "project"
        (project / ".git").mkdir(parents=True)
        settings = Settings.model_validate(
            {"llm": {"base_url": fake.base_url, "api_key": "bench-key", "model": "test-model"},
             "memory": {"embedding": "hash", "extraction": False}}
        )
        asyncio.run(_seed(settings, paths, project, memories))
        rows = []
        for label, features, wait in (
            ("memory off", set(), 0),
            ("memory on, initial_wait_ms 0", {"memory"}, 0),
            ("memory on, initial_wait_ms 200", {"memory"}, 200),
        ):
            settings.memory.initial_wait_ms = wait
            with serving(settings, paths, project, features) as url, httpx.Client(timeout=30) as client:
                direct, proxied = [], []
                for i in range(requests + 3):
                    question = f"Where does deploy step {i % 17} happen? ({i})"
                    a, b = _stream(client, fake.base_url, question), _stream(client, f"{url}/v1", question)
                    if i >= 3:  # warm-up: connections, caches
                        direct.append(a)
                        proxied.append(b)
            rows.append((label, direct, proxied))
        carried = sum(1 for body in fake.chat_requests if "<system-reminder>" in json.dumps(body))
    print(f"{requests} streamed requests per setup, alternating direct / proxied; {memories} memories")
    print(f"{'setup':<32} {'first token p50/p95 (direct -> proxy)':>40} {'total p50/p95 (direct -> proxy)':>36}")
    for label, direct, proxied in rows:
        cells = []
        for index in (0, 1):
            d = [s[index] for s in direct]
            p = [s[index] for s in proxied]
            cells.append(
                f"{statistics.median(d):5.1f}/{_pct(d, 0.95):5.1f} -> {statistics.median(p):5.1f}/{_pct(p, 0.95):5.1f} ms"
                f" (+{statistics.median(p) - statistics.median(d):.1f})"
            )
        print(f"{label:<32} {cells[0]:>40} {cells[1]:>36}")
    print(f"requests that carried a memory block upstream: {carried}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--memories", type=int, default=300)
    args = parser.parse_args(argv)
    run(args.requests, args.memories)
    return 0


if __name__ == "__main__":
    sys.exit(main())
