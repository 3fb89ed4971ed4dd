"""Two processes writing 200 memories each into one home: nothing lost, one index."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from memtest_support import PROJECT_A, fts_documents, fts_matches_rows, make_settings

from qwenmem_tui.memory.model import Status
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.paths import Paths

N = 200  # the race is per write; 200 interleaved writes each hit it as 1,000 did

WRITER = """
import asyncio, sys
from pathlib import Path
from qwenmem_tui.config import Settings
from qwenmem_tui.features import registry  # noqa: F401 -- registers the features' settings
from qwenmem_tui.memory.model import WriteRequest
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.paths import Paths

async def main(home, name, n, project):
    settings = Settings.model_validate({"general": {"user": "ana"}, "memory": {"embedding": "hash"}})
    svc = await MemoryService.open(settings, Paths(Path(home)))
    print("ready", flush=True)
    sys.stdin.readline()  # the parent releases both writers at once
    for i in range(n):
        value = f"{name} wrote fact number {i}"
        await svc.save(WriteRequest("project", f"{name}_fact_{i}", value, origin="tool", project=project))
    # A shared key both processes keep overwriting: exactly one row may stay active.
    for i in range(20):
        await svc.save(WriteRequest("project", "shared_key", f"{name} value {i}", origin="tool", project=project))
    await svc.recall("fact number 7", project=project)
    await svc.close()
    print("done", flush=True)

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]))
"""


def _spawn(home: Path, name: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(home), name, str(N), PROJECT_A],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def test_two_processes_write_200_each_nothing_lost(tmp_path: Path) -> None:
    paths = Paths(tmp_path / "home")
    paths.ensure()
    # Create the schema first so the writers race on data, not on the migration.
    await (await MemoryService.open(make_settings(), paths)).close()
    procs = [_spawn(paths.home, name) for name in ("left", "right")]

    def run() -> list[tuple[int, str, str]]:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        return [(p.wait(timeout=300), *p.communicate()) for p in procs]

    for code, out, err in await asyncio.to_thread(run):
        assert code == 0, err
        assert out.strip() == "done"

    svc = await MemoryService.open(make_settings(), paths)
    try:
        active = await svc.list(statuses=[Status.ACTIVE])
        keys = {m.key for m in active}
        assert len(active) == 2 * N + 1
        assert all(f"{name}_fact_{i}" in keys for name in ("left", "right") for i in range(N))
        shared = [m for m in await svc.list() if m.key == "shared_key"]
        assert sum(m.status is Status.ACTIVE for m in shared) == 1 and len(shared) == 40
        # The index holds exactly the active rows, whoever saved the file last, and
        # so does the full-text index, written in each row's own transaction.
        assert svc.index.ids().tolist() == sorted(m.id for m in active)
        assert fts_documents(paths.db_file) == {m.id for m in active}
        assert fts_matches_rows(paths.db_file)
        hit = await svc.recall("right wrote fact number 123", project=PROJECT_A, k=1)
        assert [m.key for m in hit.memories] == ["right_fact_123"]
        assert (await svc.stats()).writes == 2 * (N + 20)
    finally:
        await svc.close()
