"""`qwenmem acp` as an editor sees it: spawn to the first reply over ACP.

Each run spawns the real agent (`python -m qwenmem_tui acp`) with the official
`agent-client-protocol` SDK's client (`spawn_agent_process`), on a temporary home whose
model is the fake OpenAI server (replies at once), with a few memories to recall, and
times from the spawn:

- `initialize` answered (the handshake);
- `session/new` answered (the project's runtime open: database, memory, tools);
- the first `agent_message_chunk` of the first prompt's reply;
- the prompt answered (`end_turn`).

and the agent's CPU seconds at each point (read from /proc: wall times on a loaded
machine measure the machine, CPU the agent). Prints the median and the spread of
`--starts` runs. Asserts nothing.

    .venv/bin/python bench/bench_acp.py [--starts 5] [--embedding hash|auto]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from acp import PROTOCOL_VERSION, spawn_agent_process, text_block
from acp.schema import AgentMessageChunk, ClientCapabilities, Implementation

from qwenmem_tui.config import load_settings
from qwenmem_tui.features import registry  # noqa: F401 - registers the features' config sections
from qwenmem_tui.memory.model import Origin, WriteRequest
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.paths import Paths, project_id
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply

REPO = Path(__file__).resolve().parent.parent
FACTS = (
    ("project", "test_command", "The integration tests run with make itest"),
    ("project", "deploy", "Deploys go through the staging host first"),
    ("user", "editor", "The user edits code in Zed"),
)


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) process `pid` has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class FirstChunk:
    """The bench's ACP client: notes when the first reply text arrives."""

    def __init__(self) -> None:
        self.first: float | None = None
        self.first_cpu = 0.0
        self.pid = 0

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if self.first is None and isinstance(update, AgentMessageChunk):
            self.first = time.perf_counter()
            self.first_cpu = process_cpu(self.pid)

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the bench calls no tool that asks")


def _home(tmp: Path, base_url: str, embedding: str) -> Path:
    home = tmp / "home"
    home.mkdir(mode=0o700)
    config = home / "config.toml"
    config.write_text(
        f'[llm]\nbase_url = "{base_url}"\napi_key = "sk-bench"\nmodel = "test-model"\n'
        f'session_titles = false\n[memory]\nembedding = "{embedding}"\nextraction = false\n',
        encoding="utf-8",
    )
    config.chmod(0o600)
    return home


async def _seed(home: Path, project: Path) -> None:
    paths = Paths(home)
    service = await MemoryService.open(load_settings(paths.config_file), paths)
    try:
        for category, key, value in FACTS:
            await service.save(
                WriteRequest(category, key, value, origin=Origin.USER, project=project_id(project))
            )
    finally:
        await service.close()


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def _run(
    home: Path, project: Path, question: str = "How do I run the tests?", repo: Path = REPO
) -> list[float]:
    """Seconds from spawn to: initialized, session created, first reply chunk, reply
    done; the agent's CPU seconds at the first three; its CPU in all (at its exit).
    `repo`: the checkout the agent runs."""
    env = {**os.environ, "QWENMEM_HOME": str(home), "PYTHONPATH": str(repo), "QWENMEM_DEBUG_LOG_FILE": "0"}
    client = FirstChunk()
    cpu = _children_cpu()
    started = time.perf_counter()
    with open(os.devnull, "wb") as errors:
        async with spawn_agent_process(
            client, sys.executable, "-m", "qwenmem_tui", "acp", env=env, cwd=project,
            transport_kwargs={"stderr": errors, "shutdown_timeout": 60},
        ) as (conn, process):
            client.pid = process.pid
            await conn.initialize(
                protocol_version=PROTOCOL_VERSION,
                client_capabilities=ClientCapabilities(),
                client_info=Implementation(name="bench", version="1"),
            )
            ready, ready_cpu = time.perf_counter() - started, process_cpu(process.pid)
            session = await conn.new_session(cwd=str(project))
            created, created_cpu = time.perf_counter() - started, process_cpu(process.pid)
            await conn.prompt(session_id=session.session_id, prompt=[text_block(question)])
            done = time.perf_counter() - started
    assert client.first is not None
    first = client.first - started
    return [ready, created, first, done, ready_cpu, created_cpu, client.first_cpu, _children_cpu() - cpu]


def _line(name: str, values: list[float]) -> str:
    return f"{name:<22} median {statistics.median(values):6.2f} s   min {min(values):6.2f}   max {max(values):6.2f}"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--embedding", choices=("hash", "auto"), default="hash")
    args = parser.parse_args()
    with FakeOpenAI() as fake, tempfile.TemporaryDirectory() as tmp:
        fake.responder = lambda body: Reply("Run make itest.")
        root = Path(tmp)
        project = root / "project"
        (project / ".git").mkdir(parents=True)
        home = _home(root, fake.base_url, args.embedding)
        os.environ["QWENMEM_HOME"] = str(home)
        await _seed(home, project)
        runs = [await _run(home, project) for _ in range(args.starts)]
    columns = list(zip(*runs, strict=True))
    print(f"qwenmem acp, {args.starts} starts, embedding {args.embedding}, load {os.getloadavg()[0]:.1f}")
    for name, values in zip(
        (
            "initialized",
            "session/new answered",
            "first reply chunk",
            "prompt answered",
            "CPU at initialized",
            "CPU at session/new",
            "CPU at first chunk",
            "CPU in all (to exit)",
        ),
        columns,
        strict=True,
    ):
        print(_line(name, list(values)))


if __name__ == "__main__":
    asyncio.run(main())
