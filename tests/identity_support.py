"""One current truth in eleven languages as a user runs `qwenmem` (issue 35): the
wordings, homes and scripted fast models shared by the in-process runs
(tests/unit/memory/test_identity_cli.py) and the real terminal's
(tests/e2e/test_tmux_identity.py). A module, so both can import it.

The wordings are not the corpus's nor the TUI test's (tests/tui/test_identity_languages.py).
"""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path
from typing import Any

from cli_support import CliRunner

from qwenmem_tui.testing.fake_openai import FakeOpenAI, HTTPError, Reply, Response, echo_responder

CHAT, FAST = "test-model", "test-fast"
ANSWER = "Answered from memory."

# language: (a fact, a distinct fact about the same person, the first restated,
#            the question, the value words no key may hold)
CASES: dict[str, tuple[str, str, str, str, tuple[str, ...]]] = {
    "en": ("My home is in Leeds", "I work for Umbrella Corp", "I've just moved to Glasgow",
           "Where do I live now?", ("Leeds", "Umbrella", "Glasgow")),
    "pt": ("Moro em Salvador", "Sou engenheira de software", "Me mudei para Fortaleza",
           "Em que cidade eu moro?", ("Salvador", "engenheira", "Fortaleza")),
    "es": ("Resido en Granada", "Soy médico de familia", "Ahora vivo en Zaragoza",
           "¿En qué ciudad vivo?", ("Granada", "medico", "Zaragoza")),
    "de": ("Mein Wohnort ist Köln", "Ich bin Lehrerin von Beruf", "Ich bin nach Leipzig umgezogen",
           "In welcher Stadt wohne ich?", ("Koln", "Lehrerin", "Leipzig")),
    "fr": ("Je vis à Nantes", "Je bosse chez Michelin", "Je me suis installé à Bordeaux",
           "Dans quelle ville j'habite ?", ("Nantes", "Michelin", "Bordeaux")),
    "it": ("Abito a Milano", "Lavoro in Ferrari", "Mi sono trasferita a Bologna",
           "In che città abito?", ("Milano", "Ferrari", "Bologna")),
    "nl": ("Ik woon in Groningen", "Ik ben verpleegkundige", "Sinds kort woon ik in Eindhoven",
           "In welke stad woon ik?", ("Groningen", "verpleegkundige", "Eindhoven")),
    "zh": ("我家在杭州", "我是一名医生", "我最近搬到了深圳", "我现在住在哪个城市？",
           ("杭州", "医生", "深圳")),
    "ja": ("福岡に住んでいます", "私は看護師です", "名古屋に引っ越しました", "私はどこに住んでいますか？",
           ("福岡", "看護師", "名古屋")),
    "ko": ("저는 인천에 살아요", "저는 간호사예요", "저는 부산으로 이사했어요", "저는 어디에 살아요?",
           ("인천", "간호사", "부산")),
    "ru": ("Я живу в Самаре", "Я работаю врачом", "Я переехала в Новосибирск",
           "В каком городе я живу?", ("Самар", "врач", "Новосибирск")),
}  # fmt: skip


def fresh_home(path: Path, fake: FakeOpenAI) -> Path:
    """A new user's home on the default embedder, the fake server as chat and fast model."""
    path.mkdir(mode=0o700)
    (path / "config.toml").write_text(
        f'[llm]\nbase_url = "{fake.base_url}"\napi_key = "sk-test"\nmodel = "{CHAT}"\n'
        f'fast_model = "{FAST}"\nsession_titles = false\n'
        # Recall waited for at the first request (deterministic on a loaded machine).
        '[memory]\nembedding = "auto"\nextraction = false\ninitial_wait_ms = 30000\n'
        "api_wait_ms = 30000\n",
        encoding="utf-8",
    )
    (path / "config.toml").chmod(0o600)
    return path


def project_dir(path: Path) -> Path:
    """A project (a git root) the person works in."""
    (path / ".git").mkdir(parents=True)
    return path


AUTO = {"QWENMEM_EMBEDDING": "auto"}  # as the homes say (the suite's default is "hash")


def remembered(cli_run: CliRunner, fake: FakeOpenAI, tmp_path: Path, *texts: str) -> tuple[Path, Path]:
    """A fresh home holding ``texts``, remembered in order from a project with no fast
    model reachable; (home, project)."""
    fake.responder = unreachable_fast_model
    home = fresh_home(tmp_path / "home", fake)
    project = project_dir(tmp_path / "project")
    for text in texts:
        done = cli_run("memory", "add", text, home=home, cwd=project, env=AUTO)
        assert done.returncode == 0, done.stderr
    return home, project


def listed(cli_run: CliRunner, home: Path, project: Path) -> list[dict[str, Any]]:
    """Every memory of ``home`` as `memory list --all --json` prints it, oldest first."""
    return by_id(cli_run("memory", "list", "--all", "--json", home=home, cwd=project, env=AUTO).stdout)


def fold(text: str) -> str:
    """Lower case without accents: the form a key would carry a value word in."""
    decomposed = unicodedata.normalize("NFKD", text.lower())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def keys_hold_no_value(found: list[dict[str, Any]], values: tuple[str, ...]) -> None:
    for memory in found:
        key = memory["key"]
        assert key.isascii() and key == key.lower() and " " not in key, key
        for value in values:
            assert fold(value) not in key, (key, value)


def by_id(listed: str) -> list[dict[str, Any]]:
    """`memory list --all --json`'s rows, oldest first."""
    return sorted(json.loads(listed), key=lambda m: m["id"])


def judge_answering(restated: str) -> Any:
    """The fast model as a good model answers the identity judgement: the restatement
    updates the first fact (#1), anything else is added."""

    def respond(body: dict[str, Any]) -> Response:
        if body.get("model") != FAST:
            return echo_responder(body)
        try:
            asked = json.loads(body["messages"][-1]["content"])
            ids = [m["id"] for m in asked["existing"]]
            new = asked["new"]["value"]
        except (KeyError, TypeError, ValueError):
            return Reply("{}")
        action = {"action": "update", "id": 1} if new == restated and 1 in ids else {"action": "add", "id": None}
        return Reply(json.dumps({**action, "category": "user", "scope": "global"}))

    return respond


def unreachable_fast_model(body: dict[str, Any]) -> Response:
    if body.get("model") == FAST:
        return HTTPError(404, {"error": {"message": "model not found", "type": "not_found"}})
    return Reply(ANSWER)


def judged_rows_hold(said: list[str], found: list[dict[str, Any]], values: tuple[str, ...]) -> dict[str, Any]:
    """With a judge: the restatement replaced the first fact (returned, restorable),
    the distinct fact stays, all are the person's, no key holds a value."""
    assert said[2].rstrip().endswith("(replaces the previous value)"), said
    first, other, newer = found
    assert (first["status"], first["superseded_by"]) == ("superseded", newer["id"]), first
    assert other["status"] == newer["status"] == "active"
    assert {m["category"] for m in (first, other, newer)} == {"user"}
    keys_hold_no_value(found, values)
    return first


def offline_rows_hold(found: list[dict[str, Any]], values: tuple[str, ...]) -> tuple[int, int]:
    """With no model: the distinct fact stays, the restatement is the newer version
    (linked, or superseding where the rule reads the language and is sure: restorable
    either way), no key holds a value. Returns (the first's id, the newer's)."""
    first, other, newer = found
    assert other["status"] == newer["status"] == "active", found
    assert newer["restates"] == first["id"] or first["superseded_by"] == newer["id"], found
    keys_hold_no_value(found, values)
    return first["id"], newer["id"]


def newer_first(hits: list[int], first: int, newer: int) -> None:
    assert newer in hits, hits
    assert first not in hits or hits.index(newer) < hits.index(first), hits


def never_older_unmarked(fake: FakeOpenAI, case: tuple[str, ...]) -> None:
    """The one request the chat model received carries the restatement, and the first
    fact only marked as an earlier version."""
    fact, restated = case[0], case[2]
    [request] = [body for body in fake.chat_requests if body.get("model") == CHAT]
    block = "\n".join(
        str(m.get("content")) for m in request["messages"] if "<system-reminder>" in str(m.get("content"))
    )
    assert restated in block, block
    for line in block.splitlines():
        if fact in line:
            assert "an earlier version" in line, line
