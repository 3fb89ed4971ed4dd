"""What a fact is about, read by meaning: attributes in the embedder's space.

The multilingual embedder places "J'habite à Lyon", "我住在北京" and "I moved to Berlin"
near one another. The attributes a person or a project commonly has (``attributes.py``:
each with example statements in eleven languages, whether it holds one value at a time
and whose it is) let the write path, with no model and in any language the embedder
reads:

- name a fact's key by its attribute (``home_city``), never by its value;
- file it: the person's facts are ``user`` memories, the project's are ``project`` ones;
- link a likely restatement: a new fact and a close neighbour read as the same
  single-valued attribute (one of them clearly) are linked as versions, never merged.

A fact is read in the attribute space: the directions of the embedder's space that
separate the attributes' examples while holding each attribute's own spread — its
languages, values and wordings — small (a regularised linear discriminant fitted on
the examples, per embedder, in a few milliseconds). In the raw space a sentence sits
nearest sentences of its own language and form ("Je roule en Clio" read as a home
city, "Ich fahre einen Golf" as a job); in the attribute space language and value
are the noise the fit removes. A reading is clear when its best attribute leads the
next by ``MARGIN`` there and the plain centroids' nearest attribute agrees (a fact
of no listed attribute — a blood type, a gym schedule — lands somewhere in the
discriminant's space, rarely on the same attribute in both); anything less is
"unknown" for keys and filing. Two facts are also read as a pair: a change sentence
read alone often leans to where it moved ("Ich habe zu SAP gewechselt" nearest a home
city), and the older fact's clear reading says which of its readings to believe
(``same_attribute``). The hash embedder has no meaning: nothing is read.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from qwenmem_tui.memory.attributes import ATTRIBUTES, Attribute
from qwenmem_tui.memory.model import Category, Memory, embed_text
from qwenmem_tui.paths import private_dir, private_file

if TYPE_CHECKING:
    import numpy as np

    from qwenmem_tui.memory.embed import Embedder


# Only the person's own attributes link model-free: a project's facts are too varied for
# a few prototypes (two tickets, two database hosts read as one attribute), so theirs
# wait for the model's judgement.
LINKABLE = {a.key: a for a in ATTRIBUTES if a.single and a.category is Category.USER}

MARGIN = 0.2
"""How far the best attribute's cosine must lead the next one's, in the attribute
space, for a reading to be clear (the plain centroids' nearest must agree too). On the
tuning statements (bench/identity_wordings.jsonl, 272 hand-written in eleven
languages): 231 clear, 3 wrongly; the plain centroids alone at their best margin,
204 and 7 (231 and 4 since the change examples, nearest right 257 against 254). Of the 86 recall_corpus facts of no listed attribute, 14 read clearly as
one (a blood type as an email, a meeting's day as a release date)."""
RIDGE = 0.1
"""The discriminant's regularisation (the share of the examples' mean spread added to
each direction): 0.03-1.0 read the tuning statements alike (0.93 right), lower
over-fits the examples' wordings."""
_K = TypeVar("_K", int, str)
_CACHE = 4096  # readings of stored memories, by id (a bulk import reads each once)
_NOTES = 64  # readings of notes just read, by text, until they are stored
_STATEMENTS = 256  # statements' vectors of stored memories, by id (recall's versions)
STATEMENT_CHARS = 300
"""A statement is read from its opening: what a fact is about is said first, and a
fact is shorter than this. A whole 1,500-character deploy note cost ~0.7 s to embed
(e5's cost grows with length; 300 characters ~0.1 s), and a fresh process's first
recall read three: 4.9 s at load 10, past ``memory.api_wait_ms`` (e2e10)."""
_V = TypeVar("_V")


def statement_text(value: str) -> str:
    """What is embedded to read a memory's value as a statement: its opening
    (``STATEMENT_CHARS``) in the neutral frame."""
    return embed_text(*NEUTRAL, value[:STATEMENT_CHARS])


@dataclass(frozen=True)
class Reading:
    """A fact read by meaning: its attribute when clear, whose it is when clear."""

    attribute: Attribute | None
    owner: Category | None
    top: Attribute | None = None  # the nearest attribute, however narrowly
    # The nearest attribute when the plain centroids' nearest agrees, however narrowly:
    # what a note's key may name when nothing clearer can be had (never a link).
    named: Attribute | None = None
    plain: Attribute | None = None  # the plain centroids' nearest
    second: Attribute | None = None  # the next nearest in the attribute space
    lead: float = 0.0  # how far the nearest leads the next there (clear at ``MARGIN``)

    def could_be(self, attribute: Attribute) -> bool:
        """Whether this reading leaves room for ``attribute``, a neighbour's clear
        one: not clearly another, and nearest it in the attribute space, or nearest
        it by the plain centroids and next nearest in the space ("Ich habe zu SAP
        gewechselt": a home city in the space, then an employer; an employer by the
        centroids). A change sentence read alone leans to where it moved; read beside
        the older fact, the older one's clear reading says which of its readings to
        believe. On the tuning pairs (bench/identity_wordings.jsonl,
        identity_corpus.jsonl's tune half), the space's second within 0.05-0.1 of its
        first linked nothing more than this; within 0.15-0.2, one to two distinct
        pairs; the plain nearest without the space's second, a cook beside "Conduzco
        un Seat" (a distinct pair, in a set written for this)."""
        if self.attribute not in (None, attribute):
            return False
        return attribute == self.top or attribute == self.plain == self.second


OWNER_MARGIN = 0.1
"""How far the person's best attribute must lead the project's (or the reverse), in
the attribute space, for the reading to say whose the fact is (recall_corpus: 38 of 46
user facts read as the person's, 5 as the project's; 25 of 40 project facts as the
project's, 5 as the person's; the rest unsaid)."""
SHIPPED = Path(__file__).parent
"""Where the examples' vectors for the default embedder ship (``prototypes-*.npy``)
and the space fitted on them (``space-*.npz``), both written by
``bench/bench_identity.py --write-prototypes``: a first run, and every fresh home,
reads them instead of embedding ~400 sentences, and every process that opens memory
reads the space instead of fitting it (0.03 CPU-s on one BLAS thread, 0.2-0.6 with
its default threads on a busy machine, in every ``memory add`` and every launch)."""
NEUTRAL = (Category.USER, "note")
"""The category and key prototypes and unfiled notes are embedded under: one frame for
all, so the frame says nothing about which attribute a fact reads as."""


class MeaningReader:
    """Reads facts in the attribute space, fitted once per embedder."""

    def __init__(self, embedder: Embedder, cache_dir: Path | None = None) -> None:
        self.embedder = embedder
        # Where the examples' vectors are kept between runs when none ship for this
        # embedder: embedding ~400 sentences costs seconds of the real model, a first
        # /remember must not pay them.
        self.cache_dir = cache_dir
        self._space: AttributeSpace | None = None
        self._lock = asyncio.Lock()
        self._readings: OrderedDict[int, Reading] = OrderedDict()
        # Notes just read (``read_note``), by text: the reading a note is stored with,
        # and its statement (``note_statement``).
        self._notes: OrderedDict[str, Reading] = OrderedDict()
        self._note_vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        # Stored memories' statements (``statements``), by id, for recall's versions.
        self._statements: OrderedDict[int, np.ndarray] = OrderedDict()

    @property
    def meaningful(self) -> bool:
        """Whether the embedder's vectors carry meaning (the hash one's do not)."""
        return not self.embedder.id.startswith("hash")

    async def prepare(self) -> None:
        """Fit the attribute space now (its examples' vectors shipped, cached or
        embedded), ahead of the first write."""
        await self._load()

    async def _load(self) -> AttributeSpace:
        async with self._lock:
            if self._space is None:
                texts, rows = example_texts()
                shipped = SHIPPED / space_name(self.embedder.id, texts, rows)
                self._space = await asyncio.to_thread(load_space, shipped)
                if self._space is None:
                    vectors = await self._vectors(texts)
                    self._space = await asyncio.to_thread(fitted_space, vectors, rows)
            return self._space

    async def _vectors(self, texts: list[str]) -> np.ndarray:
        """The examples' vectors: shipped with qwenmem for this embedder and these
        texts, else from the home's cache file, else embedded and kept there (0600,
        replaced atomically)."""
        import numpy as np

        name = prototypes_name(self.embedder.id, texts)
        for folder in (SHIPPED, self.cache_dir):
            if folder is None:
                continue
            try:
                cached: np.ndarray = await asyncio.to_thread(np.load, folder / name)
                if cached.shape[0] == len(texts):
                    return cached.astype(np.float32)
            except (OSError, ValueError):
                pass  # absent or damaged: embedded again
        vectors = await self.embedder.embed_passages(texts)
        if self.cache_dir is not None:
            await asyncio.to_thread(_save, self.cache_dir / name, vectors)
        return vectors

    async def read(self, vector: np.ndarray | None) -> Reading:
        """What the fact whose passage vector is ``vector`` is about."""
        if vector is None or not self.meaningful:
            return Reading(None, None)
        return (await self._load()).read(vector)

    async def read_note(self, text: str) -> Reading:
        """``read`` for a note not filed yet (one passage embedding, in the neutral frame)."""
        if not self.meaningful:
            return Reading(None, None)
        reading = await self.read(await self.note_statement(text))
        _keep(self._notes, text.strip(), reading, _NOTES)
        return reading

    async def note_statement(self, text: str) -> np.ndarray:
        """A note's text as a passage in the neutral frame, embedded once while it is
        written: its reading and each holder check against an older fact use it."""
        vector = self._note_vectors.get(text.strip())
        if vector is None:
            [vector] = await self.embedder.embed_passages([statement_text(text)])
            _keep(self._note_vectors, text.strip(), vector, _NOTES)
        return vector

    def noted(self, text: str) -> Reading | None:
        """The reading ``read_note`` gave this very text, if it was read just now: a
        note is kept with that one, not with a reading of its stored text, whose key
        was itself read from the note ("Je bosse chez Renault" filed as ``car`` reads
        more clearly a car under that key, and its restatement as an employer, "J'ai
        quitté Renault pour Airbus", would no longer find room for it)."""
        return self._notes.get(text.strip())

    def remember(self, memory_id: int, reading: Reading) -> None:
        """Keep a stored memory's reading: later writes compare against it for free."""
        _keep(self._readings, memory_id, reading, _CACHE)

    def kept(self, memory_id: int) -> bool:
        """Whether a stored memory's reading is at hand (no embedding to read it)."""
        return memory_id in self._readings

    async def _reading_of(self, memory: Memory) -> Reading:
        """A stored memory's reading: kept from its write, else its text read alone,
        in the neutral frame as a note is (its key may be a reading of it already)."""
        return (await self.readings([memory]))[memory.id]

    async def statements(self, memories: Sequence[Memory]) -> np.ndarray:
        """The memories' texts as passages in the neutral frame, one row each: how close
        two statements are, whatever key each was filed under (the last few kept)."""
        import numpy as np

        unread = list({m.id: m for m in memories if m.id not in self._statements}.values())
        if unread:
            vectors = await self.embedder.embed_passages([statement_text(m.value) for m in unread])
            for memory, vector in zip(unread, vectors, strict=True):
                _keep(self._statements, memory.id, vector, _STATEMENTS)
        return np.stack([self._statements[m.id] for m in memories])

    async def readings(self, memories: Sequence[Memory]) -> dict[int, Reading]:
        """``_reading_of`` for several memories, those not kept embedded in one batch."""
        found = {m.id: r for m in memories if (r := self._readings.get(m.id)) is not None}
        unread = list({m.id: m for m in memories if m.id not in found}.values())
        if unread:
            vectors = await self.statements(unread)
            for memory, vector in zip(unread, vectors, strict=True):
                found[memory.id] = await self.read(vector)
                self.remember(memory.id, found[memory.id])
        return found

    async def likely_restatement(
        self,
        key: str,
        new: Reading,
        close: Sequence[Memory],
        near: Collection[int] = (),
        one_holder: Callable[[Memory, bool], Awaitable[bool]] | None = None,
    ) -> Memory | None:
        """The closest of ``close`` that is a likely restatement of the new fact (key
        ``key``), linked, never merged: both were filed under one of the person's
        single-valued attributes (``home_city``, ``home_city_2``), or their readings
        say the same one (``same_attribute``; ``near``: ids very close to the new fact)
        and ``one_holder(memory, filed)`` does not read them as two people's (my car and
        my father's read alike as a car); ``filed``: under one key, where only a clear
        reading of two people's counts (my wife's name filed under ``name``, then mine)."""
        named = LINKABLE.get(_unnumbered(key))
        for memory in close:
            if named is not None and _unnumbered(memory.key) == named.key:
                if one_holder is None or await one_holder(memory, True):
                    return memory
        for memory in close:
            if same_attribute(new, await self._reading_of(memory), near=memory.id in near):
                if one_holder is None or await one_holder(memory, False):
                    return memory
        return None


def same_attribute(new: Reading, old: Reading, *, near: bool = False) -> bool:
    """Whether two facts' readings say the same single-valued attribute of the person:
    both nearest it and either clear (or the two very close, ``near``); or one clearly
    it and the other leaving room for it (``Reading.could_be``). A pair is read
    together: each fact's clear reading is the prior of the other's unclear one."""
    top = new.top
    if top is not None and top.key in LINKABLE and old.top == top:
        if new.attribute is not None or old.attribute is not None or near:
            return True
    for clear, other in ((old, new), (new, old)):
        attribute = clear.attribute
        if attribute is not None and attribute.key in LINKABLE and other.could_be(attribute):
            return True
    return False


def asked(question: Reading) -> list[Attribute]:
    """The person's single-valued attributes a question may ask about ("Where do I live
    now?": the home city), read from its query vector as a fact is read: the one it
    reads clearly or by both readings (``Reading.named``), else those it leaves room for
    (``Reading.could_be``: "Where do I work?" nearest a home city, then an employer by
    the centroids and next in the space). Of the tuning restatements' questions (267),
    212 read clearly and 240 by both; of the 140 whose attribute is labelled, 109 and 125
    read right, none wrong."""
    sure = question.attribute or question.named
    if sure is not None:
        return [sure] if sure.key in LINKABLE else []
    room = [question.top, question.plain if question.plain == question.second else None]
    return list({a.key: a for a in room if a is not None and a.key in LINKABLE}.values())


def may_answer(reading: Reading, attribute: Attribute) -> bool:
    """Whether a fact may state ``attribute`` (a question's, ``asked``): read as no other
    attribute, clearly or by both readings' agreement, and ``attribute`` among its three
    nearest (the space's two, the plain centroids'). "Trabalho na Petrobras" (an employer,
    unclear) and "Saí da Petrobras e entrei na Embraer" (a car in the space, a home city
    by the centroids, then an employer) may both answer "Onde eu trabalho?"; "I work as
    a pilot" (an occupation by both) may not answer "Which company do I work for?"."""
    if reading.attribute not in (None, attribute) or reading.named not in (None, attribute):
        return False
    return attribute in (reading.top, reading.plain, reading.second)


def _keep(cache: OrderedDict[_K, _V], key: _K, reading: _V, size: int) -> None:
    cache[key] = reading
    cache.move_to_end(key)
    while len(cache) > size:
        cache.popitem(last=False)


def _unnumbered(key: str) -> str:
    """``home_city_2`` -> ``home_city``: the name a second fact of that name was given."""
    head, _, tail = key.rpartition("_")
    return head if head and tail.isdigit() else key


def _save(path: Path, vectors: np.ndarray) -> None:
    import numpy as np

    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        private_dir(path.parent)
        private_file(tmp)
        with tmp.open("wb") as out:
            np.save(out, vectors)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)  # a cache: the next run embeds them again


def example_texts() -> tuple[list[str], list[int]]:
    """Every attribute's examples in the neutral frame, and each one's attribute index."""
    texts, rows = [], []
    for i, attribute in enumerate(ATTRIBUTES):
        texts += [embed_text(*NEUTRAL, text) for text in attribute.descriptions]
        rows += [i] * len(attribute.descriptions)
    return texts, rows


def prototypes_name(embedder_id: str, texts: Sequence[str]) -> str:
    """The examples' vectors' file name: this embedder's, these very texts'."""
    digest = hashlib.sha256("\n".join([embedder_id, *texts]).encode()).hexdigest()[:16]
    return f"prototypes-{digest}.npy"


def space_name(embedder_id: str, texts: Sequence[str], rows: Sequence[int]) -> str:
    """The fitted space's file name: these examples' vectors, their attributes, this
    ridge (a change to the fit itself is caught by the test that refits it)."""
    parts = [prototypes_name(embedder_id, texts), ",".join(map(str, rows)), repr(RIDGE)]
    return f"space-{hashlib.sha256(chr(10).join(parts).encode()).hexdigest()[:16]}.npz"


_SPACE_FIELDS = ("centroids", "mean", "projection", "separated")


def load_arrays(path: Path, fields: Sequence[str]) -> list[np.ndarray] | None:
    """The ``fields`` of a shipped ``.npz``, float32 and read-only (one copy shared by
    every reader); None when absent or damaged."""
    import numpy as np

    try:
        with np.load(path) as stored:
            arrays = [np.asarray(stored[field], dtype=np.float32) for field in fields]
    except (OSError, ValueError, KeyError):
        return None
    for array in arrays:
        array.flags.writeable = False
    return arrays


def load_space(path: Path) -> AttributeSpace | None:
    """A shipped fitted space, read-only; None when absent or damaged (then fitted)."""
    arrays = load_arrays(path, _SPACE_FIELDS)
    return None if arrays is None else AttributeSpace(*arrays)


def save_space(path: Path, space: AttributeSpace) -> None:
    """Ship a fitted space (``bench/bench_identity.py --write-prototypes``)."""
    import numpy as np

    np.savez(path, **{field: getattr(space, field) for field in _SPACE_FIELDS})


@dataclass(frozen=True)
class AttributeSpace:
    """The attributes in one embedder's space: their plain centroids, and the
    discriminant (``mean``, ``projection``) with their centroids there."""

    centroids: np.ndarray  # (attributes, dim), unit rows
    mean: np.ndarray  # (dim,)
    projection: np.ndarray  # (dim, attributes - 1)
    separated: np.ndarray  # (attributes, attributes - 1), unit rows

    def project(self, vectors: np.ndarray) -> np.ndarray:
        """Vectors (rows) in the attribute space, unit length."""
        import numpy as np

        z = (vectors - self.mean) @ self.projection
        unit: np.ndarray = z / np.maximum(np.linalg.norm(z, axis=-1, keepdims=True), 1e-9)
        return unit

    def read(self, vector: np.ndarray) -> Reading:
        """A fact's reading from its passage vector (see the module doc)."""
        plain = self.centroids @ vector
        return read_scores(self.separated @ self.project(vector), int(plain.argmax()))


_FITTED: OrderedDict[bytes, AttributeSpace] = OrderedDict()
_FITTED_KEPT = 4
_fitted_lock = threading.Lock()


def fitted_space(vectors: np.ndarray, rows: Sequence[int]) -> AttributeSpace:
    """``fit_space``, once per process for the same examples' vectors: every memory
    service opened (each command run in process, each test's fresh home, a service
    reopened) read the same shipped vectors and fitted them again, ~0.05-0.6 CPU-s
    apiece (BLAS threads on a busy machine). Keyed by the vectors' and rows' bytes,
    so another embedder's (or changed) examples are fitted anew."""
    import numpy as np

    key = hashlib.sha256(vectors.tobytes() + np.asarray(rows, dtype=np.int64).tobytes()).digest()
    with _fitted_lock:
        space = _FITTED.get(key)
    if space is None:
        space = fit_space(vectors, rows)
        for shared in (space.centroids, space.mean, space.projection, space.separated):
            shared.flags.writeable = False  # one space, read by every service
        with _fitted_lock:
            _FITTED[key] = space
            while len(_FITTED) > _FITTED_KEPT:
                _FITTED.popitem(last=False)
    return space


def class_means(x: np.ndarray, which: np.ndarray, classes: int) -> np.ndarray:
    """Each class's mean row of ``x`` (``which``: each row's class, 0..classes-1)."""
    import numpy as np

    return np.stack([x[which == i].mean(axis=0) for i in range(classes)])


def discriminant(x: np.ndarray, which: np.ndarray, classes: int, ridge: float) -> tuple[np.ndarray, np.ndarray]:
    """(mean, projection): the regularised linear discriminant of rows ``x`` of classes
    ``which`` — the directions that spread the classes' centroids apart the most
    against the spread of each class's own rows (``ridge`` of the mean spread added),
    ``classes - 1`` of them, the most separating first."""
    import numpy as np

    mean = x.mean(axis=0)
    means = class_means(x, which, classes)
    within = sum(((x[which == i] - means[i]).T @ (x[which == i] - means[i]) for i in range(classes)), np.zeros((x.shape[1],) * 2))
    within = within / len(x)
    within += ridge * np.trace(within) / len(within) * np.eye(len(within))
    between = (means - mean).T @ ((means - mean) * np.bincount(which, minlength=classes)[:, None]) / len(x)
    values, vecs = np.linalg.eigh(within)
    whiten = vecs / np.sqrt(values)
    _, turn = np.linalg.eigh(whiten.T @ between @ whiten)
    projection: np.ndarray = (whiten @ turn)[:, ::-1][:, : classes - 1]
    return mean, projection


def fit_space(vectors: np.ndarray, rows: Sequence[int]) -> AttributeSpace:
    """The attributes' discriminant (``discriminant``, ``RIDGE``) of the examples
    (``rows``: their attribute), with the plain centroids and the centroids there."""
    import numpy as np

    which = np.asarray(rows)
    x = vectors.astype(np.float64)
    classes = range(len(ATTRIBUTES))
    mean, projection = discriminant(x, which, len(ATTRIBUTES), RIDGE)
    means = class_means(x, which, len(ATTRIBUTES))
    plain = means / np.linalg.norm(means, axis=1, keepdims=True)
    space = AttributeSpace(plain.astype(np.float32), mean.astype(np.float32), projection.astype(np.float32), plain)
    separated = np.stack([space.project(x[which == i]).mean(axis=0) for i in classes])
    separated /= np.linalg.norm(separated, axis=1, keepdims=True)
    return AttributeSpace(space.centroids, space.mean, space.projection, separated.astype(np.float32))


def read_scores(scores: np.ndarray, plain_top: int) -> Reading:
    """A reading from the cosines with every attribute in the attribute space; clear
    when the best leads by ``MARGIN`` and is also the plain centroids' nearest."""
    ranked = sorted(enumerate(scores.tolist()), key=lambda item: -item[1])
    named = ATTRIBUTES[plain_top] if ranked[0][0] == plain_top else None
    attribute = named if ranked[0][1] - ranked[1][1] >= MARGIN else None
    mine = max(s for i, s in ranked if ATTRIBUTES[i].category is Category.USER)
    theirs = max(s for i, s in ranked if ATTRIBUTES[i].category is Category.PROJECT)
    owner = None
    if abs(mine - theirs) >= OWNER_MARGIN:
        owner = Category.USER if mine > theirs else Category.PROJECT
    return Reading(
        attribute, owner, ATTRIBUTES[ranked[0][0]], named, ATTRIBUTES[plain_top], ATTRIBUTES[ranked[1][0]],
        ranked[0][1] - ranked[1][1],
    )
