"""Issue #17, tools: qwenmem's own home, credential stores, a home-or-/ project root,
symlink swaps between check and open, and file names that are not UTF-8.

Real files in tmp dirs; the non-UTF-8 name goes through a whole chat turn into SQLite.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from chat_support import SessionFactory, collect, outcome_of

from qwenmem_tui.chat.tools import (
    ToolContext,
    ToolRegistry,
    ToolResult,
    _read_text,
    broad_root_notice,
    builtin_tools,
    confined_root,
    credential_store,
)
from qwenmem_tui.storage import SessionStore
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply, ToolCallSpec

API_KEY = "sk-live-do-not-send-1234567890"


@pytest.fixture
def root(project: Path) -> Path:
    """The shared project (a git root with a README)."""
    return project


def ctx_for(root: Path) -> ToolContext:
    return ToolContext(project_root=root, session_id="s1")


async def call(registry: ToolRegistry, root: Path, tool: str, path: str) -> ToolResult:
    return await registry.call(tool, json.dumps({"path": path}), ctx_for(root))


# -- qwenmem's own home ----------------------------------------------------------------


async def test_qwenmem_home_is_never_read_or_listed(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Started in the home directory without git, the project root holds .qwenmem:
    `read_file .qwenmem/config.toml` sent the API key to the model before."""
    home = root / ".qwenmem"
    home.mkdir()
    (home / "config.toml").write_text(f'[llm]\napi_key = "{API_KEY}"\n')
    monkeypatch.setenv("QWENMEM_HOME", str(home))
    registry = builtin_tools(root)
    for tool, path in [
        ("read_file", ".qwenmem/config.toml"),
        ("read_file", str(home / "config.toml")),
        ("list_directory", ".qwenmem"),
        ("read_file", "./.qwenmem/../.qwenmem/config.toml"),
    ]:
        result = await call(registry, root, tool, path)
        assert result.is_error and "qwenmem's own data" in result.content, (path, result)
        assert API_KEY not in result.content
    (root / "cfg").symlink_to(home / "config.toml")  # a link inside the project to it
    assert (await call(registry, root, "read_file", "cfg")).is_error
    assert (await call(registry, root, "read_file", "README.md")).content.startswith("# Demo")


# -- credential stores -----------------------------------------------------------------


CREDENTIAL_FILES = [
    ".ssh/id_ed25519",
    ".ssh/config",
    ".SSH/known_hosts",
    ".aws/credentials",
    ".config/gcloud/application_default_credentials.json",
    ".azure/msal_token_cache.json",
    ".kube/config",
    ".netrc",
    ".docker/config.json",
    ".gnupg/private-keys-v1.d/key.key",
    "Library/Keychains/login.keychain-db",
    ".pgpass",
    ".git-credentials",
    ".config/gh/hosts.yml",
    "keys/id_rsa",
]


@pytest.mark.parametrize("relative", CREDENTIAL_FILES)
async def test_credential_stores_are_refused_even_inside_the_project(
    root: Path, relative: str
) -> None:
    target = root / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(f"secret={API_KEY}\n")
    registry = builtin_tools(root)
    result = await call(registry, root, "read_file", relative)
    assert result.is_error and "credential store" in result.content, result
    assert API_KEY not in result.content
    if credential_store(target.parent.relative_to(root)) is not None:  # a store directory
        listed = await call(registry, root, "list_directory", str(target.parent.relative_to(root)))
        assert listed.is_error and target.name not in listed.content
    (root / "innocent.txt").symlink_to(target)
    assert (await call(registry, root, "read_file", "innocent.txt")).is_error


def test_ordinary_names_are_not_credential_stores() -> None:
    for path in ["src/ssh.py", "docs/aws.md", ".config/nvim/init.lua", "docker/config.json",
                 "id_rsa.pub", "netrc.md", "keys/README"]:
        assert credential_store(Path(path)) is None, path


# -- a project root that is the home or / ----------------------------------------------


def test_a_home_root_confines_tools_to_the_start_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user_home = tmp_path / "user"
    work = user_home / "notes"
    work.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(user_home))
    assert confined_root(user_home, work) == work.resolve()
    assert confined_root(Path("/"), work) == work.resolve()
    assert confined_root(user_home, user_home) == user_home.resolve()
    assert confined_root(work, work) == work.resolve()  # an ordinary project: unchanged
    notice = broad_root_notice(user_home, work)
    assert notice is not None and "\n" not in notice
    assert f"your home directory {user_home.resolve()}" in notice and str(work.resolve()) in notice
    assert "root directory /" in (broad_root_notice(Path("/"), work) or "")
    assert broad_root_notice(work, work) is None


async def test_tools_in_a_home_root_stay_in_the_start_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user_home = tmp_path / "user"
    work = user_home / "notes"
    work.mkdir(parents=True)
    (work / "todo.txt").write_text("buy milk\n")
    (user_home / "diary.txt").write_text("private diary\n")
    monkeypatch.setenv("HOME", str(user_home))
    registry = builtin_tools(user_home, start=work)
    assert (await call(registry, work, "read_file", "todo.txt")).content == "buy milk\n"
    for path in ["../diary.txt", str(user_home / "diary.txt")]:
        result = await call(registry, work, "read_file", path)
        assert result.is_error and "private diary" not in result.content
    assert "diary" not in (await call(registry, work, "list_directory", ".")).content


# -- symlink swap race -----------------------------------------------------------------


def test_a_symlink_swapped_in_after_the_check_is_never_followed(tmp_path: Path) -> None:
    """Another process flips `swap.txt` between a file and a link to a file outside.
    Resolving, then opening by path, read the outside file 50 times in 14,613 (issue
    #17); opening along the checked path with O_NOFOLLOW never does."""
    root = tmp_path / "project"
    root.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("OUTSIDE SECRET")
    inside, link = root / ".inside.tmp", root / ".link.tmp"
    swap = root / "swap.txt"
    swap.write_text("inside text")
    stop = threading.Event()

    def flip() -> None:
        while not stop.is_set():
            inside.write_text("inside text")
            os.replace(inside, swap)
            link.symlink_to(outside)
            os.replace(link, swap)

    flipper = threading.Thread(target=flip, daemon=True)
    flipper.start()
    escaped = reads = 0
    try:
        for _ in range(3_000):  # ~2 s; the old code escaped ~18 times in as many
            try:
                text = _read_text(root, "swap.txt")
            except Exception:
                continue  # refused (outside, changed, missing mid-swap): fine
            reads += 1
            escaped += "OUTSIDE" in text
    finally:
        stop.set()
        flipper.join(timeout=10)
    assert escaped == 0, f"{escaped} of {reads} reads returned the file outside"
    assert reads > 0  # the race was live: some reads saw the file inside


# -- names that are not UTF-8 ----------------------------------------------------------


async def test_a_non_utf8_name_is_listed_escaped_and_the_turn_is_stored(
    fake: FakeOpenAI,
    make_session: SessionFactory,
    session_store: SessionStore,
    project: Path,
) -> None:
    """Before, the surrogate in the name could not be stored and the turn ended in an
    internal error; now it is shown as \\xe9 and the whole turn is in the database."""
    os.close(os.open(os.fsencode(project) + b"/caf\xe9.txt", os.O_CREAT | os.O_WRONLY, 0o644))
    fake.script(
        Reply(tool_calls=[ToolCallSpec("list_directory", {"path": "."}, id="call_1")]),
        Reply("There is a cafe file."),
    )
    session = await make_session()
    events = await collect(session, "what files are there?")
    assert outcome_of(events).status == "ok", outcome_of(events)
    stored = await session_store.load_items(session.info.id)
    tool_item = next(item for item in stored if item.type == "tool")
    assert "caf\\xe9.txt" in tool_item.content
    tool_item.content.encode("utf-8")  # no surrogate left
    sent = [m["content"] for body in fake.chat_requests for m in body["messages"] if m["role"] == "tool"]
    assert sent and "caf\\xe9.txt" in sent[0]


async def test_arguments_with_a_lone_surrogate_are_an_answer_not_a_crash(root: Path) -> None:
    registry = builtin_tools(root)
    result = await registry.call("read_file", '{"path": "README\\ud800.md"}', ctx_for(root))
    assert result.is_error and "lone surrogate" in result.content
    result.content.encode("utf-8")
