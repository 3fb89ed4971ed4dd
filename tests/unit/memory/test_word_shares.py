"""A lexical find counts in recall's fusion by the share of the question's words it
holds (``Recaller.word_shares``): one shared common word must not put a memory a
whole rank-1 share ahead of the fact the dense channel found first. And a word the
memory holds only in another script (a name: "Taras" / "Тарас") counts for the
threshold as one held as written does (``lexical.spelled_elsewhere``)."""

from __future__ import annotations

import pytest
from memtest_support import PROJECT_A, saved_by_key

from qwenmem_tui.memory.lexical import query_terms, spelled_elsewhere
from qwenmem_tui.memory.model import WriteRequest
from qwenmem_tui.memory.recall import fuse
from qwenmem_tui.memory.service import MemoryService


def test_each_lexical_find_is_scaled_by_its_share_and_the_dense_ranks_are_not() -> None:
    plain = fuse([1, 2], [3, 1], lexical_weight=1.0, k=10)
    shared = fuse([1, 2], [3, 1], lexical_weight=1.0, k=10, shares={1: 1.0, 2: 0.25})
    assert shared[1] == plain[1]  # all the words: as before
    assert shared[2] == pytest.approx(plain[2] * 0.25)
    assert shared[3] == plain[3]  # dense only
    assert fuse([4], [], lexical_weight=1.0, shares={})[4] == 0.0  # no share known: none


NOTES = [
    ("project", "monitoring", "Métricas vão para o Prometheus e os alertas para o canal #ops-alertas."),
    ("project", "secrets_storage", "Secrets live in Vault under kv/app; never in .env files in the repo."),
    ("project", "payment_provider", "Payments go through Adyen; Stripe is only used for the US store."),
    ("reference", "onboarding", "New hires follow the onboarding checklist in Notion, page 'Primeiros dias'."),
    ("project", "ci", "CI runs on GitHub Actions now."),
]


async def test_one_shared_common_word_does_not_outrank_the_answer_in_another_language(
    e5_service: MemoryService,
) -> None:
    # bench/recall_corpus.jsonl: "where do alerts go?" found "Payments go through
    # Adyen" by "go" alone (one word of two) and ranked it before the Portuguese answer.
    ids = {}
    for category, key, value in NOTES:
        ids[key] = (await e5_service.save(WriteRequest(category, key, value, origin="user", project=PROJECT_A))).memory.id
    question = "where do alerts go?"
    result = await e5_service.recall(question, project=PROJECT_A, record=False)
    assert result.ids[0] == ids["monitoring"]
    e5_service.recaller.weighted = False  # the shares within rank fusion (as fact identity fuses)
    result = await e5_service.recall(question, project=PROJECT_A, record=False)
    assert result.ids[0] == ids["monitoring"]
    e5_service.recaller.word_shares = False  # rank alone: the one-word find comes first
    plain = await e5_service.recall(question, project=PROJECT_A, record=False)
    assert plain.ids[0] == ids["payment_provider"]


def _spelled(query: str, value: str) -> float:
    return spelled_elsewhere(query, query_terms(query), "note", value)


def test_a_word_spelled_in_another_script_is_held_and_a_short_one_or_one_held_as_written_is_not() -> None:
    assert _spelled("Was macht Taras bei uns?", "Мій колега Тарас працює тестувальником.") == pytest.approx(1 / 3)
    # An abugida's words read whitespace-apart (``words`` splits them at vowel signs).
    assert _spelled("जोहान क्या करता है?", "Min kompis Johan kör lastbil.") == 1.0
    assert _spelled("Где размещён фронтенд?", "O frontend é publicado na Vercel.") > 0
    assert _spelled("where is the frontend?", "O frontend é publicado.") == 0.0  # held as written
    assert _spelled("Что на ужин?", "Na Sexta comemos pizza.") == 0.0  # "na": too short to tell


async def test_a_name_in_another_script_passes_the_threshold_the_cosine_alone_misses(
    e5_service: MemoryService,
) -> None:
    # bench/crosslang_fresh2.jsonl: the colleague ranked first at 0.79, under 0.81, and
    # "Was macht Taras bei uns?" got nothing.
    notes = [
        ("colleague_job", "Мій колега Тарас сидить поруч зі мною і працює тестувальником."),
        ("daughter_pets", "Mijn dochter heeft twee konijnen, Snuf en Flap."),
        ("payments_db", "Layanan pembayaran memakai MongoDB, bukan Postgres."),
    ]
    ids = list((await saved_by_key(e5_service, "user", notes)).values())
    question = "Was macht Taras bei uns?"
    result = await e5_service.recall(question, project=PROJECT_A, record=False)
    assert result.ids[:1] == ids[:1]
    assert ids[1] not in result.ids  # nothing else is let in by it
    found = await e5_service.recaller.candidates(question, scopes=("global", PROJECT_A), limit=20)
    colleague = next(c for c in found if c.memory.id == ids[0])
    threshold = e5_service.recaller.threshold
    assert colleague.lexical is None and colleague.dense is not None and threshold is not None
    assert colleague.dense < threshold  # the cosine alone would drop it


async def test_a_name_in_another_script_also_ranks_its_memory(e5_service: MemoryService) -> None:
    # bench/crosslang_fresh2.jsonl: asked in Hindi, the Swedish note about Johan ranked
    # behind notes about Go and ClickHouse (jobs, in other words).
    notes = [
        ("friend_job", "Min kompis Johan kör lastbil åt DHL."),
        ("backend_language", "后端代码都是用 Go 写的。"),
        ("logs_db", "La base de données des logs est ClickHouse."),
        ("minh_job", "Bạn tôi Minh là lập trình viên ở Sài Gòn."),
        ("employer", "Tôi làm việc ở Shopee được hai năm rồi."),
    ]
    ids = list((await saved_by_key(e5_service, "user", notes)).values())
    result = await e5_service.recall("जोहान क्या काम करता है?", project=PROJECT_A, record=False)
    assert result.ids[:1] == ids[:1]


def test_a_pasted_paragraph_is_read_by_its_first_words() -> None:
    paste = "hello " + "слово " * 200_000 + "Тарас"
    assert _spelled("hello Тарас", "Taras works here") > 0
    assert spelled_elsewhere(paste, ["hello"], "note", "Taras works here") == 0.0  # past its first words
    assert spelled_elsewhere("Т" * 100_000, ["x"], "note", "TTTTTTTT") == 0.0  # no word that long
