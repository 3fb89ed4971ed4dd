"""One current truth in eleven languages (issue 35, "Done when"), as a user runs it:
the real `qwenmem` processes, on the default multilingual embedder, against the
loopback fake server, in fresh homes per language and per case.

In each language: a fact, a distinct fact about the same person, then the first
restated in other words.

- With a fast model that answers the judgement (`qwenmem memory add`, the shell's
  /remember): the old value is superseded, restorable with `memory restore`, and the
  distinct fact stays active.
- With no fast model reachable (it answers 404), in a real terminal (tmux, one
  session per language: one process costs less than the shell's four): three
  `/remember`s, then the question in that language. The distinct fact stays active,
  `qwenmem memory search` for the question — run from another project — puts the newer
  version first, and the request the chat model received never carries the older
  version unmarked.
- In both, no key holds a value word (and every key is ASCII snake_case).

The wordings are not the corpus's nor the TUI test's (tests/tui/test_identity_languages.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from process_support import checkout_env
from test_tmux_smoke import QWENMEM, Terminal, terminal  # noqa: F401 (the fixture)

from qwenmem_tui.testing.fake_openai import FakeOpenAI, HTTPError, Reply, Response, echo_responder

pytestmark = [
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
    pytest.mark.skipif(not QWENMEM.exists(), reason="the qwenmem script is not installed"),
]

CHAT, FAST = "test-model", "test-fast"

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
}


ANSWER = "Answered from memory."


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


def env_for(home: Path) -> dict[str, str]:
    # QWENMEM_EMBEDDING named explicitly: the suite's "hash" would reach the child.
    return checkout_env({
        "QWENMEM_HOME": str(home), "QWENMEM_EMBEDDING": "auto", "QWENMEM_DEBUG_LOG_FILE": "0",
        "TERM": "xterm-256color", "PATH": os.environ.get("PATH", ""), "HOME": str(home),
    })  # fmt: skip


def qwenmem(home: Path, cwd: Path, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "qwenmem_tui", *args], capture_output=True,
                          text=True, cwd=cwd, env=env_for(home), timeout=120)  # fmt: skip
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def rows(home: Path, cwd: Path) -> list[dict[str, Any]]:
    return sorted(json.loads(qwenmem(home, cwd, "memory", "list", "--all", "--json")), key=lambda m: m["id"])


def fold(text: str) -> str:
    """Lower case without accents: the form a key would carry a value word in."""
    import unicodedata

    decomposed = unicodedata.normalize("NFKD", text.lower())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def keys_hold_no_value(found: list[dict[str, Any]], values: tuple[str, ...]) -> None:
    for memory in found:
        key = memory["key"]
        assert key.isascii() and key == key.lower() and " " not in key, key
        for value in values:
            assert fold(value) not in key, (key, value)


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


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / ".git").mkdir(parents=True)
    return root


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    root = tmp_path / "another-project"
    (root / ".git").mkdir(parents=True)
    return root


@pytest.mark.parametrize("lang", sorted(CASES))
def test_with_a_judge_the_old_value_is_superseded_and_the_distinct_fact_stays(
    lang: str, fake: FakeOpenAI, tmp_path: Path, project: Path
) -> None:
    fact, distinct, restated, _, values = CASES[lang]
    fake.responder = judge_answering(restated)
    home = fresh_home(tmp_path / "judged", fake)
    said = [qwenmem(home, project, "memory", "add", text) for text in (fact, distinct, restated)]
    assert said[2].rstrip().endswith("(replaces the previous value)"), said
    first, other, newer = rows(home, project)
    assert (first["status"], first["superseded_by"]) == ("superseded", newer["id"]), first
    assert other["status"] == newer["status"] == "active"
    assert {m["category"] for m in (first, other, newer)} == {"user"}
    keys_hold_no_value([first, other, newer], values)
    restored = qwenmem(home, project, "memory", "restore", str(first["id"]))
    assert restored.startswith(f"Restored memory #{first['id']} (user/{first['key']})"), restored


def remember_in_a_terminal(terminal: Terminal, home: Path, project: Path, case: tuple[str, ...]) -> None:  # noqa: F811
    """/remember the three notes and ask the question in the real app, then quit."""
    terminal.start("chat", [str(QWENMEM)], cwd=project, env=env_for(home))
    terminal.wait_for("chat", "idle", timeout=120)
    for n, text in enumerate(case[:3], start=1):
        terminal.type("chat", f"/remember {text}")
        terminal.wait_for("chat", f"Remembered #{n} ", timeout=60)
    terminal.type("chat", case[3])
    screen = terminal.wait_for("chat", ANSWER, timeout=60)
    assert "Traceback" not in screen
    terminal.tmux("send-keys", "-t", "chat", "C-q")
    terminal.wait_for("chat", exited=True, timeout=60)


@pytest.mark.parametrize("lang", sorted(CASES))
def test_with_no_model_the_newer_version_comes_first_in_a_real_terminal(
    lang: str, fake: FakeOpenAI, tmp_path: Path, project: Path, elsewhere: Path,
    terminal: Terminal,  # noqa: F811
) -> None:
    fact, distinct, restated, question, values = case = CASES[lang]
    fake.responder = unreachable_fast_model
    home = fresh_home(tmp_path / "offline", fake)
    remember_in_a_terminal(terminal, home, project, case)

    first, other, newer = found = rows(home, project)
    assert other["status"] == newer["status"] == "active", found
    # Linked as the newer version, or superseded where the rule reads the language
    # and is sure: restorable either way.
    assert newer["restates"] == first["id"] or first["superseded_by"] == newer["id"], found
    keys_hold_no_value(found, values)
    # The person's facts are theirs in every project: searched from another one.
    hits = [m["id"] for m in json.loads(qwenmem(home, elsewhere, "memory", "search", question, "--json"))]
    assert newer["id"] in hits, hits
    assert first["id"] not in hits or hits.index(newer["id"]) < hits.index(first["id"]), hits
    [request] = [body for body in fake.chat_requests if body.get("model") == CHAT]
    block = "\n".join(str(m.get("content")) for m in request["messages"] if "<system-reminder>" in str(m.get("content")))
    assert restated in block, block
    for line in block.splitlines():
        if fact in line:
            assert "an earlier version" in line, line
