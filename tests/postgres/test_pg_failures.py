"""When PostgreSQL is away: at start (read-only or refuse) and mid-session (retry, tell).

These tests stop and restart the server, so each gets a cluster of its own. The DSN
carries a password (trust auth ignores it) to prove it never reaches a message.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from memtest_support import PROJECT_A
from pgcluster import PrivateServer
from pgtest_support import Backend, Notices

from qwenmem_tui.cli import run
from qwenmem_tui.config import ConfigError, load_settings
from qwenmem_tui.memory.postgres import MemoryStoreUnavailable, RetryPolicy
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.memory.model import WriteRequest

pytestmark = pytest.mark.postgres

SECRET = "s3cret-pw"


def with_password(dsn: str) -> str:
    return dsn.replace("postgres@", f"postgres:{SECRET}@", 1)


async def test_server_down_at_start_reads_from_the_local_cache_or_refuses(
    private_pg: PrivateServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    backend = Backend("postgres", tmp_path, with_password(private_pg.dsn))
    svc = await backend.open()
    await svc.save(
        WriteRequest(
            "project",
            "current_project",
            "Beta, stack Python",
            origin="tool",
            project=PROJECT_A,
        )
    )
    await svc.close()  # leaves this machine's cache behind
    await asyncio.to_thread(private_pg.server.stop)

    notices = Notices()
    offline = await MemoryService.open(backend.settings(), backend.paths(), on_notice=notices)
    try:
        (line,) = notices.lines
        assert "unreachable" in line and "read-only from the local cache" in line and "\n" not in line
        assert "Beta" in (await offline.recall("what is my current project?", project=PROJECT_A)).block
        with pytest.raises(MemoryStoreUnavailable, match="memory is read-only"):
            await offline.save(
                WriteRequest("user", "name", "Ana", origin="user", project=PROJECT_A)
            )
    finally:
        await offline.close()

    with pytest.raises(MemoryStoreUnavailable, match="unreachable") as refused:
        await MemoryService.open(backend.settings(postgres_unavailable="refuse"), backend.paths())
    with pytest.raises(MemoryStoreUnavailable, match="no local memory cache") as no_cache:
        await MemoryService.open(backend.settings(), backend.paths("another-machine"))
    for message in (line, str(refused.value), str(no_cache.value)):
        assert SECRET not in message and "\n" not in message

    # The command line says the same in one line, no traceback.
    home = backend.paths("cli").home
    (home / "config.toml").write_text(
        f'[memory]\nstore = "postgres"\npostgres_unavailable = "refuse"\npostgres_dsn = "{backend.dsn}"\n'
    )
    monkeypatch.setenv("QWENMEM_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    assert await asyncio.to_thread(run, ["memory", "list"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unreachable" in err and SECRET not in err and "Traceback" not in err


async def test_writes_are_retried_while_the_server_is_away_and_failures_are_told(
    private_pg: PrivateServer, tmp_path: Path
) -> None:
    backend = Backend("postgres", tmp_path, with_password(private_pg.dsn))
    notices = Notices()
    svc = await MemoryService.open(backend.settings(), backend.paths(), on_notice=notices)
    store = svc.store
    try:
        store.retry = RetryPolicy(attempts=200, backoff=0.05, max_backoff=0.2)  # rides out a restart
        await asyncio.to_thread(private_pg.server.stop)
        pending = asyncio.create_task(
            svc.save(
                WriteRequest(
                    "project",
                    "deploy_target",
                    "We deploy to fly.io",
                    origin="tool",
                    project=PROJECT_A,
                )
            )
        )
        await notices.wait_for("retrying memory write")
        assert not pending.done()
        await asyncio.to_thread(private_pg.server.start)
        saved = await asyncio.wait_for(pending, 60)
        await notices.wait_for("memory write saved")
        await notices.wait_for("change feed")  # the listener noticed and reconnected
        await notices.wait_for("restored")
        assert (await svc.get(saved.memory.id)) is not None

        store.retry = RetryPolicy(attempts=3, backoff=0.01)
        await asyncio.to_thread(private_pg.server.stop)
        with pytest.raises(MemoryStoreUnavailable, match="unreachable after 3 attempts"):
            await svc.save(
                WriteRequest(
                    "project",
                    "lost_fact",
                    "Never silently dropped",
                    origin="tool",
                    project=PROJECT_A,
                )
            )
        failure = await notices.wait_for("memory write failed")
        await asyncio.to_thread(private_pg.server.start)
    finally:
        await svc.close()

    assert all(SECRET not in line for line in notices.lines) and SECRET not in failure
    check = await backend.open(machine="check")
    try:
        values = {m.value for m in await check.list()}
        # Told it failed, and it did fail: no half-written row, and the retried write is there once.
        assert values == {"We deploy to fly.io"}
    finally:
        await check.close()


def test_postgres_settings_from_the_environment_and_the_file(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[memory]\nstore = "postgres"\n')
    settings = load_settings(config, env={"QWENMEM_POSTGRES_DSN": "postgresql://u:pw@db.example/qwenmem"})
    assert settings.memory.postgres_dsn == "postgresql://u:pw@db.example/qwenmem"
    assert settings.memory.postgres_unavailable == "read_only"
    config.write_text('[memory]\npostgres_unavailable = "queue"\n')
    with pytest.raises(ConfigError, match="postgres_unavailable"):
        load_settings(config, env={})
