"""The `qwenmem` command line: config errors, dispatch, `sessions`, crash reporting."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import CliRunner

from qwenmem_tui import cli
from qwenmem_tui.config import Settings, load_settings
from qwenmem_tui.paths import Paths, project_id
from qwenmem_tui.storage.database import Database
from qwenmem_tui.storage.sessions import SessionStore

HEAVY = ("openai", "textual", "numpy", "faiss", "starlette", "uvicorn", "pydantic", "httpx")

_HELP_PROBE = """
import json, sys
from qwenmem_tui import cli
try:
    cli.main(["--help"])
except SystemExit:
    pass
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


def test_help_loads_none_of_the_heavy_libraries() -> None:
    """`qwenmem --help` (and the start of every command) stays well under 0.3 s: the SDK,
    Textual, numpy/FAISS, the server stack and the config models load where used."""
    done = subprocess.run(
        [sys.executable, "-c", _HELP_PROBE], capture_output=True, text=True, timeout=60
    )
    assert "memory" in done.stdout and "serve" in done.stdout  # the full help was printed
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert loaded.isdisjoint(HEAVY), sorted(loaded & set(HEAVY))


def test_invalid_config_is_one_line_and_exit_2(cli_run: CliRunner, tmp_path: Path) -> None:
    # Which errors and how they read: test_config.py; here the command's exit path.
    (tmp_path / "config.toml").write_text('[llm]\nmodle = "x"\n')
    done = cli_run("sessions", home=tmp_path, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert str(tmp_path / "config.toml") in lines[0]


def test_missing_explicit_config_is_exit_2(cli_run: CliRunner, tmp_path: Path) -> None:
    done = cli_run(
        "--config", str(tmp_path / "nope.toml"), "sessions", home=tmp_path, cwd=tmp_path
    )
    assert done.returncode == 2 and "config file not found" in done.stderr


def test_explicit_config_is_read(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path / "other.toml"
    other.write_text('[llm]\nmodel = "other"\n')
    seen: list[Settings] = []

    def capture(args: argparse.Namespace, settings: Settings, paths: Paths) -> int:
        seen.append(settings)
        return 0

    monkeypatch.setattr(cli, "list_sessions", capture)
    assert cli.run(["--config", str(other), "sessions"]) == 0
    assert seen[0].llm.model == "other" and seen[0].source == other


def test_sessions_empty_without_creating_a_database(
    home: Path, project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(project)
    assert cli.run(["sessions", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert cli.run(["sessions"]) == 0
    assert "No sessions yet" in capsys.readouterr().out
    assert not Paths(home).db_file.exists()


async def _seed(paths: Paths, project: Path) -> list[str]:
    paths.ensure()
    db = await Database.open(paths.db_file)
    try:
        now = iter([1000.0, 2000.0, 3000.0, 4000.0, 5000.0, 6000.0])
        store = SessionStore(db, clock=lambda: next(now))
        old = await store.create_session(project_id(project), "older chat")
        new = await store.create_session(project_id(project), "newer chat")
        await store.create_session("/some/other/project", "elsewhere")
        return [new.id, old.id]
    finally:
        await db.close()


def test_sessions_lists_this_project_newest_first(
    home: Path, project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import asyncio

    expected = asyncio.run(_seed(Paths(home), project))
    monkeypatch.chdir(project / ".git")  # anywhere inside the project
    assert cli.run(["sessions", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in rows] == expected
    assert {"id", "title", "updated_at", "message_count"} <= set(rows[0])
    assert rows[0]["title"] == "newer chat"
    assert cli.run(["sessions"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["ID", "UPDATED", "MSGS", "TITLE"]
    assert "newer chat" in table[1] and "older chat" in table[2] and len(table) == 3


def test_unexpected_error_is_one_line_with_traceback_in_debug_log(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def boom(args: argparse.Namespace, settings: Settings, paths: Paths) -> int:
        raise RuntimeError(f"kaboom with {settings.api_key_value()}")

    monkeypatch.setattr(cli, "list_sessions", boom)
    assert cli.run(["sessions"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "kaboom" in err and "Traceback" not in err
    assert settings_key(home) not in err
    log_text = (Paths(home).debug_dir / "cli.txt").read_text()
    assert "Traceback" in log_text and "RuntimeError" in log_text
    assert settings_key(home) not in log_text


def settings_key(home: Path) -> str:
    return load_settings(Paths(home).config_file).api_key_value() or "<none>"


def test_async_and_args_only_commands(home: Path) -> None:
    paths = Paths(home)
    settings = load_settings(paths.config_file)
    args = argparse.Namespace()

    async def three(a: argparse.Namespace, s: Settings, p: Paths) -> int:
        return 3

    def one(a: argparse.Namespace) -> None:
        return None

    assert cli._call(three, args, settings, paths) == 3
    assert cli._call(one, args, settings, paths) == 0


def test_missing_feature_modules_are_not_offered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        cli, "FACE_MODULES", ("qwenmem_tui.no_such_face.cli", "no_such_pkg.cli")
    )
    parser = cli.build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["serve"])


def test_broken_feature_module_warns_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "broken_feature.py").write_text(
        "def register(subparsers):\n    raise ValueError('nope')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(cli, "FACE_MODULES", ("broken_feature",))
    parser = cli.build_parser()
    assert parser.parse_args(["sessions"]).command == "sessions"
    assert (
        capsys.readouterr().err.strip()
        == "qwenmem: broken_feature is unavailable: ValueError: nope"
    )


def test_no_command_launches_the_tui(
    home: Path, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import qwenmem_tui.tui.app as app_module

    calls: list[dict[str, object]] = []

    class StubApp:
        return_code = 0
        kept_session_id = None  # what the real app left on screen (printed on quit)

        def run(self) -> None:
            calls[-1]["ran"] = True

    def fake_create_app(settings: Settings, paths: Paths, **kwargs: object) -> StubApp:
        calls.append({"model": settings.llm.model, **kwargs})
        return StubApp()

    async def seed() -> str:
        db = await Database.open(Paths(home).db_file)
        try:
            return (await SessionStore(db).create_session(project_id(project), "earlier")).id
        finally:
            await db.close()

    import asyncio

    session_id = asyncio.run(seed())
    monkeypatch.setattr(app_module, "create_app", fake_create_app)
    monkeypatch.chdir(project)
    assert cli.run([]) == 0
    assert cli.run(["--resume"]) == 0
    assert cli.run(["--resume", session_id[:8]]) == 0  # a unique prefix is enough
    assert [c["resume"] for c in calls] == [None, True, session_id]
    assert all(c["ran"] and c["cwd"] == project and c["model"] == "test-model" for c in calls)


def test_subcommand_without_an_action_is_a_usage_error(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    original = cli.build_parser

    def with_bare_group(**kwargs: bool) -> argparse.ArgumentParser:
        parser = original(**kwargs)
        subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        subparsers.add_parser("bare")
        return parser

    monkeypatch.setattr(cli, "build_parser", with_bare_group)
    with pytest.raises(SystemExit) as info:
        cli.run(["bare"])
    assert info.value.code == 2 and "which action?" in capsys.readouterr().err


def test_version_is_read_only_when_asked(cli_run: CliRunner, tmp_path: Path) -> None:
    # The installed version is looked up lazily (importlib.metadata is slow to scan).
    done = cli_run("--version", home=tmp_path, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("qwenmem ")
    assert done.stdout.split()[1] not in ("", "None")


def test_a_terminal_that_hung_up_at_quit_gets_no_traceback(
    home: Path, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tmux killed or the window closed: the quit line's resume command has nowhere to
    go (EIO on stdout); the run still ends with the app's status, no traceback (seen in
    tmux: OSError [Errno 5] from _run_tui)."""
    import errno
    import io

    import qwenmem_tui.tui.app as app_module

    class StubApp:
        return_code = 0
        kept_session_id = "0123456789abcdef"

        def run(self) -> None:
            pass

    class HungUp(io.StringIO):
        def write(self, text: str) -> int:
            raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(app_module, "create_app", lambda *a, **kw: StubApp())
    monkeypatch.chdir(project)
    monkeypatch.setattr(sys, "stdout", HungUp())
    assert cli.run([]) == 0
