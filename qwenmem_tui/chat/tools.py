"""Tools the model may call, and the two built-in file tools.

The registry is the only place tool calls are dispatched, so argument parsing, error
shaping and "unknown tool" answers are the same for every tool; a new tool is one
`registry.register(Tool(...))`. A tool's failure is an answer for the model
(`ToolResult(is_error=True)`), never an exception out of the chat loop.

The file tools only see the project root: relative or absolute paths are resolved
(symlinks included) and must stay inside it; the file is then opened along the
resolved path without following symlinks, so a link swapped in after the check is
refused. qwenmem's own home and well-known credential stores are refused even inside
the project.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import re
import stat
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from qwenmem_tui import secrets
from qwenmem_tui.chat.view import user_words
from qwenmem_tui.llm.wire import JSONObject, Message
from qwenmem_tui.paths import Paths

log = logging.getLogger("qwenmem.tools")

READ_FILE_MAX_BYTES = 256 * 1024
LIST_DIRECTORY_MAX_ENTRIES = 500
_BINARY_SNIFF_BYTES = 8192
TOOL_OUTPUT_SCAN_CHARS = READ_FILE_MAX_BYTES
"""The most of a tool's answer kept (and scanned for secrets): the largest a built-in
returns; the chat keeps less still (`session.TOOL_RESULT_MAX_CHARS`)."""


class ToolError(Exception):
    """Raised by a handler for an expected failure; `str(e)` goes to the model as is."""


@dataclass
class ToolContext:
    project_root: Path
    session_id: str
    turn_outputs: list[str] = field(default_factory=list)
    """Untrusted tool outputs so far in this query, oldest first (for the memory guard)."""
    view: Callable[[], list[Message]] = list
    """The session's model view (since the last /clear), for a tool that must know
    what the model has read (save_memory's provenance)."""
    trusted_tools: frozenset[str] = frozenset()
    """Tools whose output is qwenmem's own answer (``Tool.untrusted_output`` False)."""
    request: list[Message] = field(default_factory=list)
    """The latest request's messages as the hooks shaped them: what the model saw,
    recalled memory included (the stored view holds no reminders the hooks add)."""


@dataclass
class ToolResult:
    content: str
    is_error: bool = False


ToolHandler = Callable[[JSONObject, ToolContext], Awaitable[str]]


@dataclass
class Tool:
    name: str
    description: str
    parameters: JSONObject
    """JSON schema of the arguments object."""
    handler: ToolHandler
    untrusted_output: bool = True
    """Its output is content nobody in the chat wrote (a file, a listing, an MCP server's
    answer): a memory the model writes with it in view is judged as resting on it. Off
    only for a tool whose output is qwenmem's own receipt (save_memory)."""

    def schema(self) -> JSONObject:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


def _encodable(value: object) -> bool:
    """Whether every string in a parsed JSON value is valid UTF-8 text."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def storable(text: str) -> str:
    """``text`` with lone surrogates (a non-UTF-8 file name, a ``\\udc80`` from the
    model) written as ``\\udc80``: SQLite and the HTTP client encode UTF-8 strictly,
    and one such character would end the turn in an internal error."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


ToolProvider = Callable[[], Sequence[Tool]]
"""Tools that come and go (an MCP server's, once it is up): asked on every request."""


class ToolRegistry:
    def __init__(self, tools: list[Tool] | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        self._providers: list[ToolProvider] = []
        for tool in tools or ():
            self.register(tool)

    def register(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    def add_provider(self, provider: ToolProvider) -> None:
        """Offer the tools `provider` returns at each request; a registered tool's name
        wins over a provided one."""
        self._providers.append(provider)

    def _all(self) -> dict[str, Tool]:
        if not self._providers:
            return self._tools
        tools = dict(self._tools)
        for provider in self._providers:
            for tool in provider():
                tools.setdefault(tool.name, tool)
        return tools

    def names(self) -> list[str]:
        return list(self._all())

    def trusted_outputs(self) -> frozenset[str]:
        """Names of the tools whose output is not untrusted content (see Tool)."""
        return frozenset(name for name, tool in self._all().items() if not tool.untrusted_output)

    def untrusted_output(self, name: str) -> bool:
        """Whether a call of ``name`` brings untrusted content (an unknown tool's error
        answer does not: it is qwenmem's)."""
        tool = self._all().get(name)
        return tool is not None and tool.untrusted_output

    def schemas(self) -> list[JSONObject]:
        """The OpenAI `tools` request parameter."""
        return [tool.schema() for tool in self._all().values()]

    async def call(self, name: str, arguments: str, ctx: ToolContext) -> ToolResult:
        """Run one tool call; every failure becomes an error result for the model.

        Cancellation is not a failure: it propagates so the chat loop can stop.
        """
        tool = self._all().get(name)
        if tool is None:
            known = ", ".join(self.names()) or "none"
            return ToolResult(f"Unknown tool {name!r}. Available tools: {known}.", True)
        try:
            args = json.loads(arguments) if arguments.strip() else {}
        except ValueError as exc:
            return ToolResult(f"Invalid JSON arguments for {name}: {exc}", True)
        if not isinstance(args, dict):
            return ToolResult(f"Arguments for {name} must be a JSON object.", True)
        if not _encodable(args):
            # "\ud800" is valid JSON but no UTF-8 text: it would fail deep in a handler
            # (SQLite, a file name) instead of as an answer the model can act on.
            return ToolResult(
                f"Arguments for {name} contain a lone surrogate (\\ud800-\\udfff).", True
            )
        missing = [p for p in tool.parameters.get("required", ()) if p not in args]
        if missing:
            return ToolResult(f"Missing argument(s) for {name}: {', '.join(missing)}.", True)
        try:
            result = ToolResult(await tool.handler(args, ctx))
        except ToolError as exc:
            result = ToolResult(str(exc), True)
        except Exception as exc:
            log.exception("[TOOLS] %s failed", name)
            result = ToolResult(f"{name} failed: {exc}", True)
        return ToolResult(await _scanned(name, result.content), result.is_error)


async def _scanned(name: str, text: str) -> str:
    """A tool's answer as the model, the history, the daemon and exports may see it:
    its secrets cut out whatever the tool (an MCP server's key dump, an error quoting a
    config), and no longer than the scanner reads (the chat keeps less still)."""
    if len(text) > TOOL_OUTPUT_SCAN_CHARS:
        hidden = len(text) - TOOL_OUTPUT_SCAN_CHARS
        text = f"{text[:TOOL_OUTPUT_SCAN_CHARS]}\n[… truncated: {hidden} more characters]"
    # In a thread: the complete scanner imports on first use and takes ~1 s per 200 kB.
    return storable(await asyncio.to_thread(secrets.redact_noted, text, f"{name}'s answer"))


# -- built-in file tools -------------------------------------------------------------

# Credential stores are refused wherever they sit, even inside the project (a dotfiles
# repo, a home directory opened as the project): their content would go to the model
# and into the session's history. Names are compared case-insensitively (macOS).
_CREDENTIAL_DIRS = frozenset(
    {
        ".ssh", ".aws", ".azure", ".gnupg", ".kube", ".password-store", ".oci",
        ".mozilla", ".thunderbird", ".gsutil", ".credentials", ".secrets",
    }
)
_CREDENTIAL_PAIRS = frozenset(
    {
        (".config", "gcloud"),
        (".config", "gh"),
        (".config", "hub"),
        (".config", "op"),  # 1Password CLI
        (".config", "doctl"),
        (".config", "hcloud"),
        (".config", "heroku"),
        (".config", "configstore"),  # npm-style CLIs keep their tokens here
        (".config", "git", "credentials"),
        (".docker", "config.json"),
        (".cargo", "credentials"),
        (".cargo", "credentials.toml"),
        (".gem", "credentials"),
        (".local", "share", "keyrings"),
        (".local", "share", "kwalletd"),
        ("library", "keychains"),  # macOS
        ("library", "cookies"),
        # Browser profiles: cookies, saved passwords, session tokens.
        (".config", "google-chrome"),
        (".config", "chromium"),
        (".config", "bravesoftware"),
        (".config", "microsoft-edge"),
        (".config", "vivaldi"),
        (".config", "opera"),
        ("library", "application support", "google", "chrome"),
        ("library", "application support", "firefox"),
        ("library", "application support", "bravesoftware"),
        ("snap", "firefox"),
        ("snap", "chromium"),
    }
)
_CREDENTIAL_FILES = frozenset(
    {
        ".netrc", "_netrc", ".pgpass", ".git-credentials", ".gitcookies", ".pypirc",
        ".npmrc", ".yarnrc", ".yarnrc.yml", ".boto", ".s3cfg", ".dockercfg", ".htpasswd",
        ".vault-token", ".terraformrc", ".my.cnf", ".histfile", ".lesshst", ".viminfo",
        "credentials.tfrc.json", "application_default_credentials.json", "kubeconfig",
        "access_tokens.db", "credentials.db", "login data", "cookies", "cookies.sqlite",
        "logins.json", "key3.db", "key4.db", "web data",
    }
)
_CREDENTIAL_SUFFIXES = (
    ".keychain", ".keychain-db", ".pem", ".key", ".p12", ".pfx", ".jks", ".keystore",
    ".ppk", ".p8", ".kdbx", ".gpg", ".age",
)
# Shell and REPL histories (typed passwords, tokens in curl lines), dotenv files (but not
# their templates), SSH-style private keys by name, and api-key files of any CLI.
_CREDENTIAL_NAMES = re.compile(
    r"^(?:\.[\w.-]*history|[\w.-]*_history(?:\.txt)?"
    r"|\.env(?:\.(?!(?:example|sample|template|dist|defaults?)$)[\w.-]+)?|[\w-]+\.env"
    r"|id_[a-z0-9_-]+"
    r"|\.?(?:api[_-]?key|apikey|token|access[_-]?token|auth[_-]?token|secrets?|credentials?)"
    r"(?:\.(?:json|txt|toml|ya?ml|ini|conf|cfg))?)$"
)


def credential_store(path: Path) -> str | None:
    """The part of ``path`` that names a well-known credential store or file, else None."""
    parts = [part.casefold() for part in path.parts]
    for i, part in enumerate(parts):
        if part in _CREDENTIAL_DIRS or part in _CREDENTIAL_FILES:
            return part
        if part.endswith(_CREDENTIAL_SUFFIXES) or _CREDENTIAL_NAMES.fullmatch(part):
            return part
        for pair in _CREDENTIAL_PAIRS:
            if tuple(parts[i : i + len(pair)]) == pair:
                return "/".join(pair)
    return None


_CREDENTIAL_HOLDERS = frozenset({".config", ".local", ".cargo", ".docker", ".gem", "library"})


def _home_credential_files(home: Path) -> set[tuple[int, int]]:
    """(device, inode) of the credential files in ``home`` (its top level, and one or two
    levels into the directories that hold them): a hard link elsewhere names the same
    inode under an innocent name."""
    found: set[tuple[int, int]] = set()
    todo: list[tuple[Path, int]] = [(home, 0)]
    while todo:
        folder, depth = todo.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            path = Path(entry.path)
            try:
                if entry.is_symlink():
                    continue
                if entry.is_dir():
                    relative = path.relative_to(home)
                    holder = relative.parts[0].casefold() in _CREDENTIAL_HOLDERS
                    if depth < 3 and (holder or credential_store(relative)):
                        todo.append((path, depth + 1))
                    continue
                if credential_store(path.relative_to(home)) is not None:
                    info = entry.stat(follow_symlinks=False)
                    found.add((info.st_dev, info.st_ino))
            except (OSError, ValueError):
                continue
    return found


def default_private_dirs() -> tuple[Path, ...]:
    """qwenmem's own homes (``$QWENMEM_HOME`` and ``~/.qwenmem``): config with the API
    key, every session, every memory. Never a tool's to read or list."""
    return tuple({Paths.from_env().home.resolve(), (Path.home() / ".qwenmem").resolve()})


def confined_root(project_root: Path, start: Path) -> Path:
    """Where the file tools may look: the project root, unless it would be the user's
    home or ``/`` (no git root above, or a dotfiles repo), then ``start`` — the
    directory qwenmem was started in — when it lies inside it."""
    root = project_root.resolve()
    start = start.resolve()
    if root in _broad_roots() and start.is_relative_to(root):
        return start
    return root


def broad_root_notice(project_root: Path, start: Path) -> str | None:
    """One line for the user when the project root is their home or ``/``."""
    root = project_root.resolve()
    if root not in _broad_roots():
        return None
    what = "the root directory /" if root == Path(root.anchor) else f"your home directory {root}"
    where = confined_root(project_root, start)
    if where in _broad_roots():
        return (
            f"the project root is {what}: file tools read only the files and folders you "
            "name in your messages (never qwenmem's files or credential stores)"
        )
    return (
        f"the project root is {what}: file tools keep to {where} "
        "(never qwenmem's files or credential stores)"
    )


def _named_by_user(root: Path, path: str, said: list[str]) -> bool:
    """Whether the user's own messages name ``path`` (as given, relative to ``root``,
    absolute or ``~/``-relative) or a folder above it: in a home or ``/`` root, the
    only paths the file tools open."""
    target = resolve_in_root(root, path)
    home = Path.home().resolve()
    forms: set[str] = {path.strip().rstrip("/")}
    for place in (target, *target.parents):
        if place == root or not place.is_relative_to(root):
            break
        forms |= {place.relative_to(root).as_posix(), str(place)}
        if place.is_relative_to(home):
            forms.add(f"~/{place.relative_to(home).as_posix()}")
    forms.discard("")
    forms.discard(".")
    text = "\n".join(said)
    return any(re.search(rf"(?<![\w./~-]){re.escape(form)}(?![\w-]|/\w)", text) for form in forms)


def _broad_roots() -> tuple[Path, ...]:
    # Asked each time: HOME may differ between tests (and sessions) in one process.
    return (Path.home().resolve(), Path("/").resolve())


def resolve_in_root(root: Path, path: str) -> Path:
    """`path` (relative to `root`, or absolute) resolved, refused unless inside `root`.

    Resolution follows symlinks, so a link pointing outside is refused as well as
    `..` escapes and absolute paths elsewhere. The file is then opened along the
    resolved path with no symlink following (:func:`_open_under`), so a link swapped
    in after this check is refused rather than followed.
    """
    if "\x00" in path:
        raise ToolError("Invalid path: it contains a NUL character.")
    root = root.resolve()
    candidate = Path(path.strip() or ".")
    if not candidate.is_absolute():
        candidate = root / candidate
    try:
        resolved = candidate.resolve()
    except (OSError, RuntimeError, ValueError) as exc:  # RuntimeError: symlink loop on 3.11
        raise ToolError(f"Cannot resolve {path!r}: {exc}") from exc
    if not resolved.is_relative_to(root):
        raise ToolError(f"Access denied: {path!r} is outside the project root.")
    return resolved


def _check_private(target: Path, shown: str, private_dirs: tuple[Path, ...]) -> None:
    if any(target == d or target.is_relative_to(d) for d in private_dirs):
        raise ToolError(f"Access denied: {shown} is qwenmem's own data (sessions, memories, keys).")
    store = credential_store(target)
    if store is not None:
        raise ToolError(
            f"Access denied: {shown} is in a credential store ({store}); those are never read."
        )


def _open_under(root: Path, target: Path, *, directory: bool) -> int:
    """An fd for ``target`` (resolved, inside ``root``), opened one component at a time
    from ``root`` with ``O_NOFOLLOW``: whatever was swapped in since the check, the fd
    is the file the path names now, never one a symlink points to."""
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW
    fd = os.open(root, flags | os.O_DIRECTORY)
    try:
        parts = target.relative_to(root).parts
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            # O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused after).
            mode = flags | (os.O_DIRECTORY if directory or not last else os.O_NONBLOCK)
            next_fd = os.open(part, mode, dir_fd=fd)
            os.close(fd)
            fd = next_fd
    except BaseException:
        os.close(fd)
        raise
    return fd


def _swapped(exc: OSError) -> bool:
    # ELOOP: a symlink where the check saw a file or directory; ENOTDIR: a file there.
    return exc.errno in (errno.ELOOP, errno.ENOTDIR)


def display_name(name: str) -> str:
    """A file name as text the model, the terminal and SQLite can all take: names that
    are not UTF-8 (surrogate escapes from the file system) show their bytes as ``\\xNN``."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _display(root: Path, path: Path) -> str:
    relative = path.relative_to(root.resolve()).as_posix()
    return display_name(relative) if relative != "." else "."


def _read_text(root: Path, path: str, private_dirs: tuple[Path, ...] = ()) -> str:
    shown = _display(root, resolve_in_root(root, path))
    text, size = read_confined(
        root, path, private_dirs, max_bytes=READ_FILE_MAX_BYTES + 1, refuse_over=READ_FILE_MAX_BYTES
    )
    # One byte past the cap was read: the file may have grown since it was checked.
    if size > READ_FILE_MAX_BYTES:
        raise _too_large(shown, size, READ_FILE_MAX_BYTES)
    if not text:
        return f"({shown} is empty)"
    return text


def _too_large(shown: str, size: int, limit: int) -> ToolError:
    return ToolError(f"{shown} is too large to read ({size} bytes; the limit is {limit // 1024} KiB).")


def read_confined(
    root: Path,
    path: str,
    private_dirs: tuple[Path, ...] = (),
    *,
    max_bytes: int,
    refuse_over: int | None = None,
) -> tuple[str, int]:
    """The text of ``path`` (at most its first ``max_bytes`` bytes) with its secrets cut
    out, and its size in bytes — under the file tools' policy, which anything qwenmem
    reads from a project for the model shares (read_file, instruction files): inside
    ``root`` after links are resolved, opened without following a link swapped in,
    never ``private_dirs`` or a credential store (by name, or a hard link to one),
    only a regular text file (no /proc, device or FIFO), never one holding a private
    key. ToolError says why not; also, given ``refuse_over``, a file larger than that
    (refused by its size before a byte of it is read)."""
    target = resolve_in_root(root, path)
    shown = _display(root, target)
    _check_private(target, shown, private_dirs)
    try:
        fd = _open_under(root.resolve(), target, directory=False)
    except FileNotFoundError:
        raise ToolError(f"No such file: {shown}") from None
    except OSError as exc:
        if _swapped(exc):
            raise ToolError(f"{shown} changed while being read (a symlink appeared); not read.") from None
        raise ToolError(f"Cannot read {shown}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise ToolError(f"{shown} is a directory; use list_directory.")
        if not stat.S_ISREG(info.st_mode):
            raise ToolError(f"{shown} is not a regular file.")
        if info.st_nlink > 1 and (info.st_dev, info.st_ino) in _home_credential_files(Path.home()):
            raise ToolError(f"Access denied: {shown} is a hard link to a credential file; not read.")
        if refuse_over is not None and info.st_size > refuse_over:
            raise _too_large(shown, info.st_size, refuse_over)
        data = _read_up_to(fd, max_bytes)
    except OSError as exc:
        raise ToolError(f"Cannot read {shown}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if b"\x00" in data[:_BINARY_SNIFF_BYTES]:
        raise ToolError(f"{shown} is a binary file ({len(data)} bytes); not shown.")
    size = max(info.st_size, len(data))
    if not data:
        return "", size
    return _without_secrets(shown, data.decode("utf-8", errors="replace")), size


_PRIVATE_KEY = re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")


def _without_secrets(shown: str, text: str) -> str:
    """The file's text for the model with every secret span cut out; a file holding a
    private key is refused whole (the rest of it is rarely worth the risk)."""
    if _PRIVATE_KEY.search(text):
        raise ToolError(f"Access denied: {shown} holds a private key; not read.")
    return secrets.redact_noted(text, shown)


def _read_up_to(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = os.read(fd, limit - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _list_directory(root: Path, path: str, private_dirs: tuple[Path, ...] = ()) -> str:
    target = resolve_in_root(root, path)
    shown = _display(root, target)
    _check_private(target, shown, private_dirs)
    try:
        fd = _open_under(root.resolve(), target, directory=True)
    except FileNotFoundError:
        raise ToolError(f"No such directory: {shown}") from None
    except NotADirectoryError:
        if target.is_dir():  # a directory at check time: swapped since
            raise ToolError(f"{shown} changed while being listed; not listed.") from None
        raise ToolError(f"{shown} is a file; use read_file.") from None
    except OSError as exc:
        if _swapped(exc):
            raise ToolError(f"{shown} changed while being listed (a symlink appeared).") from None
        raise ToolError(f"Cannot list {shown}: {exc.strerror or exc}") from None
    try:
        with os.scandir(fd) as scan:
            # Git's own store is noise to the model and a waste of its context.
            entries = sorted((e for e in scan if e.name != ".git"), key=lambda e: e.name)
        lines = []
        for entry in entries[:LIST_DIRECTORY_MAX_ENTRIES]:
            try:
                is_dir = entry.is_dir()  # follows symlinks: a link to a dir reads as one
            except OSError:
                is_dir = False
            lines.append(display_name(entry.name) + ("/" if is_dir else ""))
    except OSError as exc:
        raise ToolError(f"Cannot list {shown}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if not entries:
        return f"({shown} is empty)"
    if len(entries) > LIST_DIRECTORY_MAX_ENTRIES:
        lines.append(f"… and {len(entries) - LIST_DIRECTORY_MAX_ENTRIES} more entries")
    return "\n".join(lines)


def builtin_tools(
    project_root: Path,
    *,
    start: Path | None = None,
    private_dirs: tuple[Path, ...] | None = None,
) -> ToolRegistry:
    """A registry with `read_file` and `list_directory`, confined to `project_root`
    (or to `start`, the directory qwenmem was started in, when the root would be the
    user's home or `/`), never reading `private_dirs` (default: qwenmem's homes) or
    credential stores."""
    root = confined_root(Path(project_root), Path.cwd() if start is None else start)
    private = default_private_dirs() if private_dirs is None else private_dirs
    broad = root in _broad_roots()

    def check_named(path: str, ctx: ToolContext) -> None:
        # Started in the home directory (or /), everything the user owns is "the
        # project": the model may open only what the user pointed at.
        if broad and not _named_by_user(root, path, user_words(ctx.view())):
            raise ToolError(
                f"Access denied: qwenmem runs in {root}, so file tools open only the files "
                f"and folders the user names in a message; {path!r} was not named."
            )

    async def read_file(args: JSONObject, ctx: ToolContext) -> str:
        check_named(str(args["path"]), ctx)
        return await asyncio.to_thread(_read_text, root, str(args["path"]), private)

    async def list_directory(args: JSONObject, ctx: ToolContext) -> str:
        path = str(args.get("path") or ".")
        check_named(path, ctx)
        return await asyncio.to_thread(_list_directory, root, path, private)

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
