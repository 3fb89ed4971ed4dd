"""The daemon under load, then killed mid-stream (issue 41).

`load`: N asyncio clients on loopback against a real `qwenmem serve`, each on its own
session, mixing streamed prompts, proxied chat completions (streamed), memory searches
and session listings, for a number of rounds or seconds; every answer must be a 2xx.
`kill_cycles`: clients stream prompts while the daemon is killed with SIGKILL as soon
as some of them are mid-stream; after each kill the next daemon must start clean and
hold every message whose prompt was answered in full (its `done` event read).

Used by tests/reliability/test_daemon_load.py (short) and bench/bench_daemon_load.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply

from tests.reliability.schema_fuzz import TOKEN, served_daemon, write_home

AUTH = {"Authorization": f"Bearer {TOKEN}"}
ANSWER = "The build runs with make all; the tests run with make test on two workers."


@dataclass
class LoadReport:
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: list[str] = field(default_factory=list)

    def p95(self, op: str) -> float:
        values = sorted(self.latencies[op])
        return values[min(len(values) - 1, int(len(values) * 0.95))] * 1000 if values else 0.0

    @property
    def requests(self) -> int:
        return sum(len(v) for v in self.latencies.values())


async def _stream_prompt(client: httpx.AsyncClient, session: str, text: str, on_delta: asyncio.Event | None = None) -> bool:
    """One streamed prompt; True once its `done` event was read."""
    headers = {**AUTH, "Accept": "text/event-stream"}
    async with client.stream("POST", f"/session/{session}/prompt", json={"text": text}, headers=headers) as response:
        if response.status_code != 200:
            raise RuntimeError(f"prompt answered {response.status_code}")
        async for line in response.aiter_lines():
            if line.startswith("event: delta") and on_delta is not None:
                on_delta.set()
            if line.startswith("event: done"):
                return True
            if line.startswith("event: error"):
                raise RuntimeError("prompt ended with an error event")
    return False


async def _one_round(client: httpx.AsyncClient, session: str, n: int, report: LoadReport) -> None:
    operations = [
        ("prompt", lambda: _stream_prompt(client, session, f"round {n}: how do I build it?")),
        ("proxy", lambda: _proxy_stream(client)),
        ("search", lambda: client.post("/memory/search", json={"query": "build"}, headers=AUTH)),
        ("sessions", lambda: client.get("/sessions", headers=AUTH)),
    ]
    for name, operation in operations:
        started = time.perf_counter()
        try:
            result = await operation()
            if isinstance(result, httpx.Response) and not result.is_success:
                report.errors.append(f"{name}: {result.status_code} {result.text[:120]}")
            elif result is False:
                report.errors.append(f"{name}: the stream ended without done")
        except (httpx.HTTPError, RuntimeError) as exc:
            report.errors.append(f"{name}: {exc!r}"[:200])
        report.latencies[name].append(time.perf_counter() - started)


async def _proxy_stream(client: httpx.AsyncClient) -> bool:
    body = {"model": "load-model", "stream": True, "messages": [{"role": "user", "content": "how do I build it?"}]}
    async with client.stream("POST", "/v1/chat/completions", json=body, headers=AUTH) as response:
        if response.status_code != 200:
            raise RuntimeError(f"proxy answered {response.status_code}")
        return any([line == "data: [DONE]" async for line in response.aiter_lines()])


async def load(url: str, *, clients: int, rounds: int | None = None, seconds: float | None = None) -> LoadReport:
    """`clients` concurrent clients, each doing `rounds` rounds (or rounds until
    `seconds` have passed) of the four operations."""
    report = LoadReport()
    deadline = time.monotonic() + seconds if seconds is not None else None
    # One connection a client, under the daemon's 64 (beyond it the daemon closes idle
    # ones, and a request racing that close reads nothing); idle ones expire before the
    # daemon's 5 s keep-alive does, for the same race.
    limits = httpx.Limits(max_connections=clients, keepalive_expiry=2)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:

        async def one_client(index: int) -> None:
            created = await client.post("/session", json={"title": f"load {index}"}, headers=AUTH)
            session = created.json()["sessionId"]
            n = 0
            while (rounds is None or n < rounds) and (deadline is None or time.monotonic() < deadline):
                await _one_round(client, session, n, report)
                n += 1

        await asyncio.gather(*(one_client(i) for i in range(clients)))
    return report


@dataclass
class KillReport:
    kills: int = 0
    committed: int = 0
    lost: list[str] = field(default_factory=list)
    unclean_starts: list[str] = field(default_factory=list)


async def _kill_once(url: str, proc: object, sessions: list[str], committed: dict[str, list[str]], cycle: int) -> None:
    """Clients stream prompts; once each has finished one in this cycle and at least
    half are mid-stream again, SIGKILL."""
    streaming: set[int] = set()
    done_here = 0
    changed = asyncio.Event()
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:

        async def one_client(index: int, session: str) -> None:
            nonlocal done_here
            n = 0
            while True:
                text = f"cycle {cycle} client {index} prompt {n}"
                started = asyncio.Event()
                watcher = asyncio.create_task(started.wait())
                watcher.add_done_callback(lambda _: (streaming.add(index), changed.set()))
                try:
                    finished = await _stream_prompt(client, session, text, on_delta=started)
                finally:
                    watcher.cancel()
                    streaming.discard(index)
                if finished:
                    committed[session].append(text)
                    done_here += 1
                    changed.set()
                n += 1

        tasks = [asyncio.create_task(one_client(i, s)) for i, s in enumerate(sessions)]
        while not (done_here >= len(sessions) and len(streaming) >= max(1, len(sessions) // 2)):
            await changed.wait()
            changed.clear()
        os.kill(proc.pid, signal.SIGKILL)  # type: ignore[attr-defined]
        results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, httpx.HTTPError) for r in results), results  # cut, not failed


def integrity(db: Path) -> str:
    with sqlite3.connect(db) as conn:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]


async def kill_cycles(workdir: Path, *, kills: int, clients: int) -> KillReport:
    home, project = workdir / "home", workdir / "project"
    (project / ".git").mkdir(parents=True, exist_ok=True)
    report = KillReport()
    committed: dict[str, list[str]] = defaultdict(list)
    with FakeOpenAI() as fake:
        # Streams long enough to be cut: a chunk every 20 ms.
        fake.responder = lambda body: Reply(ANSWER, chunk_size=3, rate=50)
        write_home(home, fake.base_url)
        sessions: list[str] = []
        for cycle in range(kills + 1):
            with served_daemon(home, project) as (url, proc):
                async with httpx.AsyncClient(base_url=url, timeout=60) as client:
                    await _check_survivors(client, committed, report)
                    while len(sessions) < clients:
                        created = await client.post("/session", json={}, headers=AUTH)
                        sessions.append(created.json()["sessionId"])
                if cycle < kills:
                    await _kill_once(url, proc, sessions, committed, cycle)
                    proc.wait()
                    report.kills += 1
                assert proc.stderr is not None
            err = proc.stderr.read() if proc.stderr else ""
            if "Traceback" in err:
                report.unclean_starts.append(err[-500:])
            if (status := integrity(home / "qwenmem.db")) != "ok":
                report.unclean_starts.append(f"integrity_check: {status}")
    report.committed = sum(len(v) for v in committed.values())
    return report


async def _check_survivors(client: httpx.AsyncClient, committed: dict[str, list[str]], report: KillReport) -> None:
    """After a start: every committed prompt is in its session's stored messages."""
    for session, texts in committed.items():
        response = await client.get(f"/session/{session}/messages", headers=AUTH)
        if response.status_code != 200:
            report.lost.append(f"{session}: messages answered {response.status_code}")
            continue
        stored = json.dumps(response.json()["messages"])
        report.lost += [f"{session}: {text}" for text in texts if text not in stored]


def summary(report: LoadReport) -> str:
    return ", ".join(
        f"{op} p95 {report.p95(op):.0f} ms (n={len(v)}, p50 {statistics.median(v) * 1000:.0f} ms)"
        for op, v in sorted(report.latencies.items())
    )
