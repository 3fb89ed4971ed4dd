"""The language a text is written in, as directions of the embedder's space: removed
from the dense channel so that a question finds its fact in any language.

A small multilingual embedder places every sentence of one language along shared
directions: for a Russian question about coffee, a Russian note about breakfast sat
nearer than the Spanish note about coffee. Removing the store's mean (``index.py``)
took the common part away, not what tells the languages apart.

The sentences of ``languages.py`` say the same ten things in 19 languages: their
centroid per language differs from the others by language, not by what is said. The
span of those centroids (around their mean: 18 directions of 384) is the language
subspace; recall ranks the dense channel by the cosine of query and passage with it
projected out (``dense.debiased``). Nothing here reads a text's language at run time,
and no word is matched: the projection is one matrix, the same for every text, and it
carries to languages the sentences do not hold.

It was first fitted from the attribute examples' eleven languages (``attributes.py``).
From these sentences the dense channel alone ranks each tuning set's cross-language
answers higher (MRR: crosslang_corpus 0.919 -> 0.927, whose_corpus 0.828 -> 0.856,
crosslang_fresh 0.880 -> 0.905, crosslang_fresh2 0.786 -> 0.806, recall_corpus 0.906
-> 0.911); their eleven languages alone did nearly as well (0.927, 0.854, 0.906,
0.756, 0.910: the new languages are fresh2's gain), four more (cs, ro, el, th) no
better (whose_corpus and the multilingual tuning half each lost a question or two in
the whole pipeline).

The fit needs only the sentences' vectors, which ship for the default embedder
(``languages-*.npy``, written by ``bench/bench_crosslang.py --write-languages``): 19
class means and a 19 x 384 SVD, ~1 ms, once per process.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence

import numpy as np

from qwenmem_tui.memory.holder_space import example_texts as holder_examples
from qwenmem_tui.memory.holder_space import vectors_name as holder_vectors_name
from qwenmem_tui.memory.languages import KINDS, SENTENCES
from qwenmem_tui.memory.meaning import NEUTRAL, SHIPPED, class_means
from qwenmem_tui.memory.model import embed_text

LANGUAGES = tuple(SENTENCES)
"""The sentences' languages, in their order in ``languages.py``."""


def sentence_texts() -> tuple[list[str], list[str], list[int]]:
    """(statements as embedded, questions as asked, each vector's language index): the
    statements in the neutral frame memories are embedded in (``meaning.NEUTRAL``),
    all statements first, then all questions (``vectors_name``'s order)."""
    statements, questions, rows = [], [], []
    for kind in ("S", "Q"):
        for lang, said in enumerate(SENTENCES.values()):
            texts = [text for text, form in zip(said, KINDS, strict=True) if form == kind]
            if kind == "S":
                statements += [embed_text(*NEUTRAL, text) for text in texts]
            else:
                questions += texts
            rows += [lang] * len(texts)
    return statements, questions, rows


def vectors_name(embedder_id: str) -> str:
    """The sentences' vectors' file name: this embedder's, these very texts'."""
    statements, questions, rows = sentence_texts()
    parts = [embedder_id, *statements, *questions, ",".join(map(str, rows))]
    return f"languages-{hashlib.sha256(chr(10).join(parts).encode()).hexdigest()[:16]}.npy"


def fit_language_basis(vectors: np.ndarray, rows: Sequence[int]) -> np.ndarray:
    """An orthonormal basis (dim, languages - 1) of the span of the languages'
    centroids around their mean: the between-language directions."""
    x = np.asarray(vectors, dtype=np.float64)
    which = np.asarray(rows)
    means = class_means(x, which, int(which.max()) + 1)
    _, strengths, directions = np.linalg.svd(means - means.mean(axis=0), full_matrices=False)
    kept = directions[strengths > strengths[0] * 1e-6]  # the centred means span one less
    basis: np.ndarray = kept.T.astype(np.float32)
    return basis


def shipped_vectors(name: str, count: int) -> np.ndarray | None:
    """The ``count`` example vectors shipped as ``name``; None when they are not (another
    embedder's) or are damaged (unreadable, or not one vector an example)."""
    try:
        vectors: np.ndarray = np.load(SHIPPED / name)
    except (OSError, ValueError):
        return None
    return vectors if vectors.shape[0] == count else None


def question_bank(embedder_id: str) -> np.ndarray | None:
    """The shipped questions' vectors (these sentences' and the holders' examples',
    ``holder_space.py``): questions of every kind in many languages, against which
    recall tells a hub from an answer (``dense.hubness``); None for any other embedder.
    Blocking: call it in a thread (read once per process by the recaller)."""
    parts = []
    for texts, name in ((sentence_texts, vectors_name), (holder_examples, holder_vectors_name)):
        statements, questions, _ = texts()
        vectors = shipped_vectors(name(embedder_id), len(statements) + len(questions))
        if vectors is None:
            return None
        parts.append(vectors[len(statements) :].astype(np.float32))
    bank = np.concatenate(parts)
    bank.flags.writeable = False
    return bank


_BASES: dict[str, np.ndarray | None] = {}
_lock = threading.Lock()


def language_basis(embedder_id: str) -> np.ndarray | None:
    """The language subspace of ``embedder_id``'s space, fitted once per process from
    the sentences' vectors that ship for it; None for any other embedder (recall then
    ranks and scores as before). Only the shipped embedder's is measured: an
    endpoint's model has its own threshold and spread, and nothing here to tell what
    removing its language directions does to them. Blocking: call it in a thread."""
    with _lock:
        if embedder_id in _BASES:
            return _BASES[embedder_id]
    _, _, rows = sentence_texts()
    basis = None
    vectors = shipped_vectors(vectors_name(embedder_id), len(rows))  # None: no removal
    if vectors is not None:
        basis = fit_language_basis(vectors, rows)
        basis.flags.writeable = False  # one basis, read by every recaller
    with _lock:
        _BASES[embedder_id] = basis
    return basis
