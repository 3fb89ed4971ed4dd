"""Facts know their time (issue 35 item 4): the SQLite migration that gives every row
its statement date and, once replaced, until when it held; what was true on a date."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from memtest_support import Clock, make_settings

from qwenmem_tui.memory.model import Category, Memory, MemoryDraft, Origin, Status, WriteRequest
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.memory.timeline import history, parse_moment, true_at
from qwenmem_tui.paths import Paths
from qwenmem_tui.storage import MIGRATIONS, Database


async def test_a_database_before_the_times_gets_them_from_what_it_holds(tmp_path: Path) -> None:
    paths = Paths(tmp_path / "home")
    paths.ensure()
    old = await Database.open(paths.db_file, migrations=MIGRATIONS[:6])
    rows = [
        # (key, value, status, created_at, updated_at)
        ("home_city", "Porto", "superseded", 1.70e9, 1.85e9),  # replaced by row 2
        ("home_city", "Lisbon", "active", 1.80e9, 1.80e9),
        ("editor", "vim", "superseded", 1.75e9, 1.76e9),  # its replacement is gone
        ("stack", "Python", "active", 1.78e9, 1.79e9),
    ]

    async def fill(conn) -> None:  # type: ignore[no-untyped-def]
        for key, value, status, created, updated in rows:
            await conn.execute(
                "INSERT INTO memories (user, scope, category, key, value, origin, status, flags,"
                " created_at, updated_at, content_hash) VALUES ('ana', 'global', 'user', ?, ?,"
                " 'user', ?, '[]', ?, ?, ?)",
                (key, value, status, created, updated, value),
            )
        await conn.execute("UPDATE memories SET superseded_by = 2 WHERE id = 1")

    await old.write(fill)
    await old.close()
    service = await MemoryService.open(make_settings(), paths, clock=Clock())
    try:
        times = {m.value: (m.stated_at, m.valid_until) for m in await service.list()}
    finally:
        await service.close()
    assert times == {
        "Porto": (1.70e9, 1.80e9),  # held until Lisbon was said
        "Lisbon": (1.80e9, None),
        "vim": (1.75e9, 1.76e9),  # until it was replaced
        "Python": (1.78e9, None),
    }


def memory(memory_id: int, value: str, stated: float, until: float | None = None, *,
           key: str = "home_city", status: Status = Status.ACTIVE,
           by: int | None = None, expires: float | None = None) -> Memory:  # fmt: skip
    return Memory(
        memory_id, "ana", "global", Category.USER, key, value, Origin.USER, status, [],
        stated, stated, expires, superseded_by=by, stated_at=stated, valid_until=until,
    )  # fmt: skip


def test_true_at_holds_each_version_for_its_time_and_one_per_fact() -> None:
    porto = memory(1, "Porto", 100.0, 200.0, status=Status.SUPERSEDED, by=2)
    lisbon = memory(2, "Lisbon", 200.0)  # restored later: current since it was said
    berlin = memory(3, "Berlin", 300.0, 400.0, status=Status.SUPERSEDED, by=2)
    vim = memory(4, "vim", 150.0, key="editor", expires=250.0)
    held = memory(5, "Lyon", 120.0, key="other", status=Status.QUARANTINED)
    rows = [porto, lisbon, berlin, vim, held]
    assert [m.value for m in true_at(rows, 99.0)] == []
    assert [m.value for m in true_at(rows, 160.0)] == ["Porto", "vim"]
    assert [m.value for m in true_at(rows, 200.0)] == ["Lisbon", "vim"]
    assert [m.value for m in true_at(rows, 350.0)] == ["Berlin"]  # the newer said meanwhile
    assert [m.value for m in true_at(rows, 500.0)] == ["Lisbon"]


def test_moments_are_iso_dates_or_date_times() -> None:
    assert parse_moment("1970-01-02") == 86400.0
    assert parse_moment("1970-01-02", end_of_day=True) == 86400.0 + 86399.0
    assert parse_moment("1970-01-02T01:00:00Z") == 86400.0 + 3600.0
    assert parse_moment("1970-01-02T03:00:00+02:00") == 86400.0 + 3600.0
    for bad in ("yesterday", "2026-13-01", "", "12/03/2026"):
        with pytest.raises(ValueError, match="ISO 8601"):
            parse_moment(bad)


async def test_a_statement_older_than_the_current_value_becomes_its_earlier_version(
    tmp_path: Path,
) -> None:
    """An old fact imported after a newer one (a log read late) must not overwrite it:
    it is stored as the earlier version it is, and recall still delivers the newer."""
    clock = Clock()
    service = await MemoryService.open(make_settings(), Paths(tmp_path / "home"), clock=clock)
    try:
        now = clock()
        berlin = await service.save(WriteRequest("user", "home_city", "I live in Berlin", origin="user",
                                    project="p", stated_at=now - 10 * 86400))  # fmt: skip
        lisbon = await service.save(WriteRequest("user", "home_city", "I live in Lisbon", origin="user",
                                    project="p", stated_at=now - 400 * 86400))  # fmt: skip
        assert lisbon.superseded == [] and lisbon.memory.status is Status.SUPERSEDED
        assert lisbon.memory.superseded_by == berlin.memory.id
        assert lisbon.memory.valid_until == now - 10 * 86400
        active = await service.list(statuses=[Status.ACTIVE])
        assert [m.value for m in active] == ["I live in Berlin"]
        found = await service.recall("where do I live", project="p", record=False)
        assert [m.value for m in found.memories] == ["I live in Berlin"]
        then = true_at(await service.list(), now - 100 * 86400)
        assert [m.value for m in then] == ["I live in Lisbon"]
    finally:
        await service.close()


async def test_a_possible_restatement_is_a_version_of_the_fact_until_decided(
    tmp_path: Path,
) -> None:
    """identity links a newer memory to the older one it may restate (both active):
    the fact's history shows both, linked, before any decision (issue 35 items 2, 4)."""
    clock = Clock()
    service = await MemoryService.open(make_settings(), Paths(tmp_path / "home"), clock=clock)
    try:
        old = await service.save(WriteRequest("user", "use_neovim_as_editor", "I use neovim as my editor",
                                 origin="user", project="p"))  # fmt: skip
        clock.advance(3600)
        new = await service.store.write(
            MemoryDraft(Category.USER, "editor", "My editor is now VS Code", Origin.USER, "global",
                        service.user, restates=old.memory.id),
            flags=(), expires_at=None, vector=None, embedding_model="", now=clock(),
        )  # fmt: skip
        for which in ("editor", "use_neovim_as_editor", str(new.memory.id)):
            versions = await history(service, which, project="p")
            assert [v.memory.value for v in versions] == [
                "I use neovim as my editor", "My editor is now VS Code"
            ]
        assert versions[1].memory.restates == old.memory.id and versions[0].replaced_by is None
    finally:
        await service.close()


async def test_a_dialogue_imported_with_its_date_is_stated_then(tmp_path: Path) -> None:
    """Dialogue turns imported with the conversation's date (LoCoMo's session times)
    are stated then: the block the model reads dates them, and --as-of finds them."""
    from qwenmem_tui.memory.backup import import_lines
    from qwenmem_tui.memory.render import render_block

    clock = Clock()
    service = await MemoryService.open(make_settings(), Paths(tmp_path / "home"), clock=clock)
    try:
        turns = ["Caroline: I went to the LGBTQ support group yesterday.",
                 "Melanie: We're going camping at the lake in June."]  # fmt: skip
        report = await import_lines(service, [
            json.dumps({"category": "reference", "key": f"turn_{n}", "value": turn,
                        "stated_at": "2023-05-08T13:56:00"})
            for n, turn in enumerate(turns, start=1)
        ], project="p")  # fmt: skip
        assert report.imported == 2, report.errors
        rows = await service.list(statuses=[Status.ACTIVE])
        assert {m.stated_at for m in rows} == {parse_moment("2023-05-08T13:56:00")}
        assert "(stated 2023-05-08," in render_block(rows, clock())
        assert true_at(rows, parse_moment("2023-05-07")) == []
        assert len(true_at(rows, parse_moment("2023-05-09"))) == 2
    finally:
        await service.close()
