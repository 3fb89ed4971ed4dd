"""Filing a /remember note model-free in any language (issue 35, item 5), on the real
multilingual embedder: whose life it is (``owner_space.py``) files it where no rule
and no clear attribute does; a key is never the value nor a sentence's bare first
word; an attribute nobody listed takes no listed attribute's key. None of these notes
is in bench/filing_corpus.jsonl or among the examples; each failed before."""

from __future__ import annotations

import pytest
from memtest_support import PROJECT_A

from qwenmem_tui.memory.model import Category, RememberRequest
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.memory.subject import file_note, words


@pytest.mark.parametrize(
    ("text", "category"),
    [
        ("Estudo na USP", Category.USER),  # was project/deploy_target
        ("Curro en Mercadona", Category.USER),  # was project/curro
        ("我是皇马的球迷", Category.USER),  # was project/note
        ("ゴールドジムに通っています", Category.USER),  # was project/note
        ("Python 3.12 is what we use", Category.PROJECT),  # was user/python_3_12
        ("Die Webseite läuft auf Netlify", Category.PROJECT),  # was user/note
        ("Rust ist unsere Hauptsprache", Category.PROJECT),  # was user/languages
    ],
)
async def test_a_note_is_filed_by_whose_life_it_reads_as(
    e5_service: MemoryService, text: str, category: Category
) -> None:
    written = await e5_service.remember(RememberRequest(text, project=PROJECT_A))
    assert written.memory.category is category


@pytest.mark.parametrize(
    "text",
    [
        "Ich bin Fan von Borussia Dortmund",  # was ich
        "Je m'entraîne au Fitness Park",  # was je
        "Frequento il liceo Galilei",  # was frequento
        "Il frontend usa React 18",  # was il
        "Benim kızım Ayşe",  # was benim
        "Le vert est ma couleur préférée",  # was vert
        "Python 3.12 is what we use",  # was python_3_12
    ],
)
async def test_a_key_is_neither_the_value_nor_the_first_word(e5_service: MemoryService, text: str) -> None:
    written = await e5_service.remember(RememberRequest(text, project=PROJECT_A))
    said = set(words(text)) - {"est", "is", "we", "what", "use", "ma", "usa", "au"}
    assert not said & set(written.memory.key.split("_")), written.memory.key


async def test_an_unlisted_attribute_is_no_listed_one_s_key_nor_its_version(e5_service: MemoryService) -> None:
    """Supporting a club read nearest (narrowly) an employer: it was filed as
    ``user/employer``, and the person's employer, said next, linked to it as its
    newer version."""
    club = await e5_service.remember(RememberRequest("Torço para o Flamengo desde criança", project=PROJECT_A))
    job = await e5_service.remember(RememberRequest("Trabalho na Petrobras", project=PROJECT_A))
    assert club.memory.key == "note" and club.memory.category is Category.USER
    assert job.memory.restates != club.memory.id


async def test_a_name_someone_is_called_keeps_its_name(e5_service: MemoryService) -> None:
    boss = await e5_service.remember(RememberRequest("Carlos es mi jefe", project=PROJECT_A))
    assert boss.memory.key == "carlos"


def test_the_rule_tells_a_name_it_read_from_a_first_word_it_guessed() -> None:
    """No model: a third person's verb after a name reads someone named; a first word
    with none after it is a guess the meaning reading may overrule; a first-person
    verb the rule knows after it is the person's own attribute, its key the attribute
    alone (it was ``atualmente_home_city``)."""
    guessed = file_note("Ich bin Fan von Borussia Dortmund")
    assert guessed.first_word and not guessed.sure
    named = file_note("Dario plays the piano")
    assert (named.key, named.category, named.by_name, named.first_word) == ("dario", Category.PROJECT, True, False)
    assert file_note("Atualmente moro em Curitiba").key == "home_city"
    assert file_note("Le vert est ma couleur préférée").loose
