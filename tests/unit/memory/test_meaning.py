"""Reading a fact by meaning (memory/meaning.py) on the real multilingual embedder: a
note's key names its attribute in any language, never its value; the person's facts
are theirs (``user``) whatever the sentence's first word; the prototypes' vectors are
kept in the index directory, private, ready before the first write."""

from __future__ import annotations

import stat
from pathlib import Path

import numpy as np
import pytest
from memtest_support import PROJECT_A

from qwenmem_tui.memory.embed import HashEmbedder
from qwenmem_tui.memory.meaning import STATEMENT_CHARS, MeaningReader
from qwenmem_tui.memory.model import Category, Memory, Origin, RememberRequest, Status, WriteRequest
from qwenmem_tui.memory.service import MemoryService
from qwenmem_tui.paths import Paths


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("Ich wohne in München", "home_city"),
        ("J'habite à Lyon", "home_city"),
        ("我住在北京", "home_city"),
        ("私はソニーで働いています", "employer"),
        ("저는 서울에 살아요", "home_city"),
        ("Я живу в Москве", "home_city"),
    ],
)
async def test_a_note_is_filed_under_its_attribute_in_any_language(
    e5_service: MemoryService, text: str, key: str
) -> None:
    result = await e5_service.remember(RememberRequest(text, project=PROJECT_A))
    assert (result.memory.category, result.memory.key) == (Category.USER, key)


# Hand checks that failed before attributes were read by their centroid (issue 35):
# none of these wordings is in the corpus or among the attribute examples.
@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("저는 부산으로 이사했어요", "home_city"),  # was user/note
        ("Abito a Milano", "home_city"),  # was user/occupation
        ("Я пользуюсь редактором Vim", "editor"),  # was user/note
        ("Редактор у меня — Neovim", "editor"),
        ("J'utilise Emacs comme éditeur", "editor"),  # was user/note
        ("저는 vim 편집기를 써요", "editor"),  # was user/note
        ("Uso neovim come editor", "editor"),
        ("我用 Vim 写代码", "editor"),
        ("Ik gebruik Emacs als editor", "editor"),
        ("名古屋に引っ越しました", "home_city"),
        ("Moro em Porto Alegre", "home_city"),
        ("Abito a Roma da due anni", "home_city"),
        ("私のエディタはEmacsです", "editor"),  # was user/note (the attribute space)
    ],
)
async def test_a_key_names_the_attribute_not_the_value_on_unseen_wordings(
    e5_service: MemoryService, text: str, key: str
) -> None:
    result = await e5_service.remember(RememberRequest(text, project=PROJECT_A))
    assert (result.memory.category, result.memory.key) == (Category.USER, key)


async def test_a_likely_restatement_is_linked_and_a_distinct_fact_is_not(e5_service: MemoryService) -> None:
    home = await e5_service.remember(RememberRequest("Ich wohne in München", project=PROJECT_A))
    work = await e5_service.remember(RememberRequest("Ich arbeite bei Siemens", project=PROJECT_A))
    moved = await e5_service.remember(RememberRequest("Ich bin nach Hamburg gezogen", project=PROJECT_A))
    assert work.memory.restates is None and moved.memory.restates == home.memory.id
    assert all(m.status is Status.ACTIVE for m in await e5_service.list(project=PROJECT_A))


async def test_what_the_plain_centroids_misread_is_linked_and_a_parent_s_city_is_not(
    e5_service: MemoryService,
) -> None:
    """Read by the plain centroids of English examples, "Je roule en Clio" was a home
    city (its restatement went unlinked) and a mother's city was the person's own (a
    distinct fact shown as an earlier version); the attribute space reads both."""
    clio = await e5_service.remember(RememberRequest("Je roule en Clio", project=PROJECT_A))
    tesla = await e5_service.remember(
        RememberRequest("J'ai vendu ma Clio, maintenant je roule en Tesla", project=PROJECT_A)
    )
    home = await e5_service.remember(RememberRequest("我住在西安", project=PROJECT_A))
    mother = await e5_service.remember(RememberRequest("我妈妈住在广州", project=PROJECT_A))
    assert tesla.memory.restates == clio.memory.id
    assert mother.memory.restates is None and home.memory.status is Status.ACTIVE


# A change sentence read alone leans to where it moved: these were read as a car (the
# company makes them), an editor and a car, or the older one left unread, and went
# unlinked. Read as a pair, the older fact's clear reading says which of the change's
# readings to believe. None of these wordings is in the corpus or the examples.
@pytest.mark.parametrize(
    ("older", "newer", "apart"),
    [
        ("トヨタに勤めています", "トヨタを辞めて、ソニーに入りました", "名古屋に住んでいます"),
        ("Por profesión soy cocinero", "Ahora trabajo de conductor", "Conduzco un Seat"),
        ("Sono un barista", "Adesso sono programmatore", "Abito a Pisa"),
    ],
)
async def test_a_change_sentence_is_read_beside_the_fact_it_changes(
    e5_service: MemoryService, older: str, newer: str, apart: str
) -> None:
    first = await e5_service.remember(RememberRequest(older, project=PROJECT_A))
    other = await e5_service.remember(RememberRequest(apart, project=PROJECT_A))
    changed = await e5_service.remember(RememberRequest(newer, project=PROJECT_A))
    assert changed.memory.restates == first.memory.id and other.memory.restates is None
    assert all(m.status is Status.ACTIVE for m in await e5_service.list(project=PROJECT_A))


async def test_the_default_embedder_reads_the_shipped_examples_and_writes_nothing(
    e5_service: MemoryService, mem_paths: Paths
) -> None:
    await e5_service.start()
    assert list(mem_paths.index_dir.glob("prototypes-*.npy")) == []
    # Read clearly as a car (the rule's key "auto" gives way to it). "Ich fahre einen
    # Golf" leads with a car only narrowly (0.08): its key is the value-free "note".
    result = await e5_service.remember(RememberRequest("Mein Auto ist ein Golf", project=PROJECT_A))
    assert result.memory.key == "car"


class CountingEmbedder:
    """A meaningful embedder no vectors ship for: counts what it is asked to embed."""

    id = "counting-embedder"

    def __init__(self) -> None:
        self.calls = 0

    async def embed_passages(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        rng = np.random.default_rng(len(texts))
        return rng.normal(size=(len(texts), 16)).astype(np.float32)


async def test_another_embedder_s_examples_are_embedded_once_and_kept_private(tmp_path: Path) -> None:
    embedder = CountingEmbedder()
    await MeaningReader(embedder, tmp_path / "index").prepare()  # type: ignore[arg-type]
    [kept] = list((tmp_path / "index").glob("prototypes-*.npy"))
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    await MeaningReader(embedder, tmp_path / "index").prepare()  # type: ignore[arg-type]
    assert embedder.calls == 1


async def test_a_writer_s_own_keys_are_never_linked_by_meaning_alone(e5_service: MemoryService) -> None:
    """save_memory, import and the daemon name their keys: two keys, two facts. A
    reading is for what /remember files; a rule or a project's fact is not one of the
    person's attributes (these were linked as versions of each other before)."""
    rows = [("user", "allergy", "I am allergic to peanuts and shellfish."),
            ("user", "car", "I drive a 2016 grey Toyota Auris hybrid."),
            ("feedback", "answer_language", "Always answer me in Portuguese, even when I write in English."),
            ("feedback", "answer_length", "Prefer short answers: a few sentences, no bullet-point lists."),
            ("project", "python_version", "The project targets Python 3.11; do not use 3.12 syntax."),
            ("project", "docker_base_image", "A imagem base do Docker é python:3.11-slim-bookworm.")]  # fmt: skip
    for category, key, value in rows:
        await e5_service.save(WriteRequest(category, key, value, origin=Origin.USER, project=PROJECT_A))
    linked = {m.key: m.restates for m in await e5_service.list(project=PROJECT_A) if m.restates}
    assert linked == {}


@pytest.mark.parametrize(
    ("first", "then"),
    [
        ("Mi coche es un Seat", "Mi padre conduce un Renault"),
        ("저는 서울에 살아요", "언니는 광주에 살아요"),
        # My wife's name, filed by meaning under ``name``, then mine: one key.
        ("Meine Frau heißt Anna", "Ich heiße Peter"),
        ("我儿子叫小明", "我叫王伟"),
        ("아내 이름은 지수예요", "제 이름은 민호예요"),
    ],
)
async def test_a_family_members_fact_of_my_attribute_is_not_linked_as_its_version(
    e5_service: MemoryService, first: str, then: str
) -> None:
    """My car and my father's read alike as a car, my name and my wife's as a name
    (filed under one key): the holder space reads two people, so the newer is no
    version of the older (it was linked, and recall marked the older as earlier)."""
    older = await e5_service.remember(RememberRequest(first, project=PROJECT_A))
    newer = await e5_service.remember(RememberRequest(then, project=PROJECT_A))
    assert newer.memory.restates is None
    assert (await e5_service.get(older.memory.id)).status is Status.ACTIVE


@pytest.mark.parametrize(
    ("note", "value_words"),
    [
        ("Pierogi są moim ulubionym daniem", {"pierogi"}),
        ("Berlin ist meine Lieblingsstadt", {"berlin"}),
        ("Tengo dos gatos", {"tengo", "gatos"}),
        # Not clear, but both readings lean to one attribute: it names the key.
        ("Blue is my favourite colour", {"blue"}),
    ],
)
async def test_a_sentence_opening_with_its_value_is_keyed_by_its_attribute(
    e5_service: MemoryService, note: str, value_words: set[str]
) -> None:
    """The rule reads a sentence's first word as a name in a language it does not
    read; that word may be the value. A clear attribute, or the one both readings
    lean to, names the key instead (it was ``pierogi``, ``berlin``, ``tengo``, ``blue``)."""
    written = await e5_service.remember(RememberRequest(note, project=PROJECT_A))
    assert not value_words & set(written.memory.key.split("_"))
    assert written.memory.category == "user"


class _Recording(HashEmbedder):
    """The hash embedder, keeping every passage it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.passages: list[str] = []

    async def embed_passages(self, texts: list[str]) -> np.ndarray:
        self.passages += texts
        return await super().embed_passages(texts)


async def test_a_long_memory_is_read_as_a_statement_by_its_opening() -> None:
    """Recall reads the facts it found as statements (versions of one fact); a whole
    1,500-character note cost ~0.7 s to embed, and a fresh process's first recall read
    three of them past ``memory.api_wait_ms`` (e2e10: ``-p`` got no memory)."""
    embedder = _Recording()
    reader = MeaningReader(embedder)
    note = "Deploy runbook for the billing service. " + "Step: migrate, restart, check the queue. " * 40
    stored = Memory(7, "ana", "global", Category.PROJECT, "runbook", note, Origin.USER, Status.ACTIVE, [], 0.0, 0.0, None)
    await reader.statements([stored])
    await reader.note_statement(note)
    assert len(embedder.passages) == 2
    for text in embedder.passages:
        assert "Deploy runbook for the billing service." in text
        assert len(text) < len(note) and len(text) <= STATEMENT_CHARS + 40  # the frame's few words
