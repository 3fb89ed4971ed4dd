"""Whose life a note is about, read in the embedder's space: the person's own (their
family's and friends') or a project's.

The rule files a note by its words (``subject.category_of``: project words in three
languages, a first-person pronoun it knows), and the attribute reading by the nearest
of some twenty attributes (``meaning.Reading.owner``): a fact of no listed attribute
in a language the rule does not read — "Estudo na USP", "我是皇马的球迷" — went wherever
its nearest attribute lives (a deploy target, a project's language). The examples of
``owners.py`` (a person's life and a project's, eleven languages, varied attributes
and forms) fit a discriminant (``meaning.discriminant``): the one direction that
separates the two sides while holding each side's own spread — its attributes,
languages and forms — small. A note is read on it, scaled so the two sides' centroids
sit at -1 (life) and +1 (project); it says whose only past ``MARGIN``.

The examples' vectors and the direction fitted on them ship for the default embedder
(``owners-*.npy``, ``owner-space-*.npz``, written by ``bench/bench_filing.py
--write-owners``); another embedder reads nothing here (the rule and the attribute
reading file its notes, as before).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from qwenmem_tui.memory.meaning import NEUTRAL, SHIPPED, class_means, discriminant, load_arrays
from qwenmem_tui.memory.model import Category, embed_text
from qwenmem_tui.memory.owners import OWNERS, example_rows

if TYPE_CHECKING:  # the writer imports this module: reading commands never load numpy
    import numpy as np

RIDGE = 0.3
"""The discriminant's regularisation (as ``meaning.RIDGE``)."""
MARGIN = 0.3
"""How far from the midpoint (0; the sides' centroids at -1 and +1) a note must read
to say whose it is. On the tuning notes (bench/filing_corpus.jsonl, 112 in nineteen
languages): 105 read past 0.3, one wrongly ("Wdrażamy na Heroku", -0.38); the sign
alone is right for 111 (ridge 0.1-3.0 alike; leaving a language out of the fit, 171
to 173 of the 176 examples read right)."""
LEANS = 0.15
"""Nearer the midpoint than ``MARGIN`` but past this, a note's lean outweighs the
attribute its two readings agree on, narrowly ("Estudo na USP" -0.20, nearest a
deploy target by both); nearer still, that attribute's side is the better guess
("이제 조종사로 일해요" +0.10, an occupation)."""


@dataclass(frozen=True)
class OwnerSpace:
    """The life/project direction in one embedder's space."""

    mean: np.ndarray  # (dim,)
    direction: np.ndarray  # (dim,)
    centre: float  # the midpoint of the two sides' centroids on it
    half: float  # half their distance (life at centre - half, project at centre + half)

    def scores(self, vectors: np.ndarray) -> np.ndarray:
        """Each vector's place on the direction: -1 a life's centroid, +1 a project's."""
        import numpy as np

        z = (np.asarray(vectors, dtype=np.float32) - self.mean) @ self.direction
        scaled: np.ndarray = (z - self.centre) / self.half
        return scaled

    def owner(self, vector: np.ndarray, margin: float = MARGIN) -> Category | None:
        """``user`` or ``project`` when the note reads past ``margin``; else None."""
        score = float(self.scores(vector.reshape(1, -1))[0])
        if abs(score) < margin or score == 0:
            return None
        return Category.PROJECT if score > 0 else Category.USER


def example_texts() -> tuple[list[str], list[int]]:
    """The examples as a note is embedded (the neutral frame, ``meaning.NEUTRAL``)."""
    texts, rows = example_rows()
    return [embed_text(*NEUTRAL, text) for text in texts], rows


def vectors_name(embedder_id: str) -> str:
    """The examples' vectors' file name: this embedder's, these very texts'."""
    texts, rows = example_texts()
    parts = [embedder_id, *texts, ",".join(map(str, rows))]
    return f"owners-{hashlib.sha256(chr(10).join(parts).encode()).hexdigest()[:16]}.npy"


def space_file(embedder_id: str) -> str:
    """The fitted direction's file name: these examples' vectors, this ridge."""
    digest = hashlib.sha256(f"{vectors_name(embedder_id)}\n{RIDGE!r}".encode()).hexdigest()[:16]
    return f"owner-space-{digest}.npz"


def fit(vectors: np.ndarray, rows: Sequence[int]) -> OwnerSpace:
    """The two sides' discriminant of the examples' vectors."""
    import numpy as np

    x, which = np.asarray(vectors, dtype=np.float64), np.asarray(rows)
    mean, projection = discriminant(x, which, len(OWNERS), RIDGE)
    direction = projection[:, 0] / np.linalg.norm(projection[:, 0])
    life, project = class_means((x - mean) @ direction[:, None], which, len(OWNERS))[:, 0]
    if project < life:  # the eigenvector's sign is arbitrary: project on the + side
        direction, life, project = -direction, -life, -project
    return OwnerSpace(
        mean.astype(np.float32), direction.astype(np.float32), float((life + project) / 2), float((project - life) / 2)
    )


def save(path: Path, space: OwnerSpace) -> None:
    """Ship a fitted direction (``bench/bench_filing.py --write-owners``)."""
    import numpy as np

    np.savez(path, mean=space.mean, direction=space.direction, sides=np.asarray([space.centre, space.half]))


@lru_cache(maxsize=4)
def owner_space(embedder_id: str) -> OwnerSpace | None:
    """``embedder_id``'s direction as shipped, read once per process; None for any
    other embedder (or a damaged file: the rule files). Blocking: call it in a thread."""
    arrays = load_arrays(SHIPPED / space_file(embedder_id), ("mean", "direction", "sides"))
    if arrays is None:
        return None
    mean, direction, sides = arrays
    return OwnerSpace(mean, direction, float(sides[0]), float(sides[1]))
