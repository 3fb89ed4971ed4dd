"""Tools the model may call, and the two built-in file tools.

The registry is the only place tool calls are dispatched, so argument parsing, error
shaping and "unknown tool" answers are the same for every tool; a new tool is one
`registry.register(Tool(...))`. A tool's failure is an answer for the model
(`ToolResult(is_error=True)`), never an exception out of the chat loop.

The file tools only see the project root: relative or absolute paths are resolved
(symlinks included) and must stay inside it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import stat
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("qwenmem.tools")

READ_FILE_MAX_BYTES = 256 * 1024
LIST_DIRECTORY_MAX_ENTRIES = 500
_BINARY_SNIFF_BYTES = 8192


class ToolError(Exception):
    """Raised by a handler for an expected failure; `str(e)` goes to the model as is."""


@dataclass
class ToolContext:
    project_root: Path
    session_id: str
    turn_outputs: list[str] = field(default_factory=list)
    """Tool outputs so far in this query, oldest first (e.g. for the memory guard)."""


@dataclass
class ToolResult:
    content: str
    is_error: bool = False


ToolHandler = Callable[[dict[str, Any], ToolContext], Awaitable[str]]


@dataclass
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    """JSON schema of the arguments object."""
    handler: ToolHandler

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


class ToolRegistry:
    def __init__(self, tools: list[Tool] | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools or ():
            self.register(tool)

    def register(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    def names(self) -> list[str]:
        return list(self._tools)

    def schemas(self) -> list[dict[str, Any]]:
        """The OpenAI `tools` request parameter."""
        return [tool.schema() for tool in self._tools.values()]

    async def call(self, name: str, arguments: str, ctx: ToolContext) -> ToolResult:
        """Run one tool call; every failure becomes an error result for the model.

        Cancellation is not a failure: it propagates so the chat loop can stop.
        """
        tool = self._tools.get(name)
        if tool is None:
            known = ", ".join(self.names()) or "none"
            return ToolResult(f"Unknown tool {name!r}. Available tools: {known}.", True)
        try:
            args = json.loads(arguments) if arguments.strip() else {}
        except ValueError as exc:
            return ToolResult(f"Invalid JSON arguments for {name}: {exc}", True)
        if not isinstance(args, dict):
            return ToolResult(f"Arguments for {name} must be a JSON object.", True)
        missing = [p for p in tool.parameters.get("required", ()) if p not in args]
        if missing:
            return ToolResult(f"Missing argument(s) for {name}: {', '.join(missing)}.", True)
        try:
            return ToolResult(await tool.handler(args, ctx))
        except ToolError as exc:
            return ToolResult(str(exc), True)
        except Exception as exc:
            log.exception("[TOOLS] %s failed", name)
            return ToolResult(f"{name} failed: {exc}", True)


# -- built-in file tools -------------------------------------------------------------


def resolve_in_root(root: Path, path: str) -> Path:
    """`path` (relative to `root`, or absolute) resolved, refused unless inside `root`.

    Resolution follows symlinks, so a link pointing outside is refused as well as
    `..` escapes and absolute paths elsewhere.
    """
    if "\x00" in path:
        raise ToolError("Invalid path: it contains a NUL character.")
    root = root.resolve()
    candidate = Path(path.strip() or ".")
    if not candidate.is_absolute():
        candidate = root / candidate
    try:
        resolved = candidate.resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: symlink loop on 3.11
        raise ToolError(f"Cannot resolve {path!r}: {exc}") from exc
    if not resolved.is_relative_to(root):
        raise ToolError(f"Access denied: {path!r} is outside the project root.")
    return resolved


def _display(root: Path, path: Path) -> str:
    relative = path.relative_to(root.resolve()).as_posix()
    return relative if relative != "." else "."


def _read_text(root: Path, path: str) -> str:
    target = resolve_in_root(root, path)
    shown = _display(root, target)
    try:
        info = target.stat()
    except FileNotFoundError:
        raise ToolError(f"No such file: {shown}") from None
    except OSError as exc:
        raise ToolError(f"Cannot read {shown}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(info.st_mode):
        raise ToolError(f"{shown} is a directory; use list_directory.")
    if not stat.S_ISREG(info.st_mode):
        raise ToolError(f"{shown} is not a regular file.")
    if info.st_size > READ_FILE_MAX_BYTES:
        raise ToolError(
            f"{shown} is too large to read ({info.st_size} bytes; "
            f"the limit is {READ_FILE_MAX_BYTES // 1024} KiB)."
        )
    try:
        with target.open("rb") as handle:
            # Read one byte past the cap: the file may have grown since stat().
            data = handle.read(READ_FILE_MAX_BYTES + 1)
    except OSError as exc:
        raise ToolError(f"Cannot read {shown}: {exc.strerror or exc}") from None
    if len(data) > READ_FILE_MAX_BYTES:
        raise ToolError(f"{shown} is too large to read (over {READ_FILE_MAX_BYTES // 1024} KiB).")
    if b"\x00" in data[:_BINARY_SNIFF_BYTES]:
        raise ToolError(f"{shown} is a binary file ({len(data)} bytes); not shown.")
    if not data:
        return f"({shown} is empty)"
    return data.decode("utf-8", errors="replace")


def _list_directory(root: Path, path: str) -> str:
    target = resolve_in_root(root, path)
    shown = _display(root, target)
    try:
        with os.scandir(target) as scan:
            # Git's own store is noise to the model and a waste of its context.
            entries = sorted((e for e in scan if e.name != ".git"), key=lambda e: e.name)
    except FileNotFoundError:
        raise ToolError(f"No such directory: {shown}") from None
    except NotADirectoryError:
        raise ToolError(f"{shown} is a file; use read_file.") from None
    except OSError as exc:
        raise ToolError(f"Cannot list {shown}: {exc.strerror or exc}") from None
    if not entries:
        return f"({shown} is empty)"
    lines = []
    for entry in entries[:LIST_DIRECTORY_MAX_ENTRIES]:
        try:
            is_dir = entry.is_dir()  # follows symlinks: a link to a dir reads as one
        except OSError:
            is_dir = False
        lines.append(entry.name + ("/" if is_dir else ""))
    if len(entries) > LIST_DIRECTORY_MAX_ENTRIES:
        lines.append(f"… and {len(entries) - LIST_DIRECTORY_MAX_ENTRIES} more entries")
    return "\n".join(lines)


def builtin_tools(project_root: Path) -> ToolRegistry:
    """A registry with `read_file` and `list_directory`, confined to `project_root`."""
    root = Path(project_root)

    async def read_file(args: dict[str, Any], ctx: ToolContext) -> str:
        return await asyncio.to_thread(_read_text, root, str(args["path"]))

    async def list_directory(args: dict[str, Any], ctx: ToolContext) -> str:
        return await asyncio.to_thread(_list_directory, root, str(args.get("path") or "."))

    return ToolRegistry(
        [
            Tool(
                name="read_file",
                description=(
                    "Read a UTF-8 text file of the user's project. The path is relative "
                    f"to the project root; files over {READ_FILE_MAX_BYTES // 1024} KiB "
                    "and binary files are refused."
                ),
                parameters={
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "description": "File path, e.g. src/main.py"}
                    },
                    "required": ["path"],
                },
                handler=read_file,
            ),
            Tool(
                name="list_directory",
                description=(
                    "List a directory of the user's project, one entry a line; "
                    "directories end with '/'. The path is relative to the project root "
                    "('.' is the root)."
                ),
                parameters={
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "description": "Directory path; '.' for the root"}
                    },
                    "required": ["path"],
                },
                handler=list_directory,
            ),
        ]
    )
