"""A bulk import's CPU a line beyond the embedder (issue 40 §1: goal ≤ 3 ms).

    .venv/bin/python bench/bench_import.py [--lines 1500] [--into 0,20000] [--runs 3]
                                           [--baseline DIR] [--quick]

In process, the free hash embedder (so what shows is the write path): `import_lines`
of ``--lines`` project notes shaped as bench_scale's (a service's attribute, a new
setting each: half restate an earlier one), into an empty store and into a store of
each ``--into`` size (built once per size by this build's import and copied for every
run). Its CPU a line, less the embedder's own on the same texts. ``--baseline DIR``:
a checkout of the build before, run alternately with this one (medians of
``--runs``); each run is its own process (``PYTHONPATH`` picks the build).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SUBJECTS = ("billing service", "staging host", "release branch", "nightly job", "frontend",
            "api", "auth module", "search index")  # fmt: skip
ATTRIBUTES = ("deploy target", "database", "owner", "test runner", "review rule", "port",
              "timeout", "cache size")  # fmt: skip


def notes(n: int, seed: int, first: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = []
    for i in range(first, first + n):
        subject, attribute = rng.choice(SUBJECTS), rng.choice(ATTRIBUTES)
        out.append(json.dumps({"category": "project", "value": f"The {subject}'s {attribute} is setting {i}",
                               "key": f"{subject}_{attribute}_{i}".replace(" ", "_")}))  # fmt: skip
    return out


async def one_run(lines: int, home: Path, seed_home: Path | None) -> tuple[float, float]:
    """(CPU ms a line of the import, the embedder's own ms a line) in this process."""
    from qwenmem_tui.config import Settings
    from qwenmem_tui.features import registry  # noqa: F401  (the settings sections)
    from qwenmem_tui.memory.backup import import_lines
    from qwenmem_tui.memory.model import embed_text
    from qwenmem_tui.memory.service import MemoryService
    from qwenmem_tui.paths import Paths

    settings = Settings.model_validate({"general": {"user": "bench"}, "memory": {"embedding": "hash"}})
    if seed_home is not None:
        shutil.copytree(seed_home, home, dirs_exist_ok=True)
    service = await MemoryService.open(settings, Paths(home))
    try:
        rows = notes(lines, lines)
        texts = [embed_text("project", json.loads(r)["key"], json.loads(r)["value"]) for r in rows]
        cpu = time.process_time()
        for start in range(0, lines, 128):
            await service.embedder.embed_passages(texts[start : start + 128])
        embedder = time.process_time() - cpu
        cpu = time.process_time()
        await import_lines(service, rows, project="/bench/import")
        spent = time.process_time() - cpu
    finally:
        await service.close()
    return spent / lines * 1000, embedder / lines * 1000


async def build_seed(size: int, home: Path) -> None:
    """A store of ``size`` notes, imported once by this build."""
    from qwenmem_tui.config import Settings
    from qwenmem_tui.features import registry  # noqa: F401
    from qwenmem_tui.memory.backup import import_lines
    from qwenmem_tui.memory.service import MemoryService
    from qwenmem_tui.paths import Paths

    settings = Settings.model_validate({"general": {"user": "bench"}, "memory": {"embedding": "hash"}})
    service = await MemoryService.open(settings, Paths(home))
    try:
        await import_lines(service, notes(size, 7, 100_000), project="/bench/import")
    finally:
        await service.close()


def measure(build: Path, lines: int, seed: Path | None) -> tuple[float, float]:
    args = [sys.executable, __file__, "--child", str(lines)] + ([str(seed)] if seed else [])
    env = {**os.environ, "PYTHONPATH": str(build)}
    done = subprocess.run(args, cwd=build, env=env, capture_output=True, text=True, check=True)
    total, embedder = done.stdout.split()[-2:]
    return float(total), float(embedder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=1500)
    parser.add_argument("--into", default="0,20000", help="store sizes imported into")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--baseline", type=Path, help="a checkout of the build before")
    parser.add_argument("--quick", action="store_true", help="from empty only, one run")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        with tempfile.TemporaryDirectory() as tmp:
            seed = Path(args.child[1]) if len(args.child) > 1 else None
            total, embedder = asyncio.run(one_run(int(args.child[0]), Path(tmp) / "home", seed))
        print(f"{total:.4f} {embedder:.4f}")
        return
    sizes = [0] if args.quick else [int(s) for s in args.into.split(",")]
    runs = 1 if args.quick else args.runs
    builds = [REPO] + ([args.baseline.resolve()] if args.baseline else [])
    print("| build | store | lines | CPU a line | embedder's own | beyond the embedder | runs |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            seed = None
            if size:
                seed = Path(tmp) / f"seed-{size}"
                asyncio.run(build_seed(size, seed))
            got: dict[Path, list[tuple[float, float]]] = {b: [] for b in builds}
            for _ in range(runs):  # alternated: the machine's load moves under both alike
                for build in builds:
                    got[build].append(measure(build, args.lines, seed))
            for build in builds:
                total = statistics.median(t for t, _ in got[build])
                embedder = statistics.median(e for _, e in got[build])
                beyond = sorted(t - e for t, e in got[build])
                print(f"| {'this' if build == REPO else build.name} | {size:,} | {args.lines:,} | {total:.2f} ms |"
                      f" {embedder:.2f} ms | **{statistics.median(beyond):.2f} ms** ({beyond[0]:.2f}–{beyond[-1]:.2f}) |"
                      f" {runs} |", flush=True)  # fmt: skip
    print(f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
