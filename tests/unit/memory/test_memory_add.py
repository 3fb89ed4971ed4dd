"""`qwenmem memory add TEXT`: /remember from the shell (issue 38, §14), through the
console script's entry against the fake endpoint (which the filing may ask)."""

from __future__ import annotations

import json
from pathlib import Path

from cli_support import CliRunner

from qwenmem_tui.testing.fake_openai import FakeOpenAI


def listed(cli_run: CliRunner, home: Path, project: Path) -> list[dict]:
    done = cli_run("memory", "list", "--json", home=home, cwd=project)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_add_prints_where_the_note_went_and_stores_it_as_the_users(
    cli_run: CliRunner, home: Path, project: Path, fake: FakeOpenAI
) -> None:
    done = cli_run(
        "memory", "add", "I", "live", "in", "Lisbon", "--category", "user", "--key", "home_city",
        home=home, cwd=project,
    )
    assert done.returncode == 0, done.stderr
    [memory] = listed(cli_run, home, project)
    assert done.stdout == f"Remembered #{memory['id']} user/home_city: I live in Lisbon\n"
    assert (memory["value"], memory["origin"], memory["status"]) == ("I live in Lisbon", "user", "active")


def test_json_answers_as_the_mcp_remember_tool(
    cli_run: CliRunner, home: Path, project: Path, fake: FakeOpenAI
) -> None:
    first = cli_run("memory", "add", "I use Helix as my editor", "--json", home=home, cwd=project)
    assert first.returncode == 0, first.stderr
    answer = json.loads(first.stdout)
    assert set(answer) == {"id", "category", "key", "action"} and answer["action"] == "created"
    [memory] = listed(cli_run, home, project)
    assert (memory["id"], memory["category"], memory["key"]) == (
        answer["id"], answer["category"], answer["key"],
    )
    again = cli_run(
        "memory", "add", "I use Helix as my editor", "--key", answer["key"], "--category",
        answer["category"], "--json", home=home, cwd=project,
    )
    assert json.loads(again.stdout)["action"] == "deduplicated"
    assert len(listed(cli_run, home, project)) == 1


def test_a_refused_note_is_one_line_and_exit_1(
    cli_run: CliRunner, home: Path, project: Path, fake: FakeOpenAI
) -> None:
    done = cli_run("memory", "add", "x", "--key", "Not A Key", home=home, cwd=project)
    assert done.returncode == 1
    assert done.stderr.startswith("qwenmem: not remembered: ") and len(done.stderr.splitlines()) == 1
    assert listed(cli_run, home, project) == []
