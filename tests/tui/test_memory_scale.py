"""/memory on a store of years (bench/bench_scale.py): the first screen is one small read,
painted before anything is counted, and a page is read through the place index.
Small stores, real SQLite, the real app under Pilot; nothing timed."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable

import pytest
from textual.css.stylesheet import Stylesheet
from textual.widgets import DataTable, Static

from qwenmem_tui.config import Settings
from qwenmem_tui.features.memory.feature import MEMORY_STATE
from qwenmem_tui.memory.model import DAY, Memory, Status
from qwenmem_tui.memory.service import MemoryService, default_user
from qwenmem_tui.memory.store import RowQuery, query_rows
from qwenmem_tui.paths import Paths
from qwenmem_tui.tui.app import QwenmemApp
from qwenmem_tui.tui.features.memory.extension import memory_extension
from qwenmem_tui.tui.features.memory.screen import PAGE, MemoryScreen

from .conftest import START, FakeClock, send, settle, wait_until

SIZE = (120, 34)


def plant(settings: Settings, paths: Paths, rows: list[tuple[str, str, str]]) -> None:
    """(scope, status, value) rows straight into the store, as bench_scale builds one."""
    conn = sqlite3.connect(paths.db_file)
    with conn:
        conn.executemany(
            "INSERT INTO memories (user, scope, category, key, value, origin, status, created_at,"
            " updated_at, content_hash) VALUES (?, ?, 'user', ?, ?, 'user', ?, ?, ?, ?)",
            [(default_user(settings), scope, f"fact_{i}", value, status, START - 30 * DAY,
              START - 30 * DAY, f"h{i}") for i, (scope, status, value) in enumerate(rows)],  # fmt: skip
        )
    conn.close()


async def test_the_first_screen_is_painted_before_anything_is_counted(
    make_app: Callable[..., QwenmemApp],
    settings: Settings,
    paths: Paths,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fails without: /memory read a page of 200 rows and counted them all before its
    first row was on screen (0.5-1.2 s at 100k on a loaded machine)."""
    await (await MemoryService.open(settings, paths, clock=clock)).close()
    plant(settings, paths, [("global", "active", f"Row {i} of a big store") for i in range(PAGE + 50)])
    limits: list[int | None] = []
    rows, count = MemoryService.rows, MemoryService.count
    counting = asyncio.Event()

    async def read(self: MemoryService, query: RowQuery, *, project: str | None = None) -> list[Memory]:
        limits.append(query.limit)
        return await rows(self, query, project=project)

    async def held(self: MemoryService, query: RowQuery, *, project: str | None = None) -> int:
        await counting.wait()
        return await count(self, query, project=project)

    app = make_app(extensions=[memory_extension])
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await app._runtime.state(MEMORY_STATE).service()
        # Held from here only: the status line's review badge counts at startup too,
        # and a start that waited for its held count never settled (a hung suite).
        monkeypatch.setattr(MemoryService, "rows", read)
        monkeypatch.setattr(MemoryService, "count", held)
        await send(pilot, "/memory")
        try:
            await wait_until(pilot, lambda: isinstance(app.screen, MemoryScreen))
            screen = app.screen
            table = screen.query_one(DataTable)
            await wait_until(pilot, lambda: table.row_count > 0)
            assert limits[0] is not None and limits[0] <= SIZE[1] < PAGE  # one screenful read
            assert table.row_count == limits[0] and not counting.is_set()  # painted, not counted
            assert "counting" in str(screen.query_one("#memory-title", Static).render())
        finally:
            counting.set()  # whatever failed: a held count would keep the app from exiting
        await settle(pilot)
        assert table.row_count == PAGE  # the rest of the first page once counted
        assert f"{PAGE + 50} of {PAGE + 50} shown" in str(screen.query_one("#memory-title", Static).render())


async def test_a_page_is_read_through_the_place_index_in_id_order(
    settings: Settings, paths: Paths, clock: FakeClock
) -> None:
    """The store's page of one user's places is the first rows of each place's index
    range, never every matching row sorted (SQLite's plan: no scan of the table, the
    place index searched); and it is the page a filter over every row gives. Fails
    without: the status index was searched for every matching row, then sorted."""
    service = await MemoryService.open(settings, paths, clock=clock)
    try:
        here, there = "/work/here", "/work/there"
        plant(settings, paths, [
            (("global", here, there)[i % 3], ("active", "quarantined", "deleted")[i % 5 % 3], f"Row {i}")
            for i in range(120)
        ])  # fmt: skip
        every = await service.store.rows(RowQuery())
        for query in (
            RowQuery(statuses=(Status.ACTIVE, Status.QUARANTINED), limit=25),
            RowQuery(statuses=(Status.ACTIVE, Status.QUARANTINED), limit=25, after=30),
            RowQuery(limit=7, words=("row",)),
        ):
            mine = service.mine(query, project=here)
            conn = service.store._conn  # type: ignore[attr-defined]
            sent: list[str] = []
            await conn.set_trace_callback(sent.append)  # the SQL as run, its values inlined
            got = [m.id for m in await service.store.rows(mine)]
            await conn.set_trace_callback(None)
            assert got == [m.id for m in query_rows(every, mine)][: query.limit]
            [sql] = [s for s in sent if s.lstrip().upper().startswith("SELECT")]
            plan = " | ".join(row[3] for row in await conn.execute_fetchall("EXPLAIN QUERY PLAN " + sql))
            assert "USING INDEX memories_by_place" in plan and "SCAN memories" not in plan, plan
    finally:
        await service.close()


async def test_opening_memory_does_not_restyle_the_app(
    make_app: Callable[..., QwenmemApp], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The memory screens' stylesheet is read at startup, so the first /memory neither
    reparses every source nor restyles every widget before it paints. Fails without:
    Textual read memory.tcss on the first push, then reparsed and restyled the app."""
    reparsed: list[Stylesheet] = []
    reparse = Stylesheet.reparse

    def counted(self: Stylesheet) -> None:
        reparsed.append(self)
        reparse(self)

    app = make_app(extensions=[memory_extension])
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await app._runtime.state(MEMORY_STATE).service()
        monkeypatch.setattr(Stylesheet, "reparse", counted)
        await send(pilot, "/memory")
        await wait_until(pilot, lambda: isinstance(app.screen, MemoryScreen))
        await settle(pilot)
        assert str(app.screen.query_one("#memory-table", DataTable).styles.min_height) == "5"  # memory.tcss
        assert reparsed == []
