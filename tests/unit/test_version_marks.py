"""A memory as clients see it is declared once (`features/memory/remote.MemoryRow`, a
search hit's version marks `memory/render.VersionMarks`): the daemon's OpenAPI document
and `qwenmem mcp`'s search_memory output schema describe the same shape, and what
`version_fields` writes (the CLI's `--json`, both faces) fits it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest

from qwenmem_tui.daemon.openapi import document
from qwenmem_tui.daemon.server import api_routes
from qwenmem_tui.mcp_server.server import MemoryBackend, build_server
from qwenmem_tui.memory.model import DAY, Category, Memory, Origin, Status
from qwenmem_tui.memory.render import day, version_fields

MARKS = ("version", "stated", "newer_version")


def _memory(id: int, key: str, stated_at: float) -> Memory:  # noqa: A002
    return Memory(
        id, "ana", "global", Category.USER, key, "v", Origin.TOOL, Status.ACTIVE, [],
        stated_at, stated_at, None,
    )


def _resolved(schema: Any, defs: dict[str, Any]) -> Any:
    """`schema` with its `$ref`s replaced by what they name (either document's style)."""
    if isinstance(schema, dict):
        if "$ref" in schema:
            return _resolved(defs[schema["$ref"].rpartition("/")[2]], defs)
        return {k: _resolved(v, defs) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_resolved(v, defs) for v in schema]
    return schema


def _daemon_hit() -> dict[str, Any]:
    schemas = document(api_routes())["components"]["schemas"]
    return _resolved(schemas["Memories"]["properties"]["memories"]["items"], schemas)


async def _mcp_hit(project: Path) -> dict[str, Any]:
    async def no_runtime() -> None:
        raise AssertionError("listing tools opens nothing")

    server = build_server(MemoryBackend(no_runtime, project_dir=project, cwd=project))
    [search] = [tool for tool in await server.list_tools() if tool.name == "search_memory"]
    schema = search.output_schema
    assert schema is not None
    return _resolved(schema["$defs"]["MemoryHit"], schema["$defs"])


def _marks_only(hit: dict[str, Any]) -> dict[str, Any]:
    """The hit's schema reduced to its marks (what a marks value must satisfy)."""
    required = [name for name in hit.get("required", ()) if name in MARKS]
    return {"type": "object", "properties": {n: hit["properties"][n] for n in MARKS}, "required": required}


async def test_the_daemon_and_mcp_describe_the_marks_alike(project: Path) -> None:
    daemon, mcp = _daemon_hit(), await _mcp_hit(project)
    assert {n: daemon["properties"][n] for n in MARKS} == {n: mcp["properties"][n] for n in MARKS}
    # The row itself too (the daemon's score says "search only": its list has none).
    row = set(mcp["properties"]) - {"score", *MARKS}
    assert row == {"id", "category", "key", "value", "origin", "age_days", "date", "scope"}
    assert {n: daemon["properties"][n] for n in row} == {n: mcp["properties"][n] for n in row}
    assert set(daemon["required"]) == row and set(mcp["required"]) == row | {"score", "version"}
    assert daemon["properties"]["newer_version"]["required"] == ["id", "key", "stated_at", "stated"]

    older, newer = _memory(1, "home", 10 * DAY), _memory(2, "whereabouts", 20 * DAY)
    earlier, current = version_fields(older, newer), version_fields(newer, None)
    assert earlier["newer_version"]["stated"] == day(20 * DAY)  # the value the faces send
    for hit in (daemon, mcp):
        for marks in (earlier, current):
            jsonschema.validate(marks, _marks_only(hit))
        cut = {**earlier, "newer_version": {"id": 2, "key": "whereabouts"}}  # no dates
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(cut, _marks_only(hit))
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({"version": "later"}, _marks_only(hit))
