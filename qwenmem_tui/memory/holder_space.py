"""Whose a fact is, as directions of the embedder's space: recall prefers a memory
held by the one the question asks about.

A small multilingual embedder reads "what does my father do?" as mostly "a job":
"Ich arbeite als Tierarzt" (the person's own) and "Ma sœur est comptable" sat as near
it as the father's own job in Japanese, and a question about where I live found my
brother's and my sister's cities first (recall_corpus, whose_corpus). Who holds a
fact is structure the cosine spends little of itself on.

The examples of ``holders.py`` (nine holders, eleven languages, statements and
questions on varied attributes) fit a discriminant (``meaning.discriminant``): the
directions that separate the holders while holding each holder's own spread — its
attributes, languages and forms — small. A question and a memory are read there
(eight dimensions, unit length), and their cosine, the holders' agreement, is added
to recall's fused score (``WEIGHT``): a reordering among what both channels found,
never a filter, so the threshold and small talk's abstention see what they saw.
Nothing here reads a word or a language: one projection, the same for every text.

What the two are about counts too, read in fact identity's attribute space
(``meaning.py``, ``ATTRIBUTE_WEIGHT``): "what is my job?" nearer "I work as a vet"
than "I work in Lyon".

The examples' vectors and the space fitted on them ship for the default embedder
(``holders-*.npy``, ``holder-space-*.npz``, written by ``bench/bench_crosslang.py
--write-holders``); another embedder gets no reordering.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from qwenmem_tui.memory.holders import HOLDERS, example_rows
from qwenmem_tui.memory.meaning import (
    NEUTRAL,
    SHIPPED,
    AttributeSpace,
    class_means,
    discriminant,
    load_arrays,
    load_space,
    space_name,
)
from qwenmem_tui.memory.meaning import example_texts as attribute_examples

if TYPE_CHECKING:  # the writer imports this module: reading commands never load numpy
    import numpy as np
from qwenmem_tui.memory.model import embed_text

WEIGHT = 0.03
"""The agreement's weight beside the fused score (reciprocal rank fusion: the first
dense rank is worth 1/11 ≈ 0.09, the fifth 1/15 ≈ 0.067): enough to move a memory a
few ranks, never one found by neither channel. Cross-language top-3 on the tuning
sets (bench_crosslang.py --holder), at 0 / 0.03 / 0.06 / 0.12: whose_corpus 57 / 63 /
62 / 61 of 66, recall_corpus 160 / 161 / 161 / 155 of 172, crosslang_corpus 15 / 15 /
15 / 14 of 16; same-language 32 / 33 / 33 / 33 of 33 and 51 / 52 / 52 / 52 of 52."""
ATTRIBUTE_WEIGHT = 0.01
"""The same for the attribute space's agreement. At 0 / 0.01 / 0.02 / 0.03 (the
holders' at 0.03): cross-language top-3 unchanged on crosslang_corpus and
whose_corpus, recall_corpus 161 / 161 / 162 of 172, top-1 126 / 131 / 131;
multilingual tuning half top-3 163 / 163 / 162 / 161 of 165."""
AGREEING_MARGIN = 0.02
"""How far under recall's threshold a memory may be and still pass, when it agrees
with the question on whose it is and what it is about (``agrees``): a relative's fact
said in the third person sits a little under a question about it (whose_corpus:
"息子のペットは何ですか？" and the son's rabbit, 0.793)."""
AGREE_HOLDER = 0.5
AGREE_ATTRIBUTE = 0.6
"""The cosines in the holder and the attribute space from which a memory agrees with
the question (``agrees``). Over the tuning sets' candidates, the rescue within 0.02
under the threshold at (0.5, 0.6): whose_corpus cross-language top-3 63 -> 65 of 66,
recall_corpus R@5 216 -> 217 of 224, small talk with abstention off 90 of 93 either
way, unanswerable questions answered 11 -> 12 of 20; at (0.5, 0.3) 18 of 20 (rejected),
within 0.03 (0.78) as many gained and 14 of 20."""
RIDGE = 1.0
"""The discriminant's regularisation (as ``meaning.RIDGE``): on whose_corpus's 33
facts and 99 questions, the holder nearest in the space was right for 31 facts and 97
questions at 0.1, 33 and 97 at 1.0 (0.03: 28 and 96)."""


@dataclass(frozen=True)
class HolderSpace:
    """The holders' discriminant in one embedder's space."""

    mean: np.ndarray  # (dim,)
    projection: np.ndarray  # (dim, holders - 1)
    # Each holder's statements' mean direction in the space (unit rows), None when the
    # examples' vectors are not shipped beside the space.
    centroids: np.ndarray | None = None

    def read(self, vectors: np.ndarray) -> np.ndarray:
        """Vectors (rows, or one) in the holder space, unit length."""
        import numpy as np

        z = (np.asarray(vectors, dtype=np.float32) - self.mean) @ self.projection
        unit: np.ndarray = z / np.maximum(np.linalg.norm(z, axis=-1, keepdims=True), 1e-9)
        return unit

    def agreement(self, query: np.ndarray, passages: np.ndarray) -> np.ndarray:
        """Each passage's cosine with the query in the holder space (-1..1). (A softmax
        over the holders' centroids instead, the likelihood that both have one holder,
        did worse on the tuning sets at every temperature tried: 0.1-1.0.)"""
        import numpy as np

        if not len(passages):
            return np.zeros(0, dtype=np.float32)
        agreed: np.ndarray = self.read(passages) @ self.read(query.reshape(-1))
        return agreed


    def nearest(self, vectors: np.ndarray) -> np.ndarray | None:
        """Each vector's nearest holder (an index into ``HOLDERS``), None without centroids."""
        if self.centroids is None:
            return None
        nearest: np.ndarray = (self.read(vectors).reshape(-1, self.centroids.shape[1]) @ self.centroids.T).argmax(axis=1)
        return nearest

    def one_holder(self, new: np.ndarray, old: np.ndarray, floor: float, *, nearest: bool = False) -> bool:
        """Whether two statements read as one holder's: their agreement at ``floor`` or
        above, and (``nearest``), short of the restatements' band (``RESTATED``), the
        same nearest holder — "Mein Chef heißt Jürgen" (a colleague's, 0.36 from "Ich
        heiße Sabine") is no earlier version of the person's own name. Not for two
        facts their readings filed under one attribute: "我家在杭州" reads nearest a
        child's, and "我最近搬到了深圳" is still its newer version."""
        import numpy as np

        agreement = float(self.agreement(new, old.reshape(1, -1))[0])
        if agreement < floor:
            return False
        if not nearest:
            return True
        nearest_ = self.nearest(np.stack([new.reshape(-1), old.reshape(-1)]))
        return agreement >= RESTATED or nearest_ is None or bool(nearest_[0] == nearest_[1])


def example_texts() -> tuple[list[str], list[str], list[int]]:
    """(statements as embedded, questions as asked, each one's holder): the statements
    in the neutral frame the attribute examples use (``meaning.NEUTRAL``)."""
    statements, questions, rows = example_rows()
    return [embed_text(*NEUTRAL, text) for text in statements], questions, rows


def vectors_name(embedder_id: str) -> str:
    """The examples' vectors' file name: this embedder's, these very texts'."""
    statements, questions, rows = example_texts()
    parts = [embedder_id, *statements, *questions, ",".join(map(str, rows))]
    return f"holders-{hashlib.sha256(chr(10).join(parts).encode()).hexdigest()[:16]}.npy"


def fit(vectors: np.ndarray, rows: Sequence[int]) -> HolderSpace:
    """The holders' discriminant of the examples' vectors."""
    import numpy as np

    mean, projection = discriminant(
        np.asarray(vectors, dtype=np.float64), np.asarray(rows), len(HOLDERS), RIDGE
    )
    return HolderSpace(mean.astype(np.float32), projection.astype(np.float32))


def space_file(embedder_id: str) -> str:
    """The fitted space's file name: these examples' vectors (``vectors_name``), this ridge."""
    digest = hashlib.sha256(f"{vectors_name(embedder_id)}\n{RIDGE!r}".encode()).hexdigest()[:16]
    return f"holder-space-{digest}.npz"


def save(path: Path, space: HolderSpace) -> None:
    """Ship a fitted space (``bench/bench_crosslang.py --write-holders``)."""
    import numpy as np

    np.savez(path, mean=space.mean, projection=space.projection)


_SPACES: dict[str, HolderSpace | None] = {}
_ATTRIBUTES: dict[str, AttributeSpace | None] = {}
_lock = threading.Lock()


def holder_space(embedder_id: str) -> HolderSpace | None:
    """``embedder_id``'s holder space as shipped (fitted on the examples' shipped
    vectors: fitting costs 0.1-3 CPU-s, a busy machine's BLAS threads, in every
    process's first recall), read once per process; None for any other embedder.
    Blocking: call it in a thread."""
    with _lock:
        if embedder_id in _SPACES:
            return _SPACES[embedder_id]
    # Not shipped (another embedder) or damaged: no reordering. Read-only: one space,
    # read by every recaller.
    arrays = load_arrays(SHIPPED / space_file(embedder_id), ("mean", "projection"))
    space = None if arrays is None else _with_centroids(HolderSpace(*arrays), embedder_id)
    with _lock:
        _SPACES[embedder_id] = space
    return space


def _with_centroids(space: HolderSpace, embedder_id: str) -> HolderSpace:
    """``space`` with each holder's centroid, from the statements' shipped vectors (as
    it was fitted on); unchanged when they are not there."""
    import numpy as np

    statements, _, rows = example_rows()
    try:
        vectors = np.load(SHIPPED / vectors_name(embedder_id)).astype(np.float32)[: len(statements)]
    except (OSError, ValueError):
        return space
    centroids = class_means(space.read(vectors), np.asarray(rows[: len(statements)]), len(HOLDERS))
    centroids /= np.maximum(np.linalg.norm(centroids, axis=1, keepdims=True), 1e-9)
    centroids.flags.writeable = False
    return HolderSpace(space.mean, space.projection, centroids)


def agrees(holders: np.ndarray, about: np.ndarray) -> np.ndarray:
    """Which memories agree with the question on both whose and what (their
    agreements in the two spaces, ``agreement`` and ``attribute_agreement``)."""
    agreed: np.ndarray = (holders >= AGREE_HOLDER) & (about >= AGREE_ATTRIBUTE)
    return agreed


def attribute_agreement(space: AttributeSpace, query: np.ndarray, passages: np.ndarray) -> np.ndarray:
    """Each passage's cosine with the query in the attribute space (-1..1)."""
    import numpy as np

    if not len(passages):
        return np.zeros(0, dtype=np.float32)
    agreed: np.ndarray = space.project(passages) @ space.project(query.reshape(1, -1))[0]
    return agreed


def attribute_space(embedder_id: str) -> AttributeSpace | None:
    """The fitted attribute space that ships for ``embedder_id`` (``meaning.SHIPPED``),
    read once per process; None for any other embedder. Blocking: call it in a thread."""
    with _lock:
        if embedder_id in _ATTRIBUTES:
            return _ATTRIBUTES[embedder_id]
    texts, rows = attribute_examples()
    space = load_space(SHIPPED / space_name(embedder_id, texts, rows))
    with _lock:
        _ATTRIBUTES[embedder_id] = space
    return space


TWO_PEOPLE = 0.0
"""The agreement below which two facts filed under one attribute key are still two
people's (never linked model-free): "Meine Frau heißt Anna" filed under ``name``, then
"Ich heiße Peter" read -0.29, and the eight such pairs of eleven languages tried
-0.35 to -0.01; restatements filed under one key read 0.14 and above."""

RESTATED = 0.47
"""The agreement from which two statements read as one holder's whatever their nearest
holders: restatements of the tuning pairs read 0.47 and above but one (``ONE_HOLDER``);
a colleague's or a boss's fact beside the person's own 0.33-0.40 ("Mi jefe se llama
Carlos" / "Me llamo Pedro" 0.33, "上司の名前は佐藤です" / "私の名前は田中です" 0.40),
where the nearest holders tell them apart (a colleague's, the person's)."""

ONE_HOLDER = 0.3
"""The holder space's agreement below which a new fact and an older one that read as
the same attribute are taken for two people's, never linked model-free (their keys
filed as one attribute, ``home_city`` / ``home_city_2``, still are). Statements of the
tuning pairs (identity_wordings, identity_versions, identity_corpus's tune half):
restatements at 0.47 and above but one (0.24, "Dario mora em Roma" / "Dario mudou-se
para Milão", which the rule merges on its own); my fact and a family member's of the
same attribute -0.48-0.25 ("Mi coche es un Seat" / "Mi padre conduce un Renault"
-0.35, "저는 서울에 살아요" / "언니는 광주에 살아요" 0.25, both linked before). A word that
also names a family reads low ("我家在杭州" / "我最近搬到了深圳" 0.14): filed under one
key, they are linked by it."""
