"""A team's memory in one PostgreSQL (issue 40 item 2): does a client grow with rows it cannot see?

    .venv/bin/python bench/bench_pg_scale.py [--sizes 10000,100000,1000000] [--quick] [--clients 20 --seconds 60]
        [--baseline CHECKOUT --rounds 2] [--team-only] [--team-modes pgvector]

One database holds N memories over 100 users and 50 projects, built directly with
COPY (real-shaped text, vectors of such text by the hash embedder moved a little: no
embedding per row). The client's user owns ~1/100 of them. For each size, and for
each way of searching vectors, a fresh client process measures what a user meets:
start (open the memory and load its vectors), the first recall, recall p50/p95, a
write's identity lookup (``nearest``), peak RSS — cold (a new machine, no local
cache) and warm (its second start). ``local``: every client keeps a FAISS copy of the
vectors it may see (servers without pgvector); ``pgvector``: the dense channel is a
query in the database. Then 20 clients (4 processes) write and recall at once for
60 s: every write must be found afterwards, recall p50/p95 is reported, and the CPU
the client processes and the server spent (every client uses the free hash
embedder, so the clients' CPU is qwenmem's own path, not a model's).
``--baseline CHECKOUT`` builds a second store alike for the build before (migrated
by its own code) and alternates its clients with ours, ``--rounds`` times per mode;
``--team-only`` skips the one-client measures.

Each figure is the median of 3 warm runs, the two modes alternated run by run; the
machine's load average is printed at the start and the end. The server is a
throwaway cluster from the dev extra's bundled PostgreSQL (it ships pgvector), or
QWENMEM_TEST_POSTGRES_DSN. Not part of `make test`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import asyncpg
import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests" / "postgres"))

from growth_plot import plot  # noqa: E402
from pgcluster import DSN_ENV, PostgresServer, pgvector_bin_dir  # noqa: E402

from qwenmem_tui.config import Settings  # noqa: E402

from qwenmem_tui.features import registry  # noqa: E402, F401 -- registers the features' settings
from qwenmem_tui.memory.embed import HashEmbedder  # noqa: E402
from qwenmem_tui.memory.model import DAY, WriteRequest, content_hash, embed_text  # noqa: E402
from qwenmem_tui.memory.postgres import vector_search as pgvector  # noqa: E402
from qwenmem_tui.memory.service import MemoryService  # noqa: E402
from qwenmem_tui.paths import Paths  # noqa: E402

USERS = 100
PROJECTS = 50
CLIENT_USER = "u007"
CLIENT_PROJECT = "/team/p7"
SUBJECTS = ("Ana", "the billing service", "Carol", "the staging host", "my sister", "the API",
            "Diego", "the release branch", "Mei", "the nightly job", "Olu", "the frontend")  # fmt: skip
ATTRIBUTES = ("home city", "editor", "deploy target", "manager", "favourite language",
              "on-call day", "database", "timezone", "test runner", "review rule")  # fmt: skip
VALUES = ("Lisbon", "neovim", "eu-west-2", "Erin", "Rust", "Thursday", "PostgreSQL 16",
          "UTC+9", "pytest -n 2", "two approvals", "Hamburg", "VS Code", "k8s-prod")  # fmt: skip
QUERIES = ("where does Ana live?", "which editor do I use?", "what is the deploy target?",
           "who is Carol's manager?", "which database does billing use?", "what timezone?",
           "quando é o on-call?", "¿qué test runner usamos?", "the nightly job's review rule",
           "Mei favourite language")  # fmt: skip
COLUMNS = ["username", "scope", "category", "key", "value", "origin", "status", "flags",
           "created_at", "updated_at", "expires_at", "content_hash", "embedding_model",
           "embedding", "stated_at"]  # fmt: skip
MODES = ("local", "pgvector")
DIM = HashEmbedder().dim
# The HNSW index is rebuilt after each load up to this size (35 s at 100k here); past
# it the store would not build it itself either (vector_search.AUTO_INDEX_ROWS), and
# with one user owning 1/100 the planner reads that user's rows by the btree anyway.
HNSW_UP_TO = 100_000


def settings_for(dsn: str, user: str, mode: str) -> Settings:
    return Settings.model_validate({
        "general": {"user": user},
        "memory": {"store": "postgres", "postgres_dsn": dsn, "embedding": "hash",
                   "postgres_vector_search": mode == "pgvector"},
    })  # fmt: skip


def note(rng: random.Random, i: int) -> tuple[str, str]:
    subject, attribute = rng.choice(SUBJECTS), rng.choice(ATTRIBUTES)
    key = f"{subject}_{attribute}".replace(" ", "_").lower()[:40] + f"_{i}"
    return key, f"{subject}'s {attribute} is {rng.choice(VALUES)} ({i})"


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


# building ----------------------------------------------------------------------------
def _vector_binary(vector: np.ndarray) -> bytes:
    """pgvector's binary form: dimension, unused, big-endian float32s."""
    return struct.pack(">HH", len(vector), 0) + vector.astype(">f4").tobytes()


async def grow(dsn: str, start: int, stop: int) -> float:
    """Rows ``start..stop`` by COPY (the vector column filled directly, its trigger
    off meanwhile); returns seconds."""
    started = time.perf_counter()
    embedder = HashEmbedder()
    rng = random.Random(1)
    shapes = [note(rng, i) for i in range(256)]
    base = embedder.embed_sync([embed_text("user", k, v) for k, v in shapes])
    gen = np.random.default_rng(start)
    now = time.time()
    conn = await asyncpg.connect(dsn)
    try:
        await conn.set_type_codec(
            "vector", encoder=_vector_binary, decoder=bytes, format="binary", schema="public"
        )
        # Built again after the load (an HNSW insert per row would cost far more).
        await conn.execute(f"DROP INDEX IF EXISTS {pgvector.index_name(DIM)}")
        await conn.execute("ALTER TABLE memories DISABLE TRIGGER memories_embedding_vec")
        rng = random.Random(start)
        for chunk in range(start, stop, 20_000):
            count = min(20_000, stop - chunk)
            picks = gen.integers(0, len(base), count)
            vectors = base[picks] + gen.normal(0, 0.02, (count, base.shape[1])).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            records = []
            for j in range(count):
                i = chunk + j
                category = rng.choice(("user", "feedback", "project", "reference"))
                scope = "global" if category in ("user", "feedback") else f"/team/p{rng.randrange(PROJECTS)}"
                key, value = note(rng, i)
                stated = now - rng.uniform(0, 3 * 365) * DAY
                records.append((
                    f"u{i % USERS:03d}", scope, category, key, value, "user", "active", [],
                    stated, stated, now + 365 * DAY, content_hash(value), embedder.id,
                    vectors[j].astype("<f4").tobytes(), stated, vectors[j],
                ))  # fmt: skip
            await conn.copy_records_to_table(
                "memories", columns=[*COLUMNS, "embedding_vec"], records=records
            )
        await conn.execute("ALTER TABLE memories ENABLE TRIGGER memories_embedding_vec")
        await conn.execute("UPDATE memory_meta SET value = value + 1 WHERE name = 'generation'")
        await conn.execute("VACUUM ANALYZE memories")
        if stop <= HNSW_UP_TO:
            await conn.execute("SET maintenance_work_mem = '1GB'")
            await conn.execute(pgvector.indexes_sql(DIM)[0])  # HNSW; the packed btree stayed
    finally:
        await conn.close()
    return time.perf_counter() - started


async def prepare_schema(dsn: str) -> None:
    """Migrate and add the pgvector column through the store's own open."""
    svc = await MemoryService.open(settings_for(dsn, CLIENT_USER, "pgvector"), Paths(Path(tempfile.mkdtemp())), lazy=True)
    await svc.close()


# one client --------------------------------------------------------------------------
async def client(dsn: str, home: str, mode: str, samples: int) -> dict[str, float]:
    """What one user's process meets: start, first recall, recall and identity lookups."""
    settings = settings_for(dsn, CLIENT_USER, mode)
    t0 = time.perf_counter()
    svc = await MemoryService.open(settings, Paths(Path(home)), lazy=True)
    await svc.load_vectors()
    start = time.perf_counter() - t0
    try:
        t0 = time.perf_counter()
        await svc.recall(QUERIES[0], project=CLIENT_PROJECT, record=False)
        first = time.perf_counter() - t0
        recalls, lookups = [], []
        rng = random.Random(5)
        for n in range(samples):
            t0 = time.perf_counter()
            await svc.recall(QUERIES[n % len(QUERIES)], project=CLIENT_PROJECT, record=False)
            recalls.append(time.perf_counter() - t0)
            key, value = note(rng, 10**7 + n)
            t0 = time.perf_counter()
            await svc.vectors.nearest(key, value, scope=CLIENT_PROJECT, category="project")
            lookups.append(time.perf_counter() - t0)
    finally:
        await svc.close()
    return {
        "start_ms": start * 1000, "first_ms": first * 1000,
        "p50_ms": statistics.median(recalls) * 1000, "p95_ms": _pct(recalls, 0.95) * 1000,
        "lookup_p95_ms": _pct(lookups, 0.95) * 1000, "rss_mib": peak_rss_mib(),
    }  # fmt: skip


def peak_rss_mib() -> float:
    """This process's own peak: VmHWM starts again at exec, where ``ru_maxrss``
    keeps the peak of the process it was forked from (the bench, after a build)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker_command(code: Path, *args: str) -> tuple[list[str], dict[str, str]]:
    """This script's worker from checkout ``code`` (ours, or ``--baseline``'s), and the
    environment that makes it import that checkout's qwenmem."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    return [sys.executable, str(code / "bench" / Path(__file__).name), "--worker", *args], env


def run_client(dsn: str, home: Path, mode: str, samples: int, code: Path = ROOT) -> dict[str, float]:
    command, env = worker_command(
        code, "client", "--dsn", dsn, "--home", str(home), "--mode", mode, "--samples", str(samples)
    )
    out = subprocess.run(command, capture_output=True, text=True, check=True, cwd=code, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


# many clients ------------------------------------------------------------------------
async def team_member(dsn: str, user: str, mode: str, seconds: float, home: Path) -> dict[str, object]:
    """One client for ``seconds``: a write, then a recall, a short pause, again."""
    svc = await MemoryService.open(settings_for(dsn, user, mode), Paths(home), lazy=True)
    await svc.load_vectors()
    written: list[tuple[int, str, str]] = []
    recalls: list[float] = []
    rng = random.Random(user)
    try:
        end = time.monotonic() + seconds
        n = 0
        while time.monotonic() < end:
            _, value = note(rng, 2 * 10**7 + n)
            key = f"{user}_team_{n}"
            result = await svc.save(
                WriteRequest("project", key, value, origin="user", project=CLIENT_PROJECT)
            )
            written.append((result.memory.id, key, value, result.action.value))
            t0 = time.perf_counter()
            await svc.recall(QUERIES[n % len(QUERIES)], project=CLIENT_PROJECT)
            recalls.append(time.perf_counter() - t0)
            n += 1
            await asyncio.sleep(rng.uniform(0.05, 0.15))
    finally:
        await svc.close()
    return {"written": written, "recalls": recalls}


async def team_process(dsn: str, users: list[str], mode: str, seconds: float) -> dict[str, object]:
    homes = [Path(tempfile.mkdtemp(prefix="pgscale-")) for _ in users]
    done = await asyncio.gather(*(team_member(dsn, u, mode, seconds, h) for u, h in zip(users, homes, strict=True)))
    return {
        "written": [w for d in done for w in d["written"]],  # type: ignore[attr-defined]
        "recalls": [r for d in done for r in d["recalls"]],  # type: ignore[attr-defined]
    }


async def verify(dsn: str, written: list[list[object]]) -> tuple[int, int]:
    """(writes lost, writes since replaced). Lost: the row a write answered with is
    not in the database with its value (a deduplicated write answers with the row
    that already held it), or left the active set with no newer row replacing it.
    Replaced is by design: a later write of the same fact (same subject and
    attribute, by meaning) supersedes it."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT id, value, status, superseded_by FROM memories WHERE id = ANY($1::bigint[])",
            [int(w[0]) for w in written],  # type: ignore[call-overload]
        )
    finally:
        await conn.close()
    by_id = {r["id"]: r for r in rows}
    lost = replaced = 0
    for memory_id, _key, value, action in written:
        row = by_id.get(memory_id)
        if row is None or (action != "deduplicated" and row["value"] != value):
            lost += 1
        elif row["status"] == "superseded" and row["superseded_by"] is not None:
            replaced += 1
        elif row["status"] != "active":
            lost += 1
    return lost, replaced


def server_cpu(server: PostgresServer) -> float | None:
    """CPU seconds the cluster has used: the postmaster, the backends it has reaped
    and those still running (None for an external server: not ours to read)."""
    if server.root is None:
        return None
    try:
        postmaster = int((server.data / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    ticks = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, ppid = int(entry.name), int(fields[1])
        if pid == postmaster:
            ticks += sum(int(f) for f in fields[11:15])  # its own and its reaped children's
        elif ppid == postmaster:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def concurrency(
    dsn: str, mode: str, clients: int, seconds: float, *, code: Path = ROOT,
    server: PostgresServer | None = None,
) -> dict[str, float]:
    """``clients`` users in 4 processes of checkout ``code``, writing and recalling
    for ``seconds``; the CPU the client processes and the server spent meanwhile."""
    per = max(1, clients // 4)
    users = [f"u{i * 3 % USERS:03d}" for i in range(clients)]
    groups = [users[i : i + per] for i in range(0, clients, per)]
    cpu0, server0, wall0 = children_cpu(), server and server_cpu(server), time.monotonic()
    procs = []
    for g in groups:
        command, env = worker_command(
            code, "team", "--dsn", dsn, "--mode", mode, "--users", ",".join(g), "--seconds", str(seconds)
        )
        procs.append(subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=code, env=env))
    written: list[list[object]] = []
    recalls: list[float] = []
    for p in procs:
        out, _ = p.communicate()
        if p.returncode != 0:
            raise RuntimeError(f"a team process failed ({p.returncode})")
        data = json.loads(out.strip().splitlines()[-1])
        written += data["written"]
        recalls += data["recalls"]
    wall = time.monotonic() - wall0
    server1 = server and server_cpu(server)
    lost, replaced = asyncio.run(verify(dsn, written))
    return {
        "writes": len(written), "lost": lost, "replaced": replaced, "recalls": len(recalls),
        "p50_ms": statistics.median(recalls) * 1000, "p95_ms": _pct(recalls, 0.95) * 1000,
        "client_cpu": children_cpu() - cpu0, "wall": wall,
        "server_cpu": float("nan") if server0 is None or server1 is None else server1 - server0,
    }  # fmt: skip


# the run -----------------------------------------------------------------------------
def table(rows: list[dict[str, object]]) -> str:
    head = ("| memories (client's) | search | start cold | start warm | first recall | recall p50"
            " | recall p95 | identity p95 | RSS |\n|---|---|---:|---:|---:|---:|---:|---:|---:|")  # fmt: skip
    lines = [head]
    for r in rows:
        lines.append(
            f"| {r['size']:,} ({r['own']:,}) | {r['mode']} | {r['cold_start']:.0f} ms | {r['warm_start']:.0f} ms"
            f" | {r['first']:.0f} ms | {r['p50']:.1f} ms | {r['p95']:.1f} ms | {r['lookup']:.1f} ms"
            f" | {r['rss']:.0f} MiB |"
        )
    return "\n".join(lines)


PLOTTED = (("warm_start", "start warm"), ("first", "first recall"), ("p95", "recall p95"),
           ("lookup", "identity p95"), ("rss", "RSS"))  # fmt: skip
"""What the growth plot draws, for each search mode."""


def growth(rows: list[dict[str, object]]) -> list[dict[str, float]]:
    """One row a store size (``n``: the client's own memories), each mode's figures
    under "mode key", as the plot reads them."""
    by_size: dict[int, dict[str, float]] = {}
    for r in rows:
        size = int(str(r["own"]))
        merged = by_size.setdefault(size, {"n": float(size)})
        for key, _ in PLOTTED:
            merged[f"{r['mode']} {key}"] = float(str(r[key]))
    return [by_size[size] for size in sorted(by_size)]


def measure(dsn: str, size: int, samples: int, runs: int = 3) -> list[dict[str, object]]:
    """Each mode's cold start, then ``runs`` warm ones, the modes alternated run by
    run so that both meet the same load."""
    homes = {mode: Path(tempfile.mkdtemp(prefix="pgscale-home-")) for mode in MODES}
    cold = {mode: run_client(dsn, homes[mode], mode, samples) for mode in MODES}
    warm: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    for _ in range(runs):
        for mode in MODES:
            warm[mode].append(run_client(dsn, homes[mode], mode, samples))
    rows = []
    for mode in MODES:
        w = warm[mode]
        rows.append({
            "size": size, "own": size // USERS, "mode": mode, "cold_start": cold[mode]["start_ms"],
            "warm_start": statistics.median(r["start_ms"] for r in w),
            "first": statistics.median(r["first_ms"] for r in w),
            "p50": statistics.median(r["p50_ms"] for r in w),
            "p95": statistics.median(r["p95_ms"] for r in w),
            "lookup": statistics.median(r["lookup_p95_ms"] for r in w),
            "rss": statistics.median(r["rss_mib"] for r in w),
        })  # fmt: skip
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    return rows


async def _database(server: PostgresServer) -> str:
    return await server.create_database("qwenmem_pgscale")


def team_line(team: dict[str, float], label: str) -> str:
    return (
        f"| {label} | {team['writes']:.0f} | {team['lost']:.0f} ({team['replaced']:.0f} replaced)"
        f" | {team['recalls']:.0f} | {team['p50_ms']:.0f} ms | {team['p95_ms']:.0f} ms"
        f" | {team['client_cpu']:.0f} s | {team['server_cpu']:.0f} s | {team['wall']:.0f} s |"
    )


TEAM_HEAD = (
    "| build, search | writes | lost | recalls | recall p50 | recall p95 | clients' CPU"
    " | server CPU | wall |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|"
)


def teams(
    stores: dict[str, tuple[str, Path]], modes: list[str], args: argparse.Namespace,
    seconds: float, server: PostgresServer,
) -> None:
    """The concurrency runs: per mode, each build in turn, ``--rounds`` times, so that
    the builds meet the same load; one line each as it ends, then the table."""
    lines = []
    for mode in modes:
        for n in range(args.rounds):
            for label, (dsn, code) in stores.items():
                team = concurrency(dsn, mode, args.clients, seconds, code=code, server=server)
                lines.append(team_line(team, f"{label}, {mode} (round {n + 1})"))
                print(lines[-1], f"load {os.getloadavg()[0]:.1f}", flush=True)
    print(f"\n{args.clients} clients x {seconds:.0f} s:\n{TEAM_HEAD}\n" + "\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--quick", action="store_true", help="10k and 100k, 20 s of concurrency")
    parser.add_argument("--samples", type=int, default=60)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--team-modes", default=",".join(MODES), help="searches the concurrency runs use")
    parser.add_argument("--team-only", action="store_true", help="skip the one-client measures")
    parser.add_argument("--baseline", type=Path, help="a checkout of the build before: its clients "
                        "run the concurrency too, alternated with ours, on a store built alike")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=1, help="concurrency runs per build and mode")
    parser.add_argument("--plot", type=Path, default=HERE / "pg_scale.svg", help="the growth plot (log-log)")
    parser.add_argument("--worker", choices=("client", "team"))
    parser.add_argument("--dsn")
    parser.add_argument("--home")
    parser.add_argument("--mode", choices=MODES, default="pgvector")
    parser.add_argument("--users")
    args = parser.parse_args(argv)
    if args.worker == "client":
        print(json.dumps(asyncio.run(client(args.dsn, args.home, args.mode, args.samples))))
        return 0
    if args.worker == "team":
        print(json.dumps(asyncio.run(team_process(args.dsn, args.users.split(","), args.mode, args.seconds))))
        return 0
    sizes = [10_000, 100_000] if args.quick else [int(s) for s in args.sizes.split(",")]
    seconds = 20.0 if args.quick else args.seconds
    external = os.environ.get(DSN_ENV)
    server = PostgresServer.external(external) if external else PostgresServer.start_new(pgvector_bin_dir())
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the cluster is removed below
    # Every client's home, here and in the worker processes, under one directory removed below.
    scratch = tempfile.mkdtemp(prefix="pgscale-")
    tempfile.tempdir = os.environ["TMPDIR"] = scratch
    try:
        dsn = asyncio.run(_database(server))
        asyncio.run(prepare_schema(dsn))
        stores = {"this build": (dsn, ROOT)}
        if args.baseline:  # its own schema, migrated and indexed by its own first client
            base = asyncio.run(_database(server))
            run_client(base, Path(tempfile.mkdtemp()), "pgvector", 2, code=args.baseline.resolve())
            stores["before"] = (base, args.baseline.resolve())
        print(f"load: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
        if args.team_only:  # one client's first search still builds the vector indexes
            run_client(dsn, Path(tempfile.mkdtemp()), "pgvector", 2)
            rows = []
        else:
            rows = measure(dsn, 0, args.samples)
        built = 0
        for size in sizes:
            took = sum(asyncio.run(grow(store, built, size)) for store, _ in stores.values())
            built = size
            print(f"built {size:,} rows in {took:.0f} s ({len(stores)} stores)", flush=True)
            if not args.team_only:
                rows += measure(dsn, size, args.samples)
        if not args.team_only:
            print("\n" + table(rows))
            plot(growth(rows), [(f"{mode} {key}", f"{mode}: {title}") for mode in MODES for key, title in PLOTTED], args.plot)
        modes = [m for m in args.team_modes.split(",") if m] if seconds > 0 and args.clients > 0 else []
        print(f"\non {built:,} memories, load {os.getloadavg()[0]:.1f}", flush=True)
        teams(stores, modes, args, seconds, server)
        print(f"load at the end: {os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if not external:
            server.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
