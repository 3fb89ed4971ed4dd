"""TUI benchmarks: startup, streaming render cost, resuming a long session.

Each scenario runs headless (`App.run_test`) in its own child process so that RSS
figures are not polluted by the other scenarios. Prints a table; asserts nothing.

    .venv/bin/python bench/bench_tui.py
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from qwenmem_tui.config import Settings, load_settings
from qwenmem_tui.llm.client import LLMClient, StreamFinished
from qwenmem_tui.paths import Paths, project_id
from qwenmem_tui.storage.database import Database
from qwenmem_tui.storage.sessions import Item, SessionStore
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply
from qwenmem_tui.tui.app import QwenmemApp, create_app
from qwenmem_tui.tui.screens.chat import ChatScreen
from qwenmem_tui.tui.widgets.items import AssistantItem
from qwenmem_tui.tui.widgets.prompt import PromptInput

SIZE = (120, 40)
STARTUP_RUNS = 5
REPLY_TOKENS = 20_000
CHARS_PER_TOKEN = 4
RESUME_MESSAGES = 5_000


def rss_mib() -> float:
    """Resident set size now (Linux), in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def long_reply(tokens: int) -> str:
    """Markdown of roughly `tokens` tokens: paragraphs, lists and code fences."""
    block = (
        "## Section {n}\n\n"
        "The **storage layer** keeps every message in SQLite, with `WAL` enabled so that "
        "readers never block the writer. Each item is committed as it completes.\n\n"
        "- first point about item {n}\n- second point, with `inline code`\n\n"
        "```python\ndef step_{n}(x: int) -> int:\n    return x * {n} + 1\n```\n\n"
    )
    parts: list[str] = []
    size = 0
    n = 0
    while size < tokens * CHARS_PER_TOKEN:
        part = block.format(n=n)
        parts.append(part)
        size += len(part)
        n += 1
    return "".join(parts)


def bench_settings(home: Path, fake: FakeOpenAI) -> Settings:
    env = {
        "QWENMEM_HOME": str(home),
        "QWENMEM_BASE_URL": fake.base_url,
        "QWENMEM_API_KEY": "sk-bench",
        "QWENMEM_MODEL": "bench-model",
    }
    return load_settings(None, env)


def make_app(home: Path, fake: FakeOpenAI, **kwargs: Any) -> QwenmemApp:
    project = home / "project"
    project.mkdir(exist_ok=True)
    return create_app(bench_settings(home, fake), Paths(home), cwd=project, extensions=(), **kwargs)


def chat_shown(app: QwenmemApp) -> bool:
    return isinstance(app.screen, ChatScreen)


def conversation_shown(app: QwenmemApp) -> bool:
    return chat_shown(app) and bool(app.screen.query(AssistantItem))


async def first_frame(app: QwenmemApp, ready: Callable[[QwenmemApp], bool]) -> tuple[float, float]:
    """Seconds from run_test until a frame is composed with `ready(app)` true; RSS then.

    `App._display` is where every composed frame goes (headless drivers drop it), so
    wrapping it times the first frame the user would see, not the end of all work.
    """
    painted = asyncio.Event()
    seconds = float("nan")
    display = app._display

    def timed_display(screen: Any, renderable: Any) -> None:
        nonlocal seconds
        display(screen, renderable)
        if renderable is not None and not painted.is_set() and ready(app):
            seconds = time.perf_counter() - start
            painted.set()

    app._display = timed_display  # type: ignore[method-assign]
    start = time.perf_counter()
    async with app.run_test(size=SIZE) as pilot:
        await asyncio.wait_for(painted.wait(), 60)
        rss = rss_mib()
        await pilot.pause()
    return seconds, rss


# -- scenarios (each runs in a child process) --------------------------------------------


async def scenario_startup(home: Path) -> dict[str, float]:
    with FakeOpenAI() as fake:
        times = []
        for _ in range(STARTUP_RUNS):
            seconds, rss = await first_frame(make_app(home, fake), chat_shown)
            times.append(seconds)
    return {"median_s": statistics.median(times), "min_s": min(times), "rss_mib": rss}


async def scenario_stream(home: Path) -> dict[str, float]:
    text = long_reply(REPLY_TOKENS)
    with FakeOpenAI() as fake:
        settings = bench_settings(home, fake)
        # Raw: the same stream drained by the client alone.
        fake.script(Reply(text, chunk_size=CHARS_PER_TOKEN, usage=True))
        client = LLMClient.from_settings(settings)
        start = time.perf_counter()
        async for event in client.stream_chat([{"role": "user", "content": "go"}]):
            if isinstance(event, StreamFinished):
                assert len(event.completion.content) == len(text)
        raw = time.perf_counter() - start
        await client.aclose()

        fake.script(Reply(text, chunk_size=CHARS_PER_TOKEN, usage=True))
        app = make_app(home, fake)
        async with app.run_test(size=SIZE) as pilot:
            while not isinstance(app.screen, ChatScreen):
                await pilot.pause()
            prompt = app.screen.query_one(PromptInput)
            prompt.insert("go")
            start = time.perf_counter()
            await pilot.press("enter")
            await app.workers.wait_for_complete()
            await pilot.pause()
            ui = time.perf_counter() - start
            rss = rss_mib()
    return {"raw_s": raw, "ui_s": ui, "ratio": ui / raw, "rss_mib": rss, "chars": len(text)}


async def seed_long_session(home: Path, count: int) -> None:
    paths = Paths(home)
    paths.ensure()
    project = home / "project"
    project.mkdir(exist_ok=True)
    db = await Database.open(paths.db_file)
    try:
        store = SessionStore(db)
        info = await store.create_session(project_id(project), "A very long session")
        reply = long_reply(60)  # ~60 tokens of markdown per reply
        for n in range(count // 2):
            question = f"Question number {n}: how does part {n} work?"
            for type_, content in (("user", question), ("assistant", reply)):
                role = "user" if type_ == "user" else "assistant"
                await store.add_item(
                    Item(None, info.id, type_, content, message={"role": role, "content": content})
                )
    finally:
        await db.close()


async def scenario_resume(home: Path) -> dict[str, float]:
    start = time.perf_counter()
    await seed_long_session(home, RESUME_MESSAGES)
    seeded = time.perf_counter() - start
    with FakeOpenAI() as fake:
        baseline = rss_mib()
        seconds, rss = await first_frame(make_app(home, fake, resume=True), conversation_shown)
    return {"first_frame_s": seconds, "rss_mib": rss, "rss_before_mib": baseline, "seed_s": seeded}


SCENARIOS: dict[str, Callable[[Path], Any]] = {
    "startup": scenario_startup,
    "stream": scenario_stream,
    "resume": scenario_resume,
}


def run_child(name: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="qwenmem-bench-") as tmp:
        env = {**os.environ, "QWENMEM_DEBUG_LOG_FILE": "0"}
        done = subprocess.run(
            [sys.executable, __file__, "--scenario", name, "--home", tmp],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
    if done.returncode != 0:
        raise RuntimeError(f"scenario {name} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(results: dict[str, dict[str, float]]) -> str:
    startup, stream, resume = results["startup"], results["stream"], results["resume"]
    rows = [
        (
            "startup to first frame (median of 5)",
            f"{startup['median_s'] * 1000:.0f} ms",
            f"RSS {startup['rss_mib']:.0f} MiB",
        ),
        (
            f"raw stream of a {REPLY_TOKENS // 1000}k-token reply",
            f"{stream['raw_s'] * 1000:.0f} ms",
            f"{stream['chars']:.0f} chars",
        ),
        (
            "same reply rendered in the TUI",
            f"{stream['ui_s'] * 1000:.0f} ms",
            f"ratio {stream['ratio']:.2f}x",
        ),
        (
            f"resume {RESUME_MESSAGES:,}-message session to first frame",
            f"{resume['first_frame_s'] * 1000:.0f} ms",
            f"RSS {resume['rss_mib']:.0f} MiB",
        ),
    ]
    width = max(len(row[0]) for row in rows)
    lines = [f"{'benchmark'.ljust(width)}  {'time':>10}  note", "-" * (width + 30)]
    lines += [f"{name.ljust(width)}  {value:>10}  {note}" for name, value, note in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=sorted(SCENARIOS))
    parser.add_argument("--home", type=Path)
    args = parser.parse_args(argv)
    if args.scenario:
        result = asyncio.run(SCENARIOS[args.scenario](args.home))
        print(json.dumps(result))
        return 0
    results = {name: run_child(name) for name in SCENARIOS}
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
