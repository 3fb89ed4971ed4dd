"""The tool registry and the built-in file tools, on real files in tmp dirs."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from qwenmem_tui.chat.tools import (
    LIST_DIRECTORY_MAX_ENTRIES,
    READ_FILE_MAX_BYTES,
    Tool,
    ToolContext,
    ToolError,
    ToolRegistry,
    ToolResult,
    builtin_tools,
)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "README.md").write_text("# Demo\nhello\n")
    (project / "src" / "main.py").write_text("print('hi')\n")
    (tmp_path / "secret.txt").write_text("TOP SECRET")
    return project


@pytest.fixture
def registry(root: Path) -> ToolRegistry:
    return builtin_tools(root)


@pytest.fixture
def ctx(root: Path) -> ToolContext:
    return ToolContext(project_root=root, session_id="s1")


async def read(registry: ToolRegistry, ctx: ToolContext, path: str) -> ToolResult:
    return await registry.call("read_file", json.dumps({"path": path}), ctx)


async def ls(registry: ToolRegistry, ctx: ToolContext, path: str) -> ToolResult:
    return await registry.call("list_directory", json.dumps({"path": path}), ctx)


# -- read_file ---------------------------------------------------------------------------


async def test_read_file_relative_and_absolute_inside_the_root(
    registry: ToolRegistry, ctx: ToolContext, root: Path
) -> None:
    assert await read(registry, ctx, "README.md") == ToolResult("# Demo\nhello\n")
    assert await read(registry, ctx, str(root / "src" / "main.py")) == ToolResult("print('hi')\n")
    assert (await read(registry, ctx, "src/../README.md")).content == "# Demo\nhello\n"


async def test_read_file_refuses_paths_outside_the_root(
    registry: ToolRegistry, ctx: ToolContext, root: Path
) -> None:
    for path in ["../secret.txt", "src/../../secret.txt", str(root.parent / "secret.txt")]:
        result = await read(registry, ctx, path)
        assert result.is_error, path
        assert "outside the project root" in result.content
        assert "TOP SECRET" not in result.content


async def test_symlinks_pointing_out_are_refused_and_inside_ones_followed(
    registry: ToolRegistry, ctx: ToolContext, root: Path
) -> None:
    (root / "escape.txt").symlink_to(root.parent / "secret.txt")
    (root / "escape_dir").symlink_to(root.parent)
    (root / "alias.md").symlink_to(root / "README.md")
    assert (await read(registry, ctx, "escape.txt")).is_error
    assert (await read(registry, ctx, "escape_dir/secret.txt")).is_error
    assert (await ls(registry, ctx, "escape_dir")).is_error
    assert (await read(registry, ctx, "alias.md")).content == "# Demo\nhello\n"


async def test_read_file_size_cap(registry: ToolRegistry, ctx: ToolContext, root: Path) -> None:
    (root / "big.txt").write_bytes(b"a" * (READ_FILE_MAX_BYTES + 1))
    (root / "edge.txt").write_bytes(b"a" * READ_FILE_MAX_BYTES)
    big = await read(registry, ctx, "big.txt")
    assert big.is_error and "too large" in big.content and "256 KiB" in big.content
    assert len((await read(registry, ctx, "edge.txt")).content) == READ_FILE_MAX_BYTES


async def test_binary_refused_invalid_utf8_replaced_control_chars_kept(
    registry: ToolRegistry, ctx: ToolContext, root: Path
) -> None:
    (root / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (root / "latin1.txt").write_bytes("caf\xe9 ok".encode("latin-1"))
    (root / "ansi.txt").write_text("red \x1b[31mtext\x1b[0m\x07\n")
    binary = await read(registry, ctx, "image.png")
    assert binary.is_error and "binary" in binary.content
    assert (await read(registry, ctx, "latin1.txt")).content == "caf\ufffd ok"
    assert (await read(registry, ctx, "ansi.txt")).content == "red \x1b[31mtext\x1b[0m\x07\n"


async def test_read_file_errors_are_answers(
    registry: ToolRegistry, ctx: ToolContext, root: Path
) -> None:
    (root / "empty.txt").write_text("")
    os.mkfifo(root / "pipe")
    cases = {
        "missing.txt": "No such file: missing.txt",
        "src": "src is a directory; use list_directory.",
        "pipe": "pipe is not a regular file.",
        "bad\x00name": "NUL",
    }
    for path, expected in cases.items():
        result = await read(registry, ctx, path)
        assert result.is_error and expected in result.content, (path, result)
    assert await read(registry, ctx, "empty.txt") == ToolResult("(empty.txt is empty)")


# -- list_directory ----------------------------------------------------------------------


async def test_list_directory_sorted_with_directory_marks(
    registry: ToolRegistry, ctx: ToolContext, root: Path
) -> None:
    (root / "empty").mkdir()
    assert (await ls(registry, ctx, ".")).content == "README.md\nempty/\nsrc/"
    assert (await ls(registry, ctx, "src")).content == "main.py"
    assert (await ls(registry, ctx, "empty")).content == "(empty is empty)"
    assert (await registry.call("list_directory", "{}", ctx)).is_error  # path is required
    result = await ls(registry, ctx, "README.md")
    assert result.is_error and "use read_file" in result.content
    assert (await ls(registry, ctx, "..")).is_error
    assert (await ls(registry, ctx, "nowhere")).content == "No such directory: nowhere"


async def test_list_directory_caps_entries(
    registry: ToolRegistry, ctx: ToolContext, root: Path
) -> None:
    many = root / "many"
    many.mkdir()
    for i in range(LIST_DIRECTORY_MAX_ENTRIES + 7):
        (many / f"f{i:04d}").touch()
    lines = (await ls(registry, ctx, "many")).content.splitlines()
    assert len(lines) == LIST_DIRECTORY_MAX_ENTRIES + 1
    assert lines[-1] == "… and 7 more entries"


# -- the registry ------------------------------------------------------------------------


def test_schemas_are_openai_function_tools(registry: ToolRegistry) -> None:
    schemas = registry.schemas()
    assert [s["function"]["name"] for s in schemas] == ["read_file", "list_directory"]
    for schema in schemas:
        assert schema["type"] == "function"
        assert schema["function"]["parameters"]["required"] == ["path"]
        assert schema["function"]["description"]


async def test_register_adds_a_tool_in_one_line(registry: ToolRegistry, ctx: ToolContext) -> None:
    async def echo(args: dict[str, Any], context: ToolContext) -> str:
        context.turn_outputs.append("seen")
        return f"{context.session_id}:{args['value']}"

    registry.register(
        Tool("echo", "Echo a value.", {"type": "object", "properties": {"value": {"type": "string"}}, "required": ["value"]}, echo)
    )
    assert registry.names() == ["read_file", "list_directory", "echo"]
    assert await registry.call("echo", '{"value": "v"}', ctx) == ToolResult("s1:v")
    assert ctx.turn_outputs == ["seen"]
    with pytest.raises(ValueError, match="already registered"):
        registry.register(Tool("echo", "again", {}, echo))


async def test_bad_calls_become_error_results(registry: ToolRegistry, ctx: ToolContext) -> None:
    async def broken(args: dict[str, Any], context: ToolContext) -> str:
        raise KeyError("oops")

    async def refusing(args: dict[str, Any], context: ToolContext) -> str:
        raise ToolError("Nope, not that.")

    registry.register(Tool("broken", "", {"type": "object"}, broken))
    registry.register(Tool("refusing", "", {"type": "object"}, refusing))
    cases = {
        ("nope", "{}"): "Unknown tool 'nope'. Available tools: read_file, list_directory, broken, refusing.",
        ("read_file", "{not json"): "Invalid JSON arguments for read_file",
        ("read_file", "[1]"): "Arguments for read_file must be a JSON object.",
        ("read_file", "{}"): "Missing argument(s) for read_file: path.",
        ("broken", ""): "broken failed: 'oops'",
        ("refusing", "{}"): "Nope, not that.",
    }
    for (name, arguments), expected in cases.items():
        result = await registry.call(name, arguments, ctx)
        assert result.is_error and result.content.startswith(expected), (name, result)


async def test_cancellation_is_not_swallowed(ctx: ToolContext) -> None:
    started = asyncio.Event()

    async def wait(args: dict[str, Any], context: ToolContext) -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    registry = ToolRegistry([Tool("wait", "", {"type": "object"}, wait)])
    task = asyncio.create_task(registry.call("wait", "{}", ctx))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
