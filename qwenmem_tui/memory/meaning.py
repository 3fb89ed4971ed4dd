"""What a fact is about, read by meaning: attribute prototypes in the embedder's space.

The multilingual embedder places "J'habite à Lyon", "我住在北京" and "I moved to Berlin"
near one description, "the city where I live". A small set of such descriptions — the
attributes a person or a project commonly has, each with whether it holds one value at
a time and whose it is — lets the write path, with no model and in any language the
embedder reads:

- name a fact's key by its attribute (``home_city``), never by its value;
- file it: the person's facts are ``user`` memories, the project's are ``project`` ones;
- link a likely restatement: a new fact and a close neighbour read as the same
  single-valued attribute (both confidently) are linked as versions, never merged.

An attribute is the centroid of its examples (their mean direction), not its nearest
example: the nearest example is often the one written most like the fact (same
language, same opening words), while the centroid keeps what the examples share, the
attribute. A reading is kept only when its best attribute is clearly ahead of the next
(the margins are calibrated on bench/identity_corpus.jsonl's tuning half); anything
less is "unknown", and unknown never links. The hash embedder has no meaning: nothing
is read.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections import OrderedDict
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from qwenmem_tui.memory.model import Category, Memory, embed_text
from qwenmem_tui.paths import private_dir, private_file

if TYPE_CHECKING:
    import numpy as np

    from qwenmem_tui.memory.embed import Embedder


@dataclass(frozen=True)
class Attribute:
    """One attribute a fact may give a value for, and how it is described."""

    key: str
    category: Category
    single: bool  # one value at a time: a new value replaces the old one
    descriptions: tuple[str, ...]


def _a(key: str, category: Category, single: bool, *descriptions: str) -> Attribute:
    return Attribute(key, category, single, descriptions)


_U, _P = Category.USER, Category.PROJECT
# Example statements, not definitions: a fact sits nearest to facts of its attribute
# with other values (on the tuning half, definitions read 2 in 3 facts as the
# shortest definition's; examples read the attribute). Mostly English: the embedder
# is multilingual; a few other-language forms where its reading was weakest.
ATTRIBUTES: tuple[Attribute, ...] = (
    _a("home_city", _U, True, "I live in Paris", "I moved to Tokyo", "My home is in Madrid",
       "I relocated to Boston", "I reside in Rome"),
    _a("employer", _U, True, "I work at Google", "I now work for Microsoft", "My employer is IBM",
       "I got a job at Amazon"),
    _a("occupation", _U, True, "I work as a doctor", "I am an architect", "My job is lawyer", "I am now a chef"),
    _a("editor", _U, True, "I use Sublime Text as my code editor", "My editor is now Atom",
       "I write code in Notepad++"),
    _a("car", _U, True, "I drive a Honda", "My car is a BMW", "I bought a Tesla and drive it now",
       "I ride in a Ford"),
    _a("phone", _U, True, "My phone is a Nokia", "I switched to a Motorola phone", "My mobile is a Xiaomi",
       "I have a new phone, a OnePlus"),
    _a("browser", _U, True, "My web browser is Opera", "I browse the internet with Edge",
       "I use Brave to surf the web"),
    _a("name", _U, True, "My name is John Smith", "Please call me Maria", "My first name is Pedro"),
    _a("birthday", _U, True, "My birthday is on May 3", "I was born on 12 June 1990"),
    _a("email", _U, True, "My email address is john@example.com", "Write to me at ana@mail.org"),
    _a("coffee", _U, True, "I take my coffee black", "I drink my coffee with milk"),
    _a("timezone", _U, True, "My time zone is UTC+2"),
    _a("family", _U, False, "My sister lives in Rome", "My brother is a teacher", "My mother lives in Oslo"),
    _a("pets", _U, False, "I have a dog named Rex", "My cat is called Luna"),
    _a("hobbies", _U, False, "I play tennis on weekends", "My hobby is painting"),
    _a("likes", _U, False, "I love green tea", "I like pizza"),
    _a("languages", _U, False, "I speak French and German"),
    _a("deploy_target", _P, True, "The project is deployed on Fly.io", "We deploy the app to Heroku now"),
    _a("database", _P, True, "The project uses PostgreSQL as its database", "We moved the data to MySQL"),
    _a("ci", _P, True, "The tests run on GitHub Actions", "CI moved to Jenkins"),
    _a("project_language", _P, True, "The backend is written in Go", "The service is now written in Rust"),
    _a("staging_server", _P, True, "The staging server is staging.example.com"),
    _a("release_date", _P, True, "The release is planned for March 3", "The deadline moved to Friday"),
    _a("team_lead", _P, True, "Ana leads the backend team", "Bruno is now the tech lead of the project"),
)

# Only the person's own attributes link model-free: a project's facts are too varied for
# a few prototypes (two tickets, two database hosts read as one attribute), so theirs
# wait for the model's judgement.
LINKABLE = {a.key: a for a in ATTRIBUTES if a.single and a.category is Category.USER}

MARGIN = 0.006
"""How far the best attribute's cosine must lead the next one's for a reading to count.
On the corpus generator's 501 labelled statements (eleven languages, the tuning
templates): the nearest centroid is right for 487 (nearest example: 479), 453 read
clearly and right, 1 clearly and wrongly ("Guido una Toyota" as ``ci``); at 0.005, 4
wrongly; at 0.008, 403 clearly."""
_CACHE = 4096  # readings of stored memories, by id (a bulk import reads each once)


@dataclass(frozen=True)
class Reading:
    """A fact read by meaning: its attribute when clear, whose it is when clear."""

    attribute: Attribute | None
    owner: Category | None
    top: Attribute | None = None  # the nearest attribute, however narrowly


OWNER_MARGIN = 0.01
"""How far the person's best attribute must lead the project's (or the reverse) for
the reading to say whose the fact is."""
NEUTRAL = (Category.USER, "note")
"""The category and key prototypes and unfiled notes are embedded under: one frame for
all, so the frame says nothing about which attribute a fact reads as."""


class MeaningReader:
    """Reads facts against the prototypes, embedded once per embedder."""

    def __init__(self, embedder: Embedder, cache_dir: Path | None = None) -> None:
        self.embedder = embedder
        # Where the prototypes' vectors are kept between runs: embedding ~70 texts costs
        # a few seconds of the real model, a first /remember must not pay them.
        self.cache_dir = cache_dir
        self._prototypes: np.ndarray | None = None
        self._rows: list[int] = []  # prototype row -> ATTRIBUTES index
        self._lock = asyncio.Lock()
        self._readings: OrderedDict[int, Reading] = OrderedDict()

    @property
    def meaningful(self) -> bool:
        """Whether the embedder's vectors carry meaning (the hash one's do not)."""
        return not self.embedder.id.startswith("hash")

    async def prepare(self) -> None:
        """Embed (or read from the cache) the prototypes now, ahead of the first write."""
        await self._load()

    async def _load(self) -> np.ndarray:
        async with self._lock:
            if self._prototypes is None:
                texts, rows = [], []
                for i, attribute in enumerate(ATTRIBUTES):
                    texts += [embed_text(*NEUTRAL, text) for text in attribute.descriptions]
                    rows += [i] * len(attribute.descriptions)
                self._prototypes = centroids(await self._vectors(texts), rows)
                self._rows = list(range(len(ATTRIBUTES)))
            return self._prototypes

    async def _vectors(self, texts: list[str]) -> np.ndarray:
        """The prototypes' vectors: from the cache file of this embedder and these
        texts, else embedded and kept there (0600, replaced atomically)."""
        import numpy as np

        digest = hashlib.sha256("\n".join([self.embedder.id, *texts]).encode()).hexdigest()[:16]
        path = self.cache_dir / f"prototypes-{digest}.npy" if self.cache_dir else None
        if path is not None:
            try:
                cached: np.ndarray = await asyncio.to_thread(np.load, path)
                if cached.shape[0] == len(texts):
                    return cached
            except (OSError, ValueError):
                pass  # absent or damaged: embedded again
        vectors = await self.embedder.embed_passages(texts)
        if path is not None:
            await asyncio.to_thread(_save, path, vectors)
        return vectors

    async def read(self, vector: np.ndarray | None) -> Reading:
        """What the fact whose passage vector is ``vector`` is about."""
        if vector is None or not self.meaningful:
            return Reading(None, None)
        return read_scores(await self._load() @ vector, self._rows)

    async def read_note(self, text: str) -> Reading:
        """``read`` for a note not filed yet (one passage embedding, in the neutral frame)."""
        if not self.meaningful:
            return Reading(None, None)
        [vector] = await self.embedder.embed_passages([embed_text(*NEUTRAL, text)])
        return await self.read(vector)

    def remember(self, memory_id: int, reading: Reading) -> None:
        """Keep a stored memory's reading: later writes compare against it for free."""
        self._readings[memory_id] = reading
        self._readings.move_to_end(memory_id)
        while len(self._readings) > _CACHE:
            self._readings.popitem(last=False)

    async def _reading_of(self, memory: Memory) -> Reading:
        found = self._readings.get(memory.id)
        if found is None:
            [vector] = await self.embedder.embed_passages([memory.embed_text()])
            found = await self.read(vector)
            self.remember(memory.id, found)
        return found

    async def likely_restatement(
        self, key: str, new: Reading, close: Sequence[Memory], near: Collection[int] = ()
    ) -> Memory | None:
        """The closest of ``close`` that is a likely restatement of the new fact (key
        ``key``), linked, never merged: both were filed under one of the person's
        single-valued attributes (``home_city``, ``home_city_2``), or both are nearest
        the same one and either reading is clear or the memory is in ``near`` (very
        close to the new fact)."""
        named = LINKABLE.get(_unnumbered(key))
        for memory in close:
            if named is not None and _unnumbered(memory.key) == named.key:
                return memory
        top = new.top
        if top is None or top.key not in LINKABLE:
            return None
        for memory in close:
            old = await self._reading_of(memory)
            clear = new.attribute is not None or old.attribute is not None or memory.id in near
            if old.top == top and clear:
                return memory
        return None


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


def centroids(vectors: np.ndarray, rows: Sequence[int]) -> np.ndarray:
    """Each attribute's examples' mean direction (unit length), one row per attribute."""
    import numpy as np

    which = np.asarray(rows)
    means = np.stack([vectors[which == i].mean(axis=0) for i in range(len(ATTRIBUTES))])
    unit: np.ndarray = means / np.linalg.norm(means, axis=1, keepdims=True)
    return unit


def read_scores(scores: np.ndarray, rows: Sequence[int]) -> Reading:
    """A reading from the cosines with every prototype (``rows``: their attribute)."""
    best: dict[int, float] = {}
    for row, score in zip(rows, scores.tolist(), strict=True):
        best[row] = max(best.get(row, -1.0), score)
    ranked = sorted(best.items(), key=lambda item: -item[1])
    attribute = None
    if len(ranked) > 1 and ranked[0][1] - ranked[1][1] >= MARGIN:
        attribute = ATTRIBUTES[ranked[0][0]]
    mine = max(s for i, s in best.items() if ATTRIBUTES[i].category is Category.USER)
    theirs = max(s for i, s in best.items() if ATTRIBUTES[i].category is Category.PROJECT)
    owner = None
    if abs(mine - theirs) >= OWNER_MARGIN:
        owner = Category.USER if mine > theirs else Category.PROJECT
    return Reading(attribute, owner, ATTRIBUTES[ranked[0][0]])
