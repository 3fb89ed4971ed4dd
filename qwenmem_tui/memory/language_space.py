"""The language a text is written in, as directions of the embedder's space: removed
from the dense channel so that a question finds its fact in any language.

A small multilingual embedder places every sentence of one language along shared
directions: for a Russian question about coffee, a Russian note about breakfast sat
nearer than the Spanish note about coffee. Removing the store's mean (``index.py``)
took the common part away, not what tells the languages apart.

The attribute examples (``attributes.py``) say the same things in eleven languages,
with every attribute in every language: their centroid per language differs from the
others by language, not by what is said. The span of those centroids (around their
mean: ten directions of 384) is the language subspace; recall ranks the dense channel
by the cosine of query and passage with it projected out (``dense.debiased``). Nothing
here reads a text's language at run time, and no word is matched: the projection is
one matrix, the same for every text, and it carries to languages the examples do not
hold (fitted without Russian, Russian questions across languages kept 23 of the 24
that the full fit gets, against 22 with no removal).

The fit needs only the examples' vectors, which ship for the default embedder
(``meaning.SHIPPED``): eleven class means and a 11 x 384 SVD, ~1 ms, once per process.
Shipping the fitted matrix as well would add a file to keep in step with the examples
(which change with the attributes) for no time saved.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from qwenmem_tui.memory.attributes import ATTRIBUTES
from qwenmem_tui.memory.meaning import SHIPPED, class_means, example_texts, prototypes_name

LANGUAGES = ("en", "pt", "es", "de", "fr", "it", "nl", "zh", "ja", "ko", "ru")
"""The examples' languages in the order ``attributes.py`` lists them: each attribute's
English examples first, then the same number (one or two) in each of the other ten."""


def example_languages() -> list[int]:
    """Each attribute example's language (an index into ``LANGUAGES``), in the order of
    ``meaning.example_texts``; read from that layout (``test_language_space`` checks
    it against the examples' scripts)."""
    rows: list[int] = []
    others = len(LANGUAGES) - 1
    for attribute in ATTRIBUTES:
        count = len(attribute.descriptions)
        each = (count - 1) // others  # at least one English example
        rows += [0] * (count - others * each) + [1 + i // each for i in range(others * each)]
    return rows


def fit_language_basis(vectors: np.ndarray, rows: Sequence[int]) -> np.ndarray:
    """An orthonormal basis (dim, languages - 1) of the span of the languages'
    centroids around their mean: the between-language directions."""
    x = np.asarray(vectors, dtype=np.float64)
    which = np.asarray(rows)
    means = class_means(x, which, len(LANGUAGES))
    _, strengths, directions = np.linalg.svd(means - means.mean(axis=0), full_matrices=False)
    kept = directions[strengths > strengths[0] * 1e-6]  # the centred means span one less
    basis: np.ndarray = kept.T.astype(np.float32)
    return basis


_BASES: dict[str, np.ndarray | None] = {}
_lock = threading.Lock()


def language_basis(embedder_id: str) -> np.ndarray | None:
    """The language subspace of ``embedder_id``'s space, fitted once per process from
    the examples' vectors that ship for it; None for any other embedder (recall then
    ranks and scores as before). Only the shipped embedder's is measured: an
    endpoint's model, whose examples' vectors the meaning reader may keep in the home,
    has its own threshold and spread, and nothing here to tell what removing its
    language directions does to them. Blocking: call it in a thread."""
    with _lock:
        if embedder_id in _BASES:
            return _BASES[embedder_id]
    texts, _ = example_texts()
    basis = None
    try:
        vectors = np.load(SHIPPED / prototypes_name(embedder_id, texts))
    except (OSError, ValueError):
        vectors = None  # not shipped (another embedder) or damaged: no removal
    if vectors is not None and vectors.shape[0] == len(texts):
        basis = fit_language_basis(vectors, example_languages())
        basis.flags.writeable = False  # one basis, read by every recaller
    with _lock:
        _BASES[embedder_id] = basis
    return basis
