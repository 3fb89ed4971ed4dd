"""The daemon under load, then killed mid-stream 20 times (issue 41).

On loopback, against a real `qwenmem serve` whose model is the fake server: one
client for `--seconds`/6 (the baseline), then `--clients` concurrent asyncio clients
for `--seconds`, each mixing streamed prompts on its own session, streamed proxy
completions, memory searches and session listings; prints p50/p95 per operation for
both and the errors (goal: none, p95 near the single client's). Then `--kills` times:
clients stream prompts and the daemon gets SIGKILL mid-stream; after each, the next
start must be clean and hold every message whose prompt was answered in full.
Exits 1 on any error, lost message or unclean start.

    .venv/bin/python bench/bench_daemon_load.py [--clients 50] [--seconds 60] [--kills 20]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply  # noqa: E402
from tests.reliability.daemon_load import kill_cycles, load, summary  # noqa: E402
from tests.reliability.schema_fuzz import served_daemon, write_home  # noqa: E402


async def under_load(workdir: Path, clients: int, seconds: float) -> int:
    home, project = workdir / "home", workdir / "project"
    (project / ".git").mkdir(parents=True)
    with FakeOpenAI() as fake:
        fake.responder = lambda body: Reply("The build runs with make all.", chunk_size=6)
        write_home(home, fake.base_url)
        with served_daemon(home, project) as (url, _):
            alone = await load(url, clients=1, seconds=seconds / 6)
            many = await load(url, clients=clients, seconds=seconds)
    print(f"1 client, {seconds / 6:.0f} s: {alone.requests} requests, {len(alone.errors)} errors; {summary(alone)}")
    print(f"{clients} clients, {seconds:.0f} s: {many.requests} requests, {len(many.errors)} errors; {summary(many)}")
    for error in many.errors[:10]:
        print(f"  error: {error}")
    return len(alone.errors) + len(many.errors)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--kills", type=int, default=20)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="qwenmem-load-") as workdir:
        errors = asyncio.run(under_load(Path(workdir), args.clients, args.seconds))
    with tempfile.TemporaryDirectory(prefix="qwenmem-kill-") as workdir:
        report = asyncio.run(kill_cycles(Path(workdir), kills=args.kills, clients=10))
    print(f"kill -9 x{report.kills}: {report.committed} committed prompts, {len(report.lost)} lost, "
          f"{len(report.unclean_starts)} unclean starts")
    for line in (report.lost + report.unclean_starts)[:10]:
        print(f"  {line}")
    return 1 if errors or report.lost or report.unclean_starts else 0


if __name__ == "__main__":
    sys.exit(main())
