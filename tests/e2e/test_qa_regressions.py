"""CLI regressions found using the installed `qwenmem` from a shell: a closed pipe
reported as a crash, `--config` refused after the command. The pipe needs the real
process; the rest runs through the CLI's own entry in this process (`cli_run`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cli_support import CliRunner

QWENMEM = Path(sys.executable).with_name("qwenmem")


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QWENMEM_")}
    env["QWENMEM_HOME"] = str(home)
    return env


def test_a_closed_pipe_is_not_an_error(cli_run: CliRunner, tmp_path: Path) -> None:
    # `qwenmem sessions | head -1` printed "qwenmem: unexpected error: BrokenPipeError".
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    lines = "".join(
        f'{{"category": "project", "key": "fact_{n}", "value": "fact {n}"}}\n' for n in range(3)
    )
    (tmp_path / "facts.jsonl").write_text(lines)
    imported = cli_run("memory", "import", str(tmp_path / "facts.jsonl"), home=home, cwd=project)
    assert imported.returncode == 0, imported.stderr
    env = _env(home)
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written
    try:
        done = subprocess.run(
            [str(QWENMEM), "memory", "export"],
            cwd=project, env=env, stdout=write, stderr=subprocess.PIPE, text=True, timeout=60,
        )
    finally:
        os.close(write)
    assert "error" not in done.stderr.lower()
    assert "Traceback" not in done.stderr
    assert done.returncode == 141  # like any Unix tool killed by SIGPIPE


def test_config_is_accepted_after_the_command(cli_run: CliRunner, tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    bad = tmp_path / "bad.toml"
    bad.write_text("[llm]\nmodel = 3\n")
    for args in (["sessions", "--config", str(bad)], ["memory", "list", "--config", str(bad)]):
        done = cli_run(*args, home=home, cwd=project)
        # The file after the command is the one read: its error, exit 2 (contract §2).
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().splitlines() == [
            f"qwenmem: {bad}: llm.model: expected a string, got 3"
        ]


def test_memory_list_values_line_up_with_long_keys(cli_run: CliRunner, tmp_path: Path) -> None:
    # A key longer than the 24-character column pushed its value out of line.
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    facts = tmp_path / "facts.jsonl"
    facts.write_text(
        '{"category": "project", "key": "db", "value": "uses sqlite"}\n'
        '{"category": "project", "key": "a_rather_long_key_about_the_build", '
        '"value": "runs on make"}\n'
        "not json\n"
    )
    imported = cli_run("memory", "import", str(facts), home=home, cwd=project)
    # The bad line is named as such, not with a bare json.loads message.
    assert f"qwenmem: {facts}: line 3: not valid JSON" in imported.stderr
    listed = cli_run("memory", "list", home=home, cwd=project)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert len(lines) == 2, listed.stdout
    columns = {
        line.index(value)
        for value in ("uses sqlite", "runs on make")
        for line in lines
        if value in line
    }
    assert len(columns) == 1, listed.stdout
