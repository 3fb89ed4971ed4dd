"""Compaction benchmark: prompt tokens per request over a long session, with and without.

A scripted session (default 500 turns: questions, long answers, a file read every
fourth turn, a decision every 50 turns) runs through the real chat loop against the
fake server with the compaction hook (default settings: 70 % of a 32k window, last 6
turns kept) and a deterministic fake summariser on the fast model; each request is
measured as sent and as the uncompacted history it replaces (see `Meter`).
Writes bench/out/compaction_tokens.csv (one row per request, plot-ready) and prints a
table every 50 turns plus compaction times. Tokens are the local estimate the hook
uses (about four characters a token). Asserts nothing.

    .venv/bin/python bench/bench_compaction.py [--turns 500]
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import re
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qwenmem_tui.chat.session import BaseQueryHook, ChatSession
from qwenmem_tui.chat.tools import builtin_tools
from qwenmem_tui.chat.turns import TurnKind
from qwenmem_tui.config import LLMSettings, Settings
from qwenmem_tui.features.compaction.gauge import estimate_tokens
from qwenmem_tui.features.compaction.hook import CompactionHook
from qwenmem_tui.llm.client import LLMClient
from qwenmem_tui.storage.database import Database
from qwenmem_tui.storage.sessions import SessionStore
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply, ToolCallSpec

OUT = Path(__file__).resolve().parent / "out" / "compaction_tokens.csv"
FAST = "test-fast"
ANSWER = " ".join(f"Step {k}: adjust the handler and rerun the failing test." for k in range(18))


def user_text(turn: int) -> str:
    if turn % 50 == 10:
        return f"Decision: module {turn} keeps the v{turn // 50} wire format."
    if turn % 4 == 3:
        return f"Turn {turn}: please read the readme and check the build steps."
    return f"Turn {turn}: why does test_case_{turn} fail after the refactor of parser_{turn % 7}?"


def responder(body: dict[str, Any]) -> Reply:
    messages = body["messages"]
    if body["model"] == FAST:
        prompt = messages[-1]["content"]
        turns = re.findall(r"\[turn (\d+)\]\nuser: ([^\n]*)", prompt)
        decided = [(int(n), t) for n, t in turns if t.startswith("Decision:")]
        summary = "The user is fixing failing parser tests after a refactor; " + ", ".join(
            t.split(":")[0] for _, t in turns[-8:]
        )
        return Reply(
            json.dumps(
                {
                    "summary": summary,
                    "decisions": [t for _, t in decided],
                    "pinned_turns": [n for n, _ in decided],
                }
            ),
            chunk_size=400,
        )
    last = messages[-1]
    if last["role"] == "user" and "read the readme" in str(last["content"]):
        return Reply(tool_calls=[ToolCallSpec("read_file", {"path": "README.md"})])
    return Reply(ANSWER, chunk_size=400)


@dataclass
class Meter(BaseQueryHook):
    """Last hook: the size of every request as sent and as it would be uncompacted.

    The fake model's answers do not depend on the prompt, so the session without
    compaction sends exactly the full stored history each time: measuring that here
    gives the baseline column without a second (very slow, ~150 s) 500-turn run.
    """

    rows: list[tuple[int, str, int, int, bool]] = field(default_factory=list)
    turn: int = 0
    decisions_made: list[str] = field(default_factory=list)

    async def before_request(
        self, session: ChatSession, kind: TurnKind, messages: list[dict]
    ) -> list[dict]:
        text = "\n".join(str(m.get("content")) for m in messages)
        complete = all(d in text for d in self.decisions_made)
        full = [{"role": "system", "content": session.system_prompt}]
        full += [i.message for i in session.view_items() if i.message is not None]
        sent = estimate_tokens(messages)
        self.rows.append((self.turn, kind.value, estimate_tokens(full), sent, complete))
        return messages


async def run_session(turns: int, fake: FakeOpenAI, root: Path, llm: LLMClient) -> tuple[Meter, list[float]]:
    settings = Settings(llm=LLMSettings(base_url=fake.base_url, model="test-model", fast_model=FAST))
    db = await Database.open(root / "bench.db")
    store = SessionStore(db)
    meter = Meter()
    hook = CompactionHook(llm, settings)
    session = ChatSession(
        info=await store.create_session("bench"),
        store=store,
        llm=llm,
        tools=builtin_tools(root),
        settings=settings,
        project_root=root,
        hooks=[hook, meter],
    )
    seconds: list[float] = []
    try:
        for turn in range(turns):
            meter.turn = turn
            text = user_text(turn)
            last = hook.last
            async for _ in session.run_query(text):
                pass
            if text.startswith("Decision:"):
                meter.decisions_made.append(text)
            if hook.last is not last and hook.last is not None and hook.last.status == "compacted":
                seconds.append(hook.last.seconds)
            fake.clear()  # the fake keeps every request body
    finally:
        await db.close()
    return meter, seconds


async def main_async(turns: int) -> None:
    with FakeOpenAI() as fake, tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "README.md").write_text("# Build\n\n" + "Run make, then make test.\n" * 160)
        fake.responder = responder
        llm = LLMClient(base_url=fake.base_url, api_key="sk-bench", model="test-model", fast_model=FAST)
        try:
            started = time.perf_counter()
            meter, seconds = await run_session(turns, fake, root, llm)
            wall = time.perf_counter() - started
        finally:
            await llm.aclose()
    window = 32768
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["request", "turn", "kind", "tokens_without", "tokens_with", "decisions_complete"])
        for i, (turn, kind, without, with_, complete) in enumerate(meter.rows):
            writer.writerow([i, turn, kind, without, with_, int(complete)])

    print(f"\nPrompt tokens per request, {turns} turns, window {window}, threshold 70 % "
          f"({int(window * 0.7)})")
    print(f"{'turn':>6}{'without':>10}{'with':>8}{'% window':>10}")
    peaks: dict[int, tuple[int, int]] = {}
    for turn, _, without, with_, _ in meter.rows:
        old = peaks.get(turn, (0, 0))
        peaks[turn] = (max(old[0], without), max(old[1], with_))
    for turn in sorted(t for t in peaks if t % 50 == 49 or t == turns - 1):
        without, with_ = peaks[turn]
        print(f"{turn + 1:>6}{without:>10}{with_:>8}{with_ / window:>10.0%}")
    peak = max(row[3] for row in meter.rows)
    overflowing = sum(1 for row in meter.rows if row[2] > window)
    print(f"\nrequests: {len(meter.rows)}; peak with compaction {peak} tokens "
          f"({peak / window:.0%} of the window); without: {overflowing} requests over the window")
    print(f"every request carried every decision made so far: {all(row[4] for row in meter.rows)}")
    if seconds:
        print(f"compactions: {len(seconds)}, time median {statistics.median(seconds) * 1000:.0f} ms, "
              f"max {max(seconds) * 1000:.0f} ms (fake fast model, local HTTP)")
    print(f"session wall time: {wall:.1f} s")
    print(f"CSV: {OUT}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=500)
    args = parser.parse_args(argv)
    asyncio.run(main_async(args.turns))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
