"""A lexical find counts in recall's fusion by the share of the question's words it
holds (``Recaller.word_shares``): one shared common word must not put a memory a
whole rank-1 share ahead of the fact the dense channel found first."""

from __future__ import annotations

import pytest
from memtest_support import PROJECT_A

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
    e5_service.recaller.word_shares = False  # rank alone: the one-word find comes first
    plain = await e5_service.recall(question, project=PROJECT_A, record=False)
    assert plain.ids[0] == ids["payment_provider"]
