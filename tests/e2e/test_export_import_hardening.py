"""Exports and imports that cannot be turned against the user (issue 36, items 4, 11, 12),
through the real `qwenmem` process with a temp home.

Variants tried: every secret format of the trust corpus after an escaped newline, in a
tool's arguments and in an item's meta (JSON export); a planted symbolic link (to a
file, dangling), an existing file, and --force, for both `sessions export -o` and
`memory export FILE`; deep nesting as the whole line, inside a field, with and
without --dry-run, and in a mem0 file.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import CliRunner
from process_support import checkout_env
from trust_corpus import SECRETS

from qwenmem_tui.paths import Paths, project_id
from qwenmem_tui.storage.database import Database
from qwenmem_tui.storage.sessions import Item, SessionInfo, SessionStore


def qwenmem(*args: str, home: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "qwenmem_tui", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        env=checkout_env(
            {
                "QWENMEM_HOME": str(home),
                "QWENMEM_DEBUG_LOG_FILE": "0",
                "PATH": os.environ.get("PATH", ""),
            }
        ),
    )


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "config.toml").write_text('[memory]\nembedding = "hash"\n')
    return home


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / ".git").mkdir(parents=True)
    return root


def leaky_items() -> list[tuple[str, str, dict | None, dict]]:
    """Every secret format glued behind a newline (an escape once serialised), in a
    message, in a tool call's arguments and in an item's meta."""
    items: list[tuple[str, str, dict | None, dict]] = []
    for n, fmt in enumerate(SECRETS):
        text = f"line one\\ said \"so\"\n{fmt.text}\nline three"
        call = {
            "id": f"c{n}",
            "type": "function",
            "function": {"name": "read_file", "arguments": json.dumps({"path": f"x\n{fmt.text}"})},
        }
        items += [
            ("user", text, {"role": "user", "content": text}, {}),
            ("assistant", "", {"role": "assistant", "content": "", "tool_calls": [call]}, {}),
            ("tool", "ok", {"role": "tool", "tool_call_id": f"c{n}", "content": "ok"},
             {"arguments": f"token\n{fmt.text}"}),
        ]  # fmt: skip
    return items


async def seed_session(home: Path, project: Path) -> SessionInfo:
    paths = Paths(home)
    paths.ensure()
    db = await Database.open(paths.db_file)
    try:
        store = SessionStore(db)
        info = await store.create_session(project_id(project), "leaky")
        for kind, content, message, meta in leaky_items():
            await store.add_item(Item(None, info.id, kind, content, message, meta, 1_790_000_000.0))
        return info
    finally:
        await db.close()


def test_json_session_export_is_valid_json_with_no_secret_left(home: Path, project: Path) -> None:
    info = asyncio.run(seed_session(home, project))
    ran = qwenmem("sessions", "export", info.id, "--format", "json", home=home, cwd=project)
    assert ran.returncode == 0, ran.stderr
    data = json.loads(ran.stdout)  # valid JSON, whatever the secrets were next to
    dumped = json.dumps(data, ensure_ascii=False)
    survived = [fmt.name for fmt in SECRETS if fmt.secret in dumped or fmt.secret in ran.stdout]
    assert survived == []
    first = data["items"][0]
    assert first["content"].startswith('line one\\ said "so"\n') and first["content"].endswith(
        "\nline three"
    )  # only the secret went; the text around it is as it was
    assert len(data["items"]) == 3 * len(SECRETS)


def test_exports_refuse_links_and_keep_existing_files(
    cli_run: CliRunner, home: Path, project: Path, tmp_path: Path
) -> None:
    """Fourteen exports, run in this process (`cli_run`, the console script's own entry):
    the JSON export above is the real process's smoke test for the same command."""
    info = asyncio.run(seed_session(home, project))
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    quiet = {"QWENMEM_DEBUG_LOG_FILE": "0"}
    exports = {
        "sessions": lambda out, *more: cli_run(
            "sessions", "export", info.id, "-o", str(out), *more, home=home, cwd=project, env=quiet
        ),
        "memory": lambda out, *more: cli_run(
            "memory", "export", str(out), *more, home=home, cwd=project, env=quiet
        ),
    }
    for name, export in exports.items():
        link = tmp_path / f"{name}-link.json"
        link.symlink_to(victim)
        dangling = tmp_path / f"{name}-dangling.json"
        dangling.symlink_to(tmp_path / f"{name}-nowhere")
        for planted in (link, dangling):
            for more in ((), ("--force",)):
                ran = export(planted, *more)
                assert ran.returncode == 1, (name, planted, more)
                assert "symbolic link" in ran.stderr and ran.stderr.count("\n") == 1
        assert victim.read_text() == "precious\n"
        assert not (tmp_path / f"{name}-nowhere").exists()

        existing = tmp_path / f"{name}-existing.json"
        existing.write_text("keep me\n")
        ran = export(existing)
        assert ran.returncode == 1 and "--force" in ran.stderr, (name, ran.stderr)
        assert existing.read_text() == "keep me\n"
        ran = export(existing, "--force")
        assert ran.returncode == 0, ran.stderr
        assert existing.read_text() != "keep me\n"

        fresh = tmp_path / f"{name}-fresh.json"
        assert export(fresh).returncode == 0 and fresh.exists()


def deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_deeply_nested_import_lines_are_one_clear_line_each(home: Path, project: Path, tmp_path: Path) -> None:
    lines = [
        json.dumps({"category": "user", "key": "editor", "value": "helix"}),
        deep(200_000),
        '{"category": "user", "key": "k", "value": "v", "scope": ' + deep(100_000) + "}",
        '{"category": "user", "key": "k2", "value": "v", "origin": [' + deep(50) + "]}",
        '{"category": "user", "key": "k3", "value": ' + deep(60) + "}",
    ]
    source = tmp_path / "deep.jsonl"
    source.write_text("\n".join(lines) + "\n")
    for more in ((), ("--dry-run",), ("--trust",)):
        ran = qwenmem("memory", "import", *more, str(source), home=home, cwd=project)
        out = ran.stdout + ran.stderr
        assert "RecursionError" not in out and "Traceback" not in out and "unexpected" not in out
        for number in (2, 3, 4, 5):
            named = [line for line in out.splitlines() if f"line {number}" in line]
            assert len(named) == 1, (more, number, out)
            assert len(named[0]) < 300
        assert ran.returncode == 1, (more, out)  # something was rejected
    mem0 = tmp_path / "mem0.json"
    mem0.write_text('{"results": ' + deep(200_000) + "}")
    ran = qwenmem("memory", "import", "--from", "mem0", str(mem0), home=home, cwd=project)
    assert ran.returncode == 1 and "nested too deeply" in ran.stderr
    assert "Traceback" not in ran.stderr and ran.stderr.count("\n") == 1
